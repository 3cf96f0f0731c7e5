#include "proxy/policy/policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ferry::policy {

bool StringMatch::matches(std::string_view value) const {
  switch (kind) {
    case Kind::kExact:
      return value == text;
    case Kind::kPrefix:
      return value.size() >= text.size() && value.substr(0, text.size()) == text;
    case Kind::kSuffix:
      return value.size() >= text.size() && value.substr(value.size() - text.size()) == text;
    case Kind::kPresence:
      return !value.empty();
  }
  return false;
}

std::string StringMatch::str() const {
  switch (kind) {
    case Kind::kExact:
      return text;
    case Kind::kPrefix:
      return text + "*";
    case Kind::kSuffix:
      return "*" + text;
    case Kind::kPresence:
      return "*";
  }
  return text;
}

common::IpAddress IpBlock::masked(const common::IpAddress& ip, uint8_t prefix_len) {
  if (ip.is_v4()) {
    uint32_t mask = prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - std::min<int>(prefix_len, 32));
    return boost::asio::ip::address_v4(ip.to_v4().to_uint() & mask);
  }
  auto bytes = ip.to_v6().to_bytes();
  for (int i = 0; i < 16; ++i) {
    int keep = std::clamp(prefix_len - i * 8, 0, 8);
    bytes[i] &= static_cast<uint8_t>(keep == 0 ? 0 : 0xff << (8 - keep));
  }
  return boost::asio::ip::address_v6(bytes);
}

bool IpBlock::contains(const common::IpAddress& ip) const {
  auto a = common::canonicalIp(ip);
  return a.is_v4() == network.is_v4() && masked(a, prefix_len) == network;
}

std::string IpBlock::str() const { return absl::StrCat(network.to_string(), "/", prefix_len); }

const char* actionName(Action action) {
  switch (action) {
    case Action::kAllow:
      return "ALLOW";
    case Action::kDeny:
      return "DENY";
    case Action::kAudit:
      return "AUDIT";
  }
  return "?";
}

const char* kindName(Kind kind) {
  return kind == Kind::kAuthorizationPolicy ? "AuthorizationPolicy" : "PeerAuthentication";
}

const char* mtlsModeName(MtlsMode mode) {
  switch (mode) {
    case MtlsMode::kUnset:
      return "UNSET";
    case MtlsMode::kDisable:
      return "DISABLE";
    case MtlsMode::kPermissive:
      return "PERMISSIVE";
    case MtlsMode::kStrict:
      return "STRICT";
  }
  return "?";
}

bool AuthorizationPolicy::hasL7() const {
  return std::any_of(rules.begin(), rules.end(), [](const Rule& r) { return !r.l7_fields.empty(); });
}

std::string_view Request::sourceNamespace() const {
  // "<trust domain>/ns/<namespace>/sa/<service account>"
  std::string_view p = principal;
  auto at = p.find("/ns/");
  if (at == std::string_view::npos) return {};
  p.remove_prefix(at + 4);
  return p.substr(0, p.find('/'));
}

std::string_view Request::trustDomain() const {
  std::string_view p = principal;
  if (p.find("/ns/") == std::string_view::npos) return {};
  return p.substr(0, p.find('/'));
}

std::string Request::serviceAccount() const {
  std::string_view ns = sourceNamespace();
  std::string_view p = principal;
  auto at = p.find("/sa/");
  if (ns.empty() || at == std::string_view::npos) return {};
  return std::string(ns) + "/" + std::string(p.substr(at + 4));
}

std::string principalOf(std::string_view spiffe_id) {
  constexpr std::string_view kScheme = "spiffe://";
  if (spiffe_id.substr(0, kScheme.size()) == kScheme) spiffe_id.remove_prefix(kScheme.size());
  return std::string(spiffe_id);
}

}  // namespace ferry::policy
