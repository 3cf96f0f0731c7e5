#pragma once
// The text exposition format (version 0.0.4), written directly: byte for byte what the
// registry's prometheus-cpp TextSerializer writes, for families too large for its data model
// (which holds every label as two strings until the text is written: the Istio families,
// docs/benchmarks/telemetry.md). TextWriter appends; TextSize counts the same calls, so that
// a writer sizes its text first and reserves it once.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::telemetry {

class TextWriter {
 public:
  explicit TextWriter(std::string& out) : out_(out) {}
  // Names, punctuation, HELP text: written as they are.
  void raw(std::string_view s) { out_.append(s); }
  // A label value: backslash, double quote and newline written \\, \" and \n.
  void escaped(std::string_view value);
  // A sample value, as TextSerializer writes the double it would be given.
  void number(uint64_t value);
  // Text written before, again (the bytes [offset, offset + size) of the output).
  void repeat(size_t offset, size_t size) { out_.append(out_, offset, size); }
  // Where the next byte goes.
  size_t size() const { return out_.size(); }

 private:
  std::string& out_;
};

class TextSize {
 public:
  void raw(std::string_view s) { bytes_ += s.size(); }
  void escaped(std::string_view value);
  void number(uint64_t value);
  void repeat(size_t /*offset*/, size_t size) { bytes_ += size; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

// The HELP and TYPE lines of a counter family.
template <typename Out>
void counterHeader(Out& out, std::string_view name, std::string_view help) {
  out.raw("# HELP ");
  out.raw(name);
  out.raw(" ");
  out.raw(help);
  out.raw("\n# TYPE ");
  out.raw(name);
  out.raw(" counter\n");
}

}  // namespace ferry::telemetry
