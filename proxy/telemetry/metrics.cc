#include "proxy/telemetry/metrics.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <new>
#include <stdexcept>
#include <sstream>

#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace ferry::telemetry {
namespace {

prometheus::ClientMetric& sample(std::vector<prometheus::MetricFamily>& families, size_t index,
                                 auto&& labels) {
  auto& metric = families[index].metric.emplace_back();
  metric.label.reserve(labels.size());
  for (const Label& l : labels) metric.label.push_back({std::string(l.name), std::string(l.value)});
  return metric;
}

void setValue(prometheus::MetricFamily& family, prometheus::ClientMetric& metric, double value) {
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
}

}  // namespace

Family& Family::add(double value, std::initializer_list<Label> labels) {
  setValue(out_.families_[index_], sample(out_.families_, index_, labels), value);
  return *this;
}

Family& Family::add(double value, const std::vector<Label>& labels) {
  setValue(out_.families_[index_], sample(out_.families_, index_, labels), value);
  return *this;
}

Family& Family::add(const common::DurationHistogram& histogram, std::initializer_list<Label> labels) {
  auto& metric = sample(out_.families_, index_, labels);
  auto snap = histogram.snapshot();
  metric.histogram.sample_count = snap.count;
  metric.histogram.sample_sum = snap.sum_seconds;
  for (size_t i = 0; i < snap.bounds.size(); ++i) {
    metric.histogram.bucket.push_back({snap.cumulative[i], snap.bounds[i]});
  }
  metric.histogram.bucket.push_back({snap.count, std::numeric_limits<double>::infinity()});
  return *this;
}

Family Exposition::begin(std::string_view name, std::string_view help, int type) {
  auto& f = families_.emplace_back();
  f.name = name;
  f.help = help;
  f.type = static_cast<prometheus::MetricType>(type);
  return Family(*this, families_.size() - 1);
}

Family Exposition::counter(std::string_view name, std::string_view help) {
  return begin(name, help, static_cast<int>(prometheus::MetricType::Counter));
}

Family Exposition::gauge(std::string_view name, std::string_view help) {
  return begin(name, help, static_cast<int>(prometheus::MetricType::Gauge));
}

Family Exposition::histogram(std::string_view name, std::string_view help) {
  return begin(name, help, static_cast<int>(prometheus::MetricType::Histogram));
}

// Room for the families stated after a collector's own text, so that they do not copy the
// text to grow it: every other family of ferryd together is a few KiB (a few dozen families,
// per-worker and per-reason samples).
constexpr size_t kRoomAfterText = 64 * 1024;

std::string& Exposition::text(size_t more) {
  flush();
  text_.reserve(text_.size() + more + kRoomAfterText);
  return text_;
}

void Exposition::flush() {
  if (families_.empty()) return;
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families_);
  if (text_.empty()) {
    text_ = std::move(out).str();
  } else {
    text_ += std::move(out).str();
  }
  families_.clear();
}

void Exposition::drainAbove(size_t threshold) {
  if (gzip_ == nullptr) return;
  flush();
  if (text_.size() < threshold) return;
  gzip_->write(text_);
  text_.clear();  // keeps its capacity: the next part is written into the same buffer
}

struct Gzip::State {
  z_stream z{};
};

Gzip::Gzip() : state_(std::make_unique<State>()) {
  // windowBits 15 + 16: a gzip header and trailer; level 1: the text repeats itself so much
  // that the fastest level already shrinks it about twentyfold.
  if (deflateInit2(&state_->z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::bad_alloc();
  }
}

Gzip::~Gzip() { deflateEnd(&state_->z); }

void Gzip::run(std::string_view in, int flush) {
  z_stream& z = state_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  do {
    size_t used = out_.size();
    size_t room = std::max<size_t>(deflateBound(&z, z.avail_in), 4096);
    out_.resize(used + room);
    z.next_out = reinterpret_cast<Bytef*>(out_.data() + used);
    z.avail_out = static_cast<uInt>(room);
    int rc = deflate(&z, flush);
    out_.resize(used + room - z.avail_out);
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR) throw std::runtime_error("gzip: deflate failed");  // a bug, never input
  } while (z.avail_in > 0 || (flush == Z_FINISH));
}

void Gzip::write(std::string_view text) {
  // In parts below uInt's range (a part is a drain's worth: far below it anyway).
  constexpr size_t kPart = 1u << 30;
  for (size_t at = 0; at < text.size(); at += kPart) run(text.substr(at, kPart), Z_NO_FLUSH);
}

std::string Gzip::finish() {
  run({}, Z_FINISH);
  return std::move(out_);
}

Registry::Registration::Registration(Registration&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)), it_(other.it_) {}

Registry::Registration& Registry::Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    reset();
    registry_ = std::exchange(other.registry_, nullptr);
    it_ = other.it_;
  }
  return *this;
}

Registry::Registration::~Registration() { reset(); }

void Registry::Registration::reset() {
  if (registry_ == nullptr) return;
  std::lock_guard lock(registry_->mu_);
  registry_->collectors_.erase(it_);
  registry_ = nullptr;
}

Registry::Registration Registry::add(Collector collector) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(collector));
  return Registration(this, std::prev(collectors_.end()));
}

std::string Registry::render() const {
  std::lock_guard lock(mu_);
  return renderText([&](Exposition& out) {
    for (const auto& collect : collectors_) collect(out);
  });
}

std::string Registry::renderGzip() const {
  std::lock_guard lock(mu_);
  return telemetry::renderGzip([&](Exposition& out) {
    for (const auto& collect : collectors_) collect(out);
  });
}

std::string renderGzip(const Registry::Collector& collector, size_t drain_threshold) {
  std::vector<prometheus::MetricFamily> families;
  std::string text;
  Gzip gzip;
  Exposition out(families, text, &gzip, drain_threshold);
  collector(out);
  out.drainAbove(0);
  return gzip.finish();
}

std::string renderText(const Registry::Collector& collector) {
  std::vector<prometheus::MetricFamily> families;
  std::string text;
  Exposition out(families, text);
  collector(out);
  out.flush();
  return text;
}

}  // namespace ferry::telemetry
