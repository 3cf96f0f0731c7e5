#pragma once
// Reading ferryd's access records in a test: every line it logs, captured through the
// logger's sink, and a JSON record parsed and checked against the documented fields
// (docs/operations.md, "Access log").
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include "proxy/common/log.h"
#include "tests/integration/loopback_lab.h"

namespace ferry::testing {

// Every line ferryd logs while it lives (the access records among them).
class LogCapture {
 public:
  LogCapture() {
    common::setLogSink([this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { common::setLogSink(nullptr); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The lines that contain every one of `needles`, once there are at least `n` (waits up
  // to 10 s: a record is written just after the connection closes).
  std::vector<std::string> lines(const std::vector<std::string>& needles, size_t n = 1) {
    std::vector<std::string> found;
    waitFor([&] {
      found.clear();
      std::lock_guard lock(mu_);
      for (const auto& line : lines_) {
        bool all = true;
        for (const auto& needle : needles) all = all && line.find(needle) != std::string::npos;
        if (all) found.push_back(line);
      }
      return found.size() >= n;
    });
    return found;
  }
  std::string all() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& line : lines_) out += line + "\n";
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// A JSON record: every field docs/operations.md lists, by name (null or absent-as-null
// values read as "").
struct JsonRecord {
  std::map<std::string, std::string> text;
  std::map<std::string, uint64_t> number;
  std::string raw;
};

inline constexpr const char* kTextFields[] = {"timestamp", "direction", "source_address", "destination_address",
                                       "source_workload", "source_principal", "destination_workload",
                                       "destination_principal", "peer", "reason", "policy_verdict", "policy",
                                       "detail"};
inline constexpr const char* kNumberFields[] = {"bytes_sent", "bytes_received", "duration_ms"};

// Parses `line` as one JSON object with exactly the documented fields (each string or
// null, each number an unsigned integer); a failure is reported on `line`.
inline std::optional<JsonRecord> parseRecord(const std::string& line) {
  boost::system::error_code ec;
  auto value = boost::json::parse(line, ec);
  if (ec || !value.is_object()) {
    ADD_FAILURE() << "not a JSON object (" << ec.message() << "): " << line;
    return std::nullopt;
  }
  const auto& object = value.as_object();
  EXPECT_EQ(object.size(), std::size(kTextFields) + std::size(kNumberFields)) << line;
  JsonRecord record;
  record.raw = line;
  for (const char* name : kTextFields) {
    const auto* field = object.if_contains(name);
    if (field == nullptr || !(field->is_string() || field->is_null())) {
      ADD_FAILURE() << "field " << name << " missing or not a string: " << line;
      return std::nullopt;
    }
    record.text[name] = field->is_string() ? std::string(field->as_string()) : "";
  }
  for (const char* name : kNumberFields) {
    const auto* field = object.if_contains(name);
    if (field == nullptr || !(field->is_uint64() || field->is_int64())) {
      ADD_FAILURE() << "field " << name << " missing or not an integer: " << line;
      return std::nullopt;
    }
    record.number[name] = field->to_number<uint64_t>();
  }
  return record;
}

// The one JSON record of `direction` that ended with `reason` (waits for it); a missing,
// repeated or malformed one fails the test.
inline JsonRecord onlyRecord(LogCapture& log, const std::string& direction, const std::string& reason) {
  auto lines = log.lines({"{\"timestamp\":", "\"direction\":\"" + direction + "\"", "\"reason\":\"" + reason + "\""});
  EXPECT_EQ(lines.size(), 1u) << log.all();
  if (lines.empty()) return {};
  auto parsed = parseRecord(lines[0]);
  return parsed ? *parsed : JsonRecord{};
}

}  // namespace ferry::testing
