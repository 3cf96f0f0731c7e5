#pragma once
// identity::Clock that moves only when a test says so. It starts at the real time: the
// certificates a CA signs carry real validity times. Thread-safe (a source may read it on
// its own thread): header-only, linked by tests only.
#include <chrono>
#include <mutex>

#include "proxy/identity/ca_cert_source.h"

namespace ferry::test_support {

class FakeClock : public identity::Clock {
 public:
  std::chrono::system_clock::time_point now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  void advance(std::chrono::system_clock::duration d) {
    std::lock_guard lock(mu_);
    now_ += d;
  }

 private:
  mutable std::mutex mu_;
  std::chrono::system_clock::time_point now_ = std::chrono::system_clock::now();
};

}  // namespace ferry::test_support
