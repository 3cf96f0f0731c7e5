#pragma once
// Istio's security.istio.io AuthorizationPolicy and PeerAuthentication as ferry enforces them
// at L4 (docs/policy.md): parsed and validated once (decode.h), immutable afterwards, shared
// by every snapshot that holds them (policy_set.h).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "proxy/common/net.h"

namespace ferry::policy {

using Labels = std::vector<std::pair<std::string, std::string>>;  // sorted by key

// One value of principals, namespaces or a `when` condition, in Istio's four forms:
// "abc" exact, "abc*" prefix, "*abc" suffix, "*" presence (any non-empty value).
struct StringMatch {
  enum class Kind : uint8_t { kExact, kPrefix, kSuffix, kPresence };
  Kind kind = Kind::kExact;
  std::string text;  // without the '*'
  bool matches(std::string_view value) const;
  std::string str() const;  // as written
  friend bool operator==(const StringMatch&, const StringMatch&) = default;
};

// An ipBlocks value: "10.1.0.0/16" or a single address ("10.1.2.3" = /32, /128).
struct IpBlock {
  common::IpAddress network;  // canonical, host bits cleared
  uint8_t prefix_len = 0;
  bool contains(const common::IpAddress& ip) const;
  std::string str() const;
  // `ip` (canonical) with every bit past the first `prefix_len` cleared.
  static common::IpAddress masked(const common::IpAddress& ip, uint8_t prefix_len);
  friend bool operator==(const IpBlock&, const IpBlock&) = default;
};

// A field and its not-form (principals / notPrincipals...). Empty values: no constraint.
template <class T>
struct Matcher {
  std::vector<T> values, not_values;
  bool empty() const { return values.empty() && not_values.empty(); }
  friend bool operator==(const Matcher&, const Matcher&) = default;
};

// from[].source: every set field must match (AND); within a field, any value (OR).
struct Source {
  Matcher<StringMatch> principals;
  Matcher<StringMatch> namespaces;
  // serviceAccounts: "<namespace>/<name>" (a bare name is in the policy's namespace), exact.
  Matcher<std::string> service_accounts;
  Matcher<StringMatch> trust_domains;
  Matcher<IpBlock> ip_blocks;
  // Fields only L7 can judge (requestPrincipals, remoteIpBlocks...), by path.
  std::vector<std::string> l7_fields;
  friend bool operator==(const Source&, const Source&) = default;
};

// to[].operation.
struct Operation {
  Matcher<uint16_t> ports;
  std::vector<std::string> l7_fields;  // hosts, methods, paths (and their not-forms)
  friend bool operator==(const Operation&, const Operation&) = default;
};

// The attribute a `when` condition reads.
enum class Attribute : uint8_t {
  kSourceIp,
  kSourceNamespace,
  kSourcePrincipal,
  kDestinationIp,
  kDestinationPort,
  kL7,  // request.*, remote.ip, connection.sni, experimental.*: not known at L4
};

struct Condition {
  std::string key;
  Attribute attribute = Attribute::kL7;
  Matcher<StringMatch> strings;  // kSourceNamespace, kSourcePrincipal
  Matcher<IpBlock> ips;          // kSourceIp, kDestinationIp
  Matcher<uint16_t> ports;       // kDestinationPort
  friend bool operator==(const Condition&, const Condition&) = default;
};

struct Rule {
  std::vector<Source> from;
  std::vector<Operation> to;
  std::vector<Condition> when;
  // Every L7-only field or condition the rule names ("from[0].source.requestPrincipals",
  // "when[1] request.headers[x]"): an ALLOW rule with any never matches, a DENY or AUDIT rule
  // ignores them (matches on its L4 parts alone), as ztunnel does.
  std::vector<std::string> l7_fields;
  friend bool operator==(const Rule&, const Rule&) = default;
};

enum class Action : uint8_t { kAllow, kDeny, kAudit };
const char* actionName(Action action);

enum class Kind : uint8_t { kAuthorizationPolicy, kPeerAuthentication };
const char* kindName(Kind kind);

struct ObjectMeta {
  std::string namespace_name;
  std::string name;
  // metadata.creationTimestamp (RFC 3339; "" in files): the oldest of two PeerAuthentications
  // that select one workload wins, as in Istio.
  std::string creation_timestamp;
  std::string origin;  // "file /etc/ferry/policies.yaml", "kubernetes"
  std::string key() const { return namespace_name + "/" + name; }
  friend bool operator==(const ObjectMeta&, const ObjectMeta&) = default;
};

struct AuthorizationPolicy {
  ObjectMeta meta;
  Action action = Action::kAllow;
  // Annotation istio.io/dry-run: "true": judged and logged like AUDIT, never enforced.
  bool dry_run = false;
  // spec.selector.matchLabels; nullopt (or empty): every workload of the namespace, or of
  // the mesh in the root namespace.
  std::optional<Labels> selector;
  std::vector<Rule> rules;
  bool hasL7() const;
  // Same content (a re-listed or re-sent object that did not change).
  friend bool operator==(const AuthorizationPolicy&, const AuthorizationPolicy&) = default;
};

enum class MtlsMode : uint8_t { kUnset, kDisable, kPermissive, kStrict };
const char* mtlsModeName(MtlsMode mode);

struct PeerAuthentication {
  ObjectMeta meta;
  std::optional<Labels> selector;
  MtlsMode mode = MtlsMode::kUnset;
  std::vector<std::pair<uint16_t, MtlsMode>> port_level;  // sorted by port
  friend bool operator==(const PeerAuthentication&, const PeerAuthentication&) = default;
};

using AuthorizationPtr = std::shared_ptr<const AuthorizationPolicy>;
using PeerAuthenticationPtr = std::shared_ptr<const PeerAuthentication>;
using Object = std::variant<AuthorizationPtr, PeerAuthenticationPtr>;

// What one connection is judged on (docs/policy.md, "Evaluation order"): who calls, from where,
// to what.
struct Request {
  common::IpAddress source_ip;
  // The peer's SPIFFE ID without "spiffe://" ("cluster.local/ns/shop/sa/frontend"), as Istio
  // writes principals; empty for plaintext (no peer identity).
  std::string principal;
  common::IpAddress destination_ip;
  uint16_t destination_port = 0;
  // Parts of the principal ("shop", "shop/frontend", "cluster.local"); empty without one.
  std::string_view sourceNamespace() const;
  std::string_view trustDomain() const;
  std::string serviceAccount() const;
};

// "spiffe://td/ns/x/sa/y" -> "td/ns/x/sa/y" (other text unchanged).
std::string principalOf(std::string_view spiffe_id);

}  // namespace ferry::policy
