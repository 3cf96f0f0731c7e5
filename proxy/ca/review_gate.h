#pragma once
// What stands between a sign request's bearer token and a TokenReview (docs/ferry-ca.md,
// "Token reviews"): each review is a request to the API server, so a flood of made-up tokens
// must not become a flood there. Checked in this order, each refusal counted by the caller:
//  1. the token's shape: a service-account token is a JWT (three base64url segments), so
//     anything else is refused without asking;
//  2. a review of the same token (by its SHA-256) answered within ttl is reused, negative
//     ones included: one bad token sent a thousand times costs one review;
//  3. a client address may cause at most `per_second` reviews a second (a bucket of `burst`):
//     a node asks with one token, which 2. answers after its first review, so only made-up
//     tokens meet this limit.
// Single-threaded (ferry-ca's io thread).
#include <chrono>
#include <cstddef>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "proxy/ca/authorizer.h"

namespace ferry::ca {

struct ReviewGateSettings {
  // A review is reused this long. A token revoked meanwhile (its pod deleted) is still
  // refused: authorization checks the caller's pod in the live pod view.
  std::chrono::seconds ttl{10};
  double per_second = 5;
  double burst = 20;
  size_t max_cached = 10'000;  // past it the oldest review is forgotten first
};

class ReviewGate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ReviewGate(ReviewGateSettings settings = {}) : settings_(settings) {}

  // Why `token` cannot be a service-account token, or "" when it can.
  static std::string shapeError(std::string_view token);
  // A review of this token made within ttl, if any.
  std::optional<TokenReview> cached(std::string_view token, Clock::time_point now);
  void remember(std::string_view token, const TokenReview& review, Clock::time_point now);
  // Whether `client` (an address) may cause one more review now; when not, the seconds until
  // it may.
  std::optional<std::chrono::seconds> takeReview(const std::string& client, Clock::time_point now);

 private:
  struct Entry {
    TokenReview review;
    Clock::time_point at;
    std::list<std::string>::iterator order;
  };
  struct Bucket {
    double tokens = 0;
    Clock::time_point at{};
  };
  ReviewGateSettings settings_;
  absl::flat_hash_map<std::string, Entry> reviews_;  // by SHA-256 of the token
  std::list<std::string> order_;                     // oldest first
  absl::flat_hash_map<std::string, Bucket> buckets_;  // by client address
};

}  // namespace ferry::ca
