#pragma once
// The one metrics registry of ferryd (docs/operations.md, "Metrics"). Each part of the daemon
// registers a collector: a function that, at scrape time, reads the part's own counters
// (relaxed atomics the workers bump without a lock) and states them as metric families. The
// registry serializes them with prometheus-cpp's TextSerializer; the one exception is a part
// whose families are too large for its data model, which appends their text itself
// (Exposition::text, written with text_format.h). prometheus-cpp's headers stay in metrics.cc.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/common/histogram.h"

namespace prometheus {
struct MetricFamily;
}

namespace ferry::telemetry {

struct Label {
  std::string_view name;
  std::string_view value;
};

class Exposition;

// A gzip stream (RFC 1952) written in parts: what a scrape sends a scraper that accepts it
// (Prometheus always does), compressed as the text is written.
class Gzip {
 public:
  Gzip();
  ~Gzip();
  Gzip(const Gzip&) = delete;
  Gzip& operator=(const Gzip&) = delete;
  // Compresses `text` onto the output.
  void write(std::string_view text);
  // Ends the stream: the output, whole.
  std::string finish();

 private:
  void run(std::string_view in, int flush);
  struct State;
  std::unique_ptr<State> state_;
  std::string out_;
};

// One metric family being stated: add a sample per label set.
class Family {
 public:
  Family& add(double value, std::initializer_list<Label> labels = {});
  Family& add(double value, const std::vector<Label>& labels);
  Family& add(const common::DurationHistogram& histogram, std::initializer_list<Label> labels = {});

 private:
  friend class Exposition;
  Family(Exposition& out, size_t index) : out_(out), index_(index) {}
  Exposition& out_;
  size_t index_;
};

// What a collector writes into during one scrape: families it states, and text it writes.
class Exposition {
 public:
  Exposition(std::vector<prometheus::MetricFamily>& families, std::string& text, Gzip* gzip = nullptr,
             size_t drain_threshold = kDrainThreshold)
      : families_(families), text_(text), gzip_(gzip), drain_threshold_(drain_threshold) {}
  Family counter(std::string_view name, std::string_view help);
  Family gauge(std::string_view name, std::string_view help);
  Family histogram(std::string_view name, std::string_view help);
  // A family of one sample without labels.
  void counter(std::string_view name, std::string_view help, double value) { counter(name, help).add(value); }
  void gauge(std::string_view name, std::string_view help, double value) { gauge(name, help).add(value); }

  // The text of the scrape so far, for a collector to append whole families to (text_format.h)
  // in their place: after what was stated before, before what is stated after. `more`: the
  // bytes it is about to append, reserved at once.
  std::string& text(size_t more);
  // Serializes the families stated since the last text() into the text (the registry, at the end).
  void flush();
  // Whether the scrape is compressed as it is written (the scraper accepts gzip): a collector
  // that writes much text may then write it in parts, calling drain() between them, so that
  // the whole text is never held (docs/benchmarks/telemetry.md).
  bool streaming() const { return gzip_ != nullptr; }
  // Streaming: compresses the text written so far once it is at least the drain threshold
  // (256 KiB), leaving the text empty. Otherwise nothing.
  void drain() { drainAbove(drain_threshold_); }
  void drainAbove(size_t threshold);
  static constexpr size_t kDrainThreshold = 256 * 1024;

 private:
  friend class Family;
  Family begin(std::string_view name, std::string_view help, int type);  // type: prometheus::MetricType
  std::vector<prometheus::MetricFamily>& families_;
  std::string& text_;
  Gzip* gzip_;
  size_t drain_threshold_;
};

class Registry {
 public:
  using Collector = std::function<void(Exposition&)>;

  // Unregisters its collector when destroyed (a part that goes away takes its metrics along).
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& other) noexcept;
    Registration& operator=(Registration&& other) noexcept;
    ~Registration();

   private:
    friend class Registry;
    Registration(Registry* registry, std::list<Collector>::iterator it) : registry_(registry), it_(it) {}
    void reset();
    Registry* registry_ = nullptr;
    std::list<Collector>::iterator it_;
  };

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Any thread. The collector runs on the thread that renders, once per scrape.
  [[nodiscard]] Registration add(Collector collector);

  // The text exposition (version 0.0.4) of every collector, in registration order.
  std::string render() const;
  // The same, gzip-compressed as it is written (Content-Encoding: gzip).
  std::string renderGzip() const;

 private:
  mutable std::mutex mu_;  // collectors_ only: held while rendering, never by a worker
  std::list<Collector> collectors_;
};

// The text of one collector alone (tests, tools).
std::string renderText(const Registry::Collector& collector);
// The same text, gzip-compressed as it is written, the collectors draining what they write
// (Exposition::drain) at `drain_threshold` bytes.
std::string renderGzip(const Registry::Collector& collector, size_t drain_threshold = Exposition::kDrainThreshold);
// The text of one part's `collect(Exposition&)` alone.
template <typename Part>
std::string textOf(const Part& part) {
  return renderText([&](Exposition& out) { part.collect(out); });
}

}  // namespace ferry::telemetry
