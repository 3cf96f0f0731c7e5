#include "proxy/ca/review_gate.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ferry::ca {
namespace {

std::string digestOf(std::string_view token) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d);
  return std::string(reinterpret_cast<const char*>(d), sizeof(d));
}

bool base64url(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

}  // namespace

std::string ReviewGate::shapeError(std::string_view token) {
  size_t first = token.find('.');
  size_t second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) {
    return "the bearer token is not a JWT (three dot-separated parts), as service-account tokens are";
  }
  if (!base64url(token.substr(0, first)) || !base64url(token.substr(first + 1, second - first - 1)) ||
      !base64url(token.substr(second + 1))) {
    return "the bearer token is not a JWT (each part base64url), as service-account tokens are";
  }
  return "";
}

std::optional<TokenReview> ReviewGate::cached(std::string_view token, Clock::time_point now) {
  auto it = reviews_.find(digestOf(token));
  if (it == reviews_.end()) return std::nullopt;
  if (now - it->second.at >= settings_.ttl) {
    order_.erase(it->second.order);
    reviews_.erase(it);
    return std::nullopt;
  }
  return it->second.review;
}

void ReviewGate::remember(std::string_view token, const TokenReview& review, Clock::time_point now) {
  std::string key = digestOf(token);
  if (auto it = reviews_.find(key); it != reviews_.end()) {
    order_.erase(it->second.order);
    reviews_.erase(it);
  }
  order_.push_back(key);
  reviews_[key] = Entry{review, now, std::prev(order_.end())};
  while (reviews_.size() > settings_.max_cached) {
    reviews_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<std::chrono::seconds> ReviewGate::takeReview(const std::string& client, Clock::time_point now) {
  // Buckets full again are forgotten: the map holds only clients that reviewed lately.
  if (buckets_.size() > 4 * settings_.max_cached) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      auto here = it++;
      double elapsed = std::chrono::duration<double>(now - here->second.at).count();
      if (here->second.tokens + elapsed * settings_.per_second >= settings_.burst) buckets_.erase(here);
    }
  }
  auto [it, added] = buckets_.try_emplace(client);
  Bucket& b = it->second;
  if (added) {
    b.tokens = settings_.burst;
  } else {
    double elapsed = std::max(0.0, std::chrono::duration<double>(now - b.at).count());
    b.tokens = std::min(settings_.burst, b.tokens + elapsed * settings_.per_second);
  }
  b.at = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return std::nullopt;
  }
  return std::chrono::seconds(static_cast<int64_t>(std::ceil((1 - b.tokens) / settings_.per_second)));
}

}  // namespace ferry::ca
