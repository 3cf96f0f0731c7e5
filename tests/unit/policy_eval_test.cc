// How ferry judges a connection against Istio AuthorizationPolicy and PeerAuthentication at
// L4 (proxy/policy, docs/policy.md): one table, one row per behaviour. Each row's policies are
// decoded from YAML (policy::decodeYamlFile) into a Store whose root namespace is
// istio-system, then one request to one workload is judged.
//
// Rows named doc_* are the documented examples of Istio's reference and concept pages that L4
// can express, with the outcome ztunnel gives, except where ferry chose otherwise:
//   (1) a DENY or AUDIT rule with L7 fields is judged on its L4 parts alone, the L7 parts
//       counting as matched (the API reference's "missing attributes match"; ztunnel makes
//       most such rules no-ops); an ALLOW rule with any L7 field never matches (as ztunnel);
//   (3) portLevelMtls DISABLE/PERMISSIVE exempt a port whatever the parent mode (Istio's
//       intent; ztunnel ignores DISABLE under an inherited STRICT); DISABLE acts as PERMISSIVE;
//   (4) AUDIT and istio.io/dry-run policies are judged and reported, never decide;
//   (5) serviceAccounts and trustDomains are L4 matchers.
// Rows that rely on one of these say so.
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/common/net.h"
#include "proxy/policy/decode.h"
#include "proxy/policy/policy_set.h"
#include "proxy/policy/store.h"
#include "proxy/workloads/workload.h"
#include "tests/unit/policy_docs.h"

namespace ferry::policy {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using namespace testing_docs;  // NOLINT: the YAML builders read as a small language

constexpr char kRoot[] = "istio-system";
constexpr char kOrigin[] = "file case.yaml";
const std::string kSleep = "cluster.local/ns/default/sa/sleep";
const std::string kOther = "cluster.local/ns/default/sa/other";

std::string principal(const std::string& ns, const std::string& sa, const std::string& td = "cluster.local") {
  return td + "/ns/" + ns + "/sa/" + sa;
}

// --- Policy documents (tests/unit/policy_docs.h) -------------------------------------

// The usual rows: one ALLOW policy foo/p, one DENY policy foo/d, one rule each.
std::string allowRule(const std::string& rule) { return ap("foo", "p", rules("ALLOW", rule)); }
std::string denyRule(const std::string& rule) { return ap("foo", "d", rules("DENY", rule)); }

// --- Destination, request, expectation -----------------------------------------------------

struct Dest {
  std::string ns = "foo";
  workloads::LabelSet::Labels labels = {{"app", "httpbin"}, {"version", "v1"}};
  // The workloads file's tls_mode: the mode when no PeerAuthentication decides.
  bool strict = false;
};

struct Req {
  std::string principal{};  // "" = plaintext (no peer identity)
  std::string src = "10.0.0.1";
  std::string dst = "10.0.1.1";
  uint16_t port = 8080;
};

struct Expect {
  enum class What { kAuthz, kMtls, kCaptures };
  What what = What::kAuthz;
  // kAuthz
  bool allowed = true;
  std::string by{};  // the deciding policy ("ns/name"), "" when none decided
  int rule = -1;
  std::vector<std::string> audited{};
  // kMtls
  MtlsMode mode = MtlsMode::kPermissive;
  std::string mode_by{};  // the PeerAuthentication that set it, "" for the workload's own
  bool port_level = false;
  // kCaptures
  bool captures = false;
  // Objects the Store refuses (the rest apply).
  size_t refused = 0;

  Expect audit(std::vector<std::string> keys) && {
    audited = std::move(keys);
    return std::move(*this);
  }
};

Expect allowedBy(std::string key, int rule) { return {.allowed = true, .by = std::move(key), .rule = rule}; }
Expect deniedBy(std::string key, int rule) { return {.allowed = false, .by = std::move(key), .rule = rule}; }
// Allowed because no enforced ALLOW policy applies.
Expect allowedNoAllowPolicy() { return {.allowed = true}; }
// Denied because ALLOW policies apply and none matched.
Expect deniedNoAllowMatched() { return {.allowed = false}; }
Expect mtlsIs(MtlsMode mode, std::string by = "", bool port_level = false) {
  return {.what = Expect::What::kMtls, .mode = mode, .mode_by = std::move(by), .port_level = port_level};
}
Expect capturesPlaintext(bool yes) { return {.what = Expect::What::kCaptures, .captures = yes}; }

struct Case {
  std::string name;
  std::vector<std::string> docs;
  Dest dest;
  Req req;
  Expect expect;
};
// gtest shows the row's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Shorthands for requests.
Req mtlsFrom(std::string p, uint16_t port = 8080) { return Req{.principal = std::move(p), .port = port}; }
Req plaintext(uint16_t port = 8080) { return Req{.port = port}; }
Req fromIp(std::string src, std::string p = kSleep) { return Req{.principal = std::move(p), .src = std::move(src)}; }
Req toIp(std::string dst) { return Req{.principal = kSleep, .dst = std::move(dst)}; }

// --- Rows --------------------------------------------------------------------------------

std::vector<Case> principalCases() {
  return {
      {"principals_exact_match", {allowRule(from("principals: [cluster.local/ns/default/sa/sleep]"))}, {},
       mtlsFrom(kSleep), allowedBy("foo/p", 0)},
      {"principals_exact_other_identity_denied", {allowRule(from("principals: [cluster.local/ns/default/sa/sleep]"))},
       {}, mtlsFrom(kOther), deniedNoAllowMatched()},
      {"principals_exact_plaintext_denied", {allowRule(from("principals: [cluster.local/ns/default/sa/sleep]"))}, {},
       plaintext(), deniedNoAllowMatched()},
      {"principals_prefix_match", {allowRule(from(R"(principals: ["cluster.local/ns/default/*"])"))}, {},
       mtlsFrom(kSleep), allowedBy("foo/p", 0)},
      {"principals_prefix_no_match", {allowRule(from(R"(principals: ["cluster.local/ns/default/*"])"))}, {},
       mtlsFrom(principal("prod", "sleep")), deniedNoAllowMatched()},
      {"principals_suffix_match", {allowRule(from(R"(principals: ["*/sa/sleep"])"))}, {},
       mtlsFrom(principal("prod", "sleep", "east.example")), allowedBy("foo/p", 0)},
      {"principals_suffix_no_match", {allowRule(from(R"(principals: ["*/sa/sleep"])"))}, {}, mtlsFrom(kOther),
       deniedNoAllowMatched()},
      {"principals_presence_any_identity", {allowRule(from(R"(principals: ["*"])"))}, {},
       mtlsFrom(principal("anywhere", "anyone", "other.td")), allowedBy("foo/p", 0)},
      {"principals_presence_plaintext_denied", {allowRule(from(R"(principals: ["*"])"))}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"principals_suffix_plaintext_denied", {allowRule(from(R"(principals: ["*/sa/sleep"])"))}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"principals_values_are_ored",
       {allowRule(from("principals: [cluster.local/ns/a/sa/x, cluster.local/ns/default/sa/other]"))}, {},
       mtlsFrom(kOther), allowedBy("foo/p", 0)},
      {"not_principals_listed_identity_denied", {allowRule(from("notPrincipals: [cluster.local/ns/default/sa/sleep]"))},
       {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"not_principals_other_identity_allowed", {allowRule(from("notPrincipals: [cluster.local/ns/default/sa/sleep]"))},
       {}, mtlsFrom(kOther), allowedBy("foo/p", 0)},
      // No identity matches no value, so every not-form holds for plaintext (ztunnel's rbac tests).
      {"not_principals_plaintext_matches", {allowRule(from("notPrincipals: [cluster.local/ns/default/sa/sleep]"))}, {},
       plaintext(), allowedBy("foo/p", 0)},
      {"not_principals_prefix_excludes", {allowRule(from(R"(notPrincipals: ["cluster.local/ns/kube-*"])"))}, {},
       mtlsFrom(principal("kube-system", "x")), deniedNoAllowMatched()},
      // DENY notPrincipals ["*"]: how Istio writes STRICT as a policy.
      {"not_principals_presence_deny_refuses_plaintext", {denyRule(from(R"(notPrincipals: ["*"])"))}, {}, plaintext(),
       deniedBy("foo/d", 0)},
      {"not_principals_presence_deny_lets_mtls_through", {denyRule(from(R"(notPrincipals: ["*"])"))}, {},
       mtlsFrom(kSleep), allowedNoAllowPolicy()},
  };
}

std::vector<Case> namespaceCases() {
  return {
      {"namespaces_exact_match", {allowRule(from("namespaces: [default]"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/p", 0)},
      {"namespaces_exact_no_match", {allowRule(from("namespaces: [default]"))}, {},
       mtlsFrom(principal("default-2", "sleep")), deniedNoAllowMatched()},
      {"namespaces_prefix_match", {allowRule(from(R"(namespaces: ["test-*"])"))}, {},
       mtlsFrom(principal("test-1", "sleep")), allowedBy("foo/p", 0)},
      {"namespaces_suffix_match", {allowRule(from(R"(namespaces: ["*-prod"])"))}, {},
       mtlsFrom(principal("shop-prod", "sleep")), allowedBy("foo/p", 0)},
      {"namespaces_suffix_no_match", {allowRule(from(R"(namespaces: ["*-prod"])"))}, {},
       mtlsFrom(principal("prod-shop", "sleep")), deniedNoAllowMatched()},
      {"namespaces_presence_any_identity", {allowRule(from(R"(namespaces: ["*"])"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/p", 0)},
      {"namespaces_exact_plaintext_denied", {allowRule(from("namespaces: [default]"))}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"namespaces_presence_plaintext_denied", {allowRule(from(R"(namespaces: ["*"])"))}, {}, plaintext(),
       deniedNoAllowMatched()},
      // The source namespace is the one in the peer's identity, not where its IP lives.
      {"namespaces_read_from_identity_not_ip", {allowRule(from("namespaces: [default]"))}, {},
       mtlsFrom(principal("prod", "sleep")), deniedNoAllowMatched()},
      {"not_namespaces_listed_denied", {allowRule(from("notNamespaces: [dev]"))}, {},
       mtlsFrom(principal("dev", "sleep")), deniedNoAllowMatched()},
      {"not_namespaces_other_allowed", {allowRule(from("notNamespaces: [dev]"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/p", 0)},
      {"not_namespaces_plaintext_matches", {allowRule(from("notNamespaces: [dev]"))}, {}, plaintext(),
       allowedBy("foo/p", 0)},
      {"not_namespaces_prefix_excludes", {allowRule(from(R"(notNamespaces: ["kube-*"])"))}, {},
       mtlsFrom(principal("kube-system", "x")), deniedNoAllowMatched()},
  };
}

std::vector<Case> serviceAccountAndTrustDomainCases() {
  return {
      {"service_accounts_namespace_and_name_match", {allowRule(from("serviceAccounts: [default/sleep]"))}, {},
       mtlsFrom(kSleep), allowedBy("foo/p", 0)},
      {"service_accounts_other_name_denied", {allowRule(from("serviceAccounts: [default/sleep]"))}, {},
       mtlsFrom(kOther), deniedNoAllowMatched()},
      // A bare name is in the policy's own namespace (foo), not the caller's.
      {"service_accounts_bare_name_is_policy_namespace", {allowRule(from("serviceAccounts: [sleep]"))}, {},
       mtlsFrom(principal("foo", "sleep")), allowedBy("foo/p", 0)},
      {"service_accounts_bare_name_other_namespace_denied", {allowRule(from("serviceAccounts: [sleep]"))}, {},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"service_accounts_ignore_trust_domain", {allowRule(from("serviceAccounts: [default/sleep]"))}, {},
       mtlsFrom(principal("default", "sleep", "other.td")), allowedBy("foo/p", 0)},
      {"service_accounts_plaintext_denied", {allowRule(from("serviceAccounts: [default/sleep]"))}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"not_service_accounts_listed_denied", {allowRule(from("notServiceAccounts: [default/sleep]"))}, {},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"not_service_accounts_other_allowed", {allowRule(from("notServiceAccounts: [default/sleep]"))}, {},
       mtlsFrom(kOther), allowedBy("foo/p", 0)},
      {"not_service_accounts_plaintext_matches", {allowRule(from("notServiceAccounts: [default/sleep]"))}, {},
       plaintext(), allowedBy("foo/p", 0)},
      // trustDomains: an L4 matcher in ferry (Istio's ambient converter drops it).
      {"trust_domains_exact_match", {allowRule(from("trustDomains: [cluster.local]"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/p", 0)},
      {"trust_domains_other_domain_denied", {allowRule(from("trustDomains: [cluster.local]"))}, {},
       mtlsFrom(principal("default", "sleep", "other.td")), deniedNoAllowMatched()},
      {"trust_domains_suffix_match", {allowRule(from(R"(trustDomains: ["*.example.com"])"))}, {},
       mtlsFrom(principal("a", "b", "east.example.com")), allowedBy("foo/p", 0)},
      {"trust_domains_prefix_match", {allowRule(from(R"(trustDomains: ["cluster.*"])"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/p", 0)},
      {"trust_domains_presence_plaintext_denied", {allowRule(from(R"(trustDomains: ["*"])"))}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"not_trust_domains_listed_denied", {allowRule(from("notTrustDomains: [cluster.local]"))}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"not_trust_domains_plaintext_matches", {allowRule(from("notTrustDomains: [cluster.local]"))}, {}, plaintext(),
       allowedBy("foo/p", 0)},
  };
}

std::vector<Case> ipBlockCases() {
  return {
      {"ip_blocks_single_ip_match", {allowRule(from("ipBlocks: [10.0.0.1]"))}, {}, fromIp("10.0.0.1"),
       allowedBy("foo/p", 0)},
      {"ip_blocks_single_ip_other_denied", {allowRule(from("ipBlocks: [10.0.0.1]"))}, {}, fromIp("10.0.0.2"),
       deniedNoAllowMatched()},
      {"ip_blocks_cidr_match", {allowRule(from("ipBlocks: [10.0.0.0/24]"))}, {}, fromIp("10.0.0.200"),
       allowedBy("foo/p", 0)},
      {"ip_blocks_cidr_outside_denied", {allowRule(from("ipBlocks: [10.0.0.0/24]"))}, {}, fromIp("10.0.1.1"),
       deniedNoAllowMatched()},
      // Host bits in a CIDR are allowed and ignored, as Istio's netip.ParsePrefix + mask.
      {"ip_blocks_cidr_with_host_bits", {allowRule(from("ipBlocks: [10.0.0.77/24]"))}, {}, fromIp("10.0.0.5"),
       allowedBy("foo/p", 0)},
      {"ip_blocks_ipv6_cidr_match", {allowRule(from(R"(ipBlocks: ["fd00:1::/64"])"))}, {}, fromIp("fd00:1::5"),
       allowedBy("foo/p", 0)},
      {"ip_blocks_ipv6_single_other_denied", {allowRule(from(R"(ipBlocks: ["fd00::1"])"))}, {}, fromIp("fd00::2"),
       deniedNoAllowMatched()},
      {"ip_blocks_ipv6_single_match", {allowRule(from(R"(ipBlocks: ["fd00::1"])"))}, {}, fromIp("fd00::1"),
       allowedBy("foo/p", 0)},
      {"ip_blocks_ipv4_block_never_matches_ipv6", {allowRule(from("ipBlocks: [0.0.0.0/0]"))}, {}, fromIp("fd00::1"),
       deniedNoAllowMatched()},
      {"ip_blocks_v4_mapped_source_is_ipv4", {allowRule(from("ipBlocks: [10.0.0.0/24]"))}, {},
       fromIp("::ffff:10.0.0.9"), allowedBy("foo/p", 0)},
      {"ip_blocks_need_no_identity", {allowRule(from("ipBlocks: [10.0.0.0/24]"))}, {}, fromIp("10.0.0.9", ""),
       allowedBy("foo/p", 0)},
      {"not_ip_blocks_single_ip_excluded", {allowRule(from("notIpBlocks: [203.0.113.4]"))}, {},
       fromIp("203.0.113.4"), deniedNoAllowMatched()},
      {"not_ip_blocks_other_ip_allowed", {allowRule(from("notIpBlocks: [203.0.113.4]"))}, {}, fromIp("203.0.113.5"),
       allowedBy("foo/p", 0)},
      {"not_ip_blocks_ipv6_cidr_excluded", {allowRule(from(R"(notIpBlocks: ["2001:db8::/32"])"))}, {},
       fromIp("2001:db8:5::1"), deniedNoAllowMatched()},
      {"not_ip_blocks_deny_outside_cidr", {denyRule(from("notIpBlocks: [10.0.0.0/8]"))}, {},
       fromIp("192.168.1.1", ""), deniedBy("foo/d", 0)},
      {"not_ip_blocks_deny_inside_cidr_passes", {denyRule(from("notIpBlocks: [10.0.0.0/8]"))}, {},
       fromIp("10.20.30.40", ""), allowedNoAllowPolicy()},
      {"ip_blocks_and_not_ip_blocks_in_one_source", {allowRule(from("ipBlocks: [10.0.0.0/16], notIpBlocks: [10.0.5.0/24]"))},
       {}, fromIp("10.0.5.1"), deniedNoAllowMatched()},
  };
}

std::vector<Case> portCases() {
  return {
      {"ports_match", {allowRule(to(R"(ports: ["8080"])"))}, {}, mtlsFrom(kSleep, 8080), allowedBy("foo/p", 0)},
      {"ports_other_port_denied", {allowRule(to(R"(ports: ["8080"])"))}, {}, mtlsFrom(kSleep, 9090),
       deniedNoAllowMatched()},
      {"ports_values_are_ored", {allowRule(to(R"(ports: ["80", "8080"])"))}, {}, mtlsFrom(kSleep, 80),
       allowedBy("foo/p", 0)},
      {"ports_written_as_numbers", {allowRule(to("ports: [8080]"))}, {}, plaintext(8080), allowedBy("foo/p", 0)},
      {"ports_need_no_identity", {allowRule(to(R"(ports: ["8080"])"))}, {}, plaintext(8080), allowedBy("foo/p", 0)},
      {"not_ports_excluded", {allowRule(to(R"(notPorts: ["22"])"))}, {}, mtlsFrom(kSleep, 22), deniedNoAllowMatched()},
      {"not_ports_other_allowed", {allowRule(to(R"(notPorts: ["22"])"))}, {}, mtlsFrom(kSleep, 8080),
       allowedBy("foo/p", 0)},
      {"ports_and_not_ports_in_one_operation", {allowRule(to(R"(ports: ["8080", "9090"], notPorts: ["9090"])"))}, {},
       mtlsFrom(kSleep, 9090), deniedNoAllowMatched()},
      {"to_entries_are_ored",
       {allowRule(R"({to: [{operation: {ports: ["80"]}}, {operation: {ports: ["9090"]}}]})")}, {},
       mtlsFrom(kSleep, 9090), allowedBy("foo/p", 0)},
  };
}

std::vector<Case> conditionCases() {
  return {
      {"when_source_ip_values_cidr", {allowRule(when("key: source.ip, values: [10.0.0.0/24]"))}, {},
       fromIp("10.0.0.9"), allowedBy("foo/p", 0)},
      {"when_source_ip_values_other_denied", {allowRule(when("key: source.ip, values: [10.0.0.0/24]"))}, {},
       fromIp("10.9.0.9"), deniedNoAllowMatched()},
      {"when_source_ip_not_values_single", {allowRule(when("key: source.ip, notValues: [10.0.0.9]"))}, {},
       fromIp("10.0.0.9"), deniedNoAllowMatched()},
      {"when_source_ip_values_and_not_values",
       {allowRule(when("key: source.ip, values: [10.0.0.0/16], notValues: [10.0.5.0/24]"))}, {}, fromIp("10.0.5.1"),
       deniedNoAllowMatched()},
      {"when_source_namespace_prefix", {allowRule(when(R"(key: source.namespace, values: ["test-*"])"))}, {},
       mtlsFrom(principal("test-a", "x")), allowedBy("foo/p", 0)},
      {"when_source_namespace_not_values", {allowRule(when("key: source.namespace, notValues: [dev]"))}, {},
       mtlsFrom(principal("dev", "x")), deniedNoAllowMatched()},
      {"when_source_namespace_values_plaintext_denied", {allowRule(when("key: source.namespace, values: [default]"))},
       {}, plaintext(), deniedNoAllowMatched()},
      {"when_source_namespace_not_values_plaintext_matches",
       {allowRule(when("key: source.namespace, notValues: [dev]"))}, {}, plaintext(), allowedBy("foo/p", 0)},
      {"when_source_principal_suffix", {allowRule(when(R"(key: source.principal, values: ["*/sa/sleep"])"))}, {},
       mtlsFrom(kSleep), allowedBy("foo/p", 0)},
      {"when_source_principal_exact_other_denied",
       {allowRule(when("key: source.principal, values: [cluster.local/ns/default/sa/sleep]"))}, {}, mtlsFrom(kOther),
       deniedNoAllowMatched()},
      {"when_source_principal_not_values",
       {allowRule(when("key: source.principal, notValues: [cluster.local/ns/default/sa/sleep]"))}, {},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"when_source_principal_presence_plaintext_denied",
       {allowRule(when(R"(key: source.principal, values: ["*"])"))}, {}, plaintext(), deniedNoAllowMatched()},
      {"when_source_principal_not_presence_plaintext_matches",
       {allowRule(when(R"(key: source.principal, notValues: ["*"])"))}, {}, plaintext(), allowedBy("foo/p", 0)},
      {"when_destination_ip_values", {allowRule(when("key: destination.ip, values: [10.0.1.0/24]"))}, {},
       toIp("10.0.1.1"), allowedBy("foo/p", 0)},
      {"when_destination_ip_other_denied", {allowRule(when("key: destination.ip, values: [10.0.1.0/24]"))}, {},
       toIp("10.0.2.1"), deniedNoAllowMatched()},
      {"when_destination_ip_ipv6_not_values", {allowRule(when(R"(key: destination.ip, notValues: ["fd00::/8"])"))},
       {}, toIp("fd00::1"), deniedNoAllowMatched()},
      {"when_destination_port_values", {allowRule(when(R"(key: destination.port, values: ["8080"])"))}, {},
       mtlsFrom(kSleep, 8080), allowedBy("foo/p", 0)},
      {"when_destination_port_not_values", {allowRule(when(R"(key: destination.port, notValues: ["8080"])"))}, {},
       mtlsFrom(kSleep, 8080), deniedNoAllowMatched()},
      {"when_conditions_are_anded",
       {allowRule(R"({when: [{key: source.namespace, values: [default]}, {key: destination.port, values: ["8080"]}]})")},
       {}, mtlsFrom(kSleep, 9090), deniedNoAllowMatched()},
  };
}

std::vector<Case> structureCases() {
  return {
      {"from_entries_are_ored",
       {allowRule(R"({from: [{source: {principals: [cluster.local/ns/a/sa/x]}}, {source: {namespaces: [test]}}]})")},
       {}, mtlsFrom(principal("test", "y")), allowedBy("foo/p", 0)},
      {"source_fields_are_anded", {allowRule(from("principals: [cluster.local/ns/default/sa/sleep], ipBlocks: [10.9.0.0/16]"))},
       {}, fromIp("10.0.0.1"), deniedNoAllowMatched()},
      {"from_and_to_are_anded",
       {allowRule(R"({from: [{source: {namespaces: [default]}}], to: [{operation: {ports: ["8080"]}}]})")}, {},
       mtlsFrom(kSleep, 9090), deniedNoAllowMatched()},
      {"rules_are_ored_second_rule_decides",
       {ap("foo", "p", rules("ALLOW", R"({to: [{operation: {ports: ["9090"]}}]}, {to: [{operation: {ports: ["8080"]}}]})"))},
       {}, mtlsFrom(kSleep, 8080), allowedBy("foo/p", 1)},
      // Empty forms (Istio: "allow-nothing", "allow-all", "deny-all").
      {"allow_without_rules_denies_everything", {ap("foo", "p", "{action: ALLOW}")}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"empty_spec_denies_everything", {ap("foo", "p", "{}")}, {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"missing_spec_denies_everything",
       {"apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\n"}, {},
       plaintext(), deniedNoAllowMatched()},
      {"allow_empty_rule_allows_everything", {ap("foo", "p", rules("ALLOW", "{}"))}, {}, plaintext(),
       allowedBy("foo/p", 0)},
      {"deny_empty_rule_denies_everything", {ap("foo", "d", rules("DENY", "{}"))}, {}, mtlsFrom(kSleep),
       deniedBy("foo/d", 0)},
      {"no_policy_allows", {}, {}, plaintext(), allowedNoAllowPolicy()},
      // Overlaps: DENY first, then any ALLOW.
      {"deny_wins_over_matching_allow",
       {ap("foo", "p", rules("ALLOW", "{}")), denyRule(from("namespaces: [dev]"))}, {},
       mtlsFrom(principal("dev", "x")), deniedBy("foo/d", 0)},
      {"deny_not_matching_leaves_allow_to_decide",
       {ap("foo", "p", rules("ALLOW", "{}")), denyRule(from("namespaces: [dev]"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/p", 0)},
      {"deny_alone_not_matching_allows", {denyRule(from("namespaces: [dev]"))}, {}, mtlsFrom(kSleep),
       allowedNoAllowPolicy()},
      {"several_allow_policies_any_one_allows",
       {ap("foo", "a", rules("ALLOW", from("principals: [cluster.local/ns/a/sa/x]"))),
        ap("foo", "b", rules("ALLOW", from("namespaces: [test]")))},
       {}, mtlsFrom(principal("test", "y")), allowedBy("foo/b", 0)},
      {"several_allow_policies_none_matches",
       {ap("foo", "a", rules("ALLOW", from("principals: [cluster.local/ns/a/sa/x]"))),
        ap("foo", "b", rules("ALLOW", from("namespaces: [test]")))},
       {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      // Two matching: the first by namespace and name is reported, whatever the index order.
      {"several_matching_allows_first_by_name_reported",
       {ap("foo", "z", rules("ALLOW", "{}")), ap(kRoot, "all", rules("ALLOW", "{}"))}, {}, mtlsFrom(kSleep),
       allowedBy("foo/z", 0)},
      {"several_matching_denies_first_by_name_reported",
       {ap("foo", "z-deny", rules("DENY", "{}")), ap("foo", "a-deny", rules("DENY", "{}"))}, {}, mtlsFrom(kSleep),
       deniedBy("foo/a-deny", 0)},
      {"mesh_and_namespace_allows_both_count",
       {ap(kRoot, "mesh", rules("ALLOW", from("principals: [cluster.local/ns/a/sa/x]"))),
        ap("foo", "p", rules("ALLOW", from("namespaces: [default]")))},
       {}, mtlsFrom(kSleep), allowedBy("foo/p", 0)},
      {"mesh_deny_beats_namespace_allow",
       {ap(kRoot, "no-ssh", rules("DENY", to(R"(ports: ["22"])"))), ap("foo", "p", rules("ALLOW", "{}"))}, {},
       mtlsFrom(kSleep, 22), deniedBy("istio-system/no-ssh", 0)},
  };
}

std::vector<Case> auditCases() {
  return {
      {"audit_matching_never_decides", {ap("foo", "audit", rules("AUDIT", "{}"))}, {}, plaintext(),
       allowedNoAllowPolicy().audit({"foo/audit"})},
      {"audit_does_not_count_as_allow",
       {ap("foo", "audit", rules("AUDIT", from("namespaces: [dev]")))}, {}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"audit_reported_when_denied", {ap("foo", "audit", rules("AUDIT", "{}")), ap("foo", "p", "{}")}, {},
       mtlsFrom(kSleep), deniedNoAllowMatched().audit({"foo/audit"})},
      {"audit_reported_when_allowed",
       {ap("foo", "audit", rules("AUDIT", from("namespaces: [default]"))), ap("foo", "p", rules("ALLOW", "{}"))}, {},
       mtlsFrom(kSleep), allowedBy("foo/p", 0).audit({"foo/audit"})},
      // Ferry (1): an AUDIT rule with L7 fields is judged on its L4 parts.
      {"audit_l7_fields_count_as_matched", {ap("foo", "audit", rules("AUDIT", to("methods: [GET]")))}, {},
       mtlsFrom(kSleep), allowedNoAllowPolicy().audit({"foo/audit"})},
      {"audit_several_sorted_by_name",
       {ap("foo", "b-audit", rules("AUDIT", "{}")), ap(kRoot, "a-audit", rules("AUDIT", "{}"))}, {}, plaintext(),
       allowedNoAllowPolicy().audit({"foo/b-audit", "istio-system/a-audit"})},
      {"dry_run_deny_never_denies", {ap("foo", "d", rules("DENY", "{}"), R"({istio.io/dry-run: "true"})")}, {},
       mtlsFrom(kSleep), allowedNoAllowPolicy().audit({"foo/d"})},
      {"dry_run_deny_not_matching_not_reported",
       {ap("foo", "d", rules("DENY", from("namespaces: [dev]")), R"({istio.io/dry-run: "true"})")}, {},
       mtlsFrom(kSleep), allowedNoAllowPolicy()},
      // A dry-run ALLOW is not an enforced ALLOW: it does not turn on deny-by-default.
      {"dry_run_allow_does_not_count_as_allow",
       {ap("foo", "p", rules("ALLOW", from("namespaces: [dev]")), R"({istio.io/dry-run: "true"})")}, {},
       mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"dry_run_allow_matching_reported",
       {ap("foo", "p", rules("ALLOW", "{}"), R"({istio.io/dry-run: "true"})"), ap("foo", "nothing", "{}")}, {},
       mtlsFrom(kSleep), deniedNoAllowMatched().audit({"foo/p"})},
      {"dry_run_false_is_enforced", {ap("foo", "d", rules("DENY", "{}"), R"({istio.io/dry-run: "false"})")}, {},
       mtlsFrom(kSleep), deniedBy("foo/d", 0)},
  };
}

std::vector<Case> scopeCases() {
  const std::string allow_nothing_v1 = ap(kRoot, "v1-nothing", "{selector: {matchLabels: {version: v1}}}");
  const std::string httpbin_nothing = ap("foo", "httpbin-nothing", "{selector: {matchLabels: {app: httpbin}}}");
  return {
      {"scope_root_namespace_is_mesh_wide", {ap(kRoot, "nothing", "{}")}, {.ns = "bar"}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"scope_root_namespace_deny_mesh_wide", {ap(kRoot, "d", rules("DENY", to(R"(ports: ["22"])")))},
       {.ns = "bar"}, plaintext(22), deniedBy("istio-system/d", 0)},
      {"scope_root_namespace_applies_to_its_own_workloads", {ap(kRoot, "nothing", "{}")}, {.ns = kRoot},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"scope_root_selector_matches_any_namespace", {allow_nothing_v1}, {.ns = "bar"}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"scope_root_selector_not_matching", {allow_nothing_v1},
       {.ns = "bar", .labels = {{"app", "httpbin"}, {"version", "v2"}}}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"scope_namespace_wide_applies", {ap("foo", "nothing", "{}")}, {.labels = {{"app", "other"}}}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"scope_namespace_wide_other_namespace_unaffected", {ap("foo", "nothing", "{}")}, {.ns = "bar"},
       mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"scope_selector_matches", {httpbin_nothing}, {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"scope_selector_not_matching", {httpbin_nothing}, {.labels = {{"app", "other"}, {"version", "v1"}}},
       mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"scope_selector_needs_every_label",
       {ap("foo", "p", "{selector: {matchLabels: {app: httpbin, version: v2}}}")}, {}, mtlsFrom(kSleep),
       allowedNoAllowPolicy()},
      {"scope_selector_with_every_label_applies",
       {ap("foo", "p", "{selector: {matchLabels: {version: v1, app: httpbin}}}")},
       {.labels = {{"app", "httpbin"}, {"tier", "web"}, {"version", "v1"}}}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"scope_selector_other_namespace_not_applied", {ap("bar", "p", "{selector: {matchLabels: {app: httpbin}}}")},
       {}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      // An empty selector is "every workload in scope" (Istio only warns about it).
      {"scope_empty_selector_is_namespace_wide", {ap("foo", "p", "{selector: {}}")}, {.labels = {{"app", "other"}}},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"scope_empty_match_labels_is_namespace_wide", {ap("foo", "p", "{selector: {matchLabels: {}}}")},
       {.labels = {{"app", "other"}}}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"scope_unlabeled_workload_not_selected", {httpbin_nothing, allow_nothing_v1}, {.labels = {}}, mtlsFrom(kSleep),
       allowedNoAllowPolicy()},
      {"scope_unlabeled_workload_namespace_policy_applies", {ap("foo", "nothing", "{}")}, {.labels = {}},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"scope_selector_label_value_must_be_equal", {httpbin_nothing}, {.labels = {{"app", "httpbin2"}}},
       mtlsFrom(kSleep), allowedNoAllowPolicy()},
  };
}

std::vector<Case> l7Cases() {
  return {
      // Ferry (1), as ztunnel: an ALLOW rule with any L7 field never matches (fail closed).
      {"l7_allow_methods_never_matches", {allowRule(to("methods: [GET]"))}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"l7_allow_mixed_l4_l7_rule_never_matches",
       {allowRule(R"({from: [{source: {principals: [cluster.local/ns/default/sa/sleep]}}], to: [{operation: {methods: [GET]}}]})")},
       {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"l7_allow_l7_in_same_operation_as_port",
       {allowRule(to(R"(ports: ["8080"], methods: [GET])"))}, {}, mtlsFrom(kSleep, 8080), deniedNoAllowMatched()},
      {"l7_allow_other_l4_rule_still_matches",
       {ap("foo", "p", rules("ALLOW", R"({to: [{operation: {methods: [GET]}}]}, {to: [{operation: {ports: ["8080"]}}]})"))},
       {}, mtlsFrom(kSleep, 8080), allowedBy("foo/p", 1)},
      {"l7_allow_header_condition_never_matches",
       {allowRule(when("key: \"request.headers[version]\", values: [v1]"))}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"l7_allow_request_principals_never_matches", {allowRule(from(R"(requestPrincipals: ["*"])"))}, {},
       mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"l7_allow_remote_ip_blocks_never_matches", {allowRule(from("remoteIpBlocks: [10.0.0.0/8]"))}, {},
       fromIp("10.0.0.1"), deniedNoAllowMatched()},
      // source.serviceAccount, source.trustDomain and connection.sni count as L7 (ztunnel).
      {"l7_allow_source_service_account_condition_never_matches",
       {allowRule(when("key: source.serviceAccount, values: [default/sleep]"))}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      // Ferry (1), unlike ztunnel: DENY rules are judged on their L4 parts, the L7 ones match.
      {"l7_deny_methods_only_denies_everything", {denyRule(to("methods: [POST]"))}, {}, plaintext(),
       deniedBy("foo/d", 0)},
      {"l7_deny_methods_with_port_denies_that_port", {denyRule(to(R"(methods: [POST], ports: ["8080"])"))}, {},
       mtlsFrom(kSleep, 8080), deniedBy("foo/d", 0)},
      {"l7_deny_methods_with_port_other_port_passes", {denyRule(to(R"(methods: [POST], ports: ["8080"])"))}, {},
       mtlsFrom(kSleep, 9090), allowedNoAllowPolicy()},
      {"l7_deny_l4_from_with_l7_when_judged_on_from",
       {denyRule(R"({from: [{source: {namespaces: [dev]}}], when: [{key: "request.headers[x-debug]", values: ["1"]}]})")},
       {}, mtlsFrom(principal("dev", "x")), deniedBy("foo/d", 0)},
      {"l7_deny_l4_from_with_l7_when_other_source_passes",
       {denyRule(R"({from: [{source: {namespaces: [dev]}}], when: [{key: "request.headers[x-debug]", values: ["1"]}]})")},
       {}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"l7_deny_request_principals_only_denies_everything", {denyRule(from(R"(notRequestPrincipals: ["*"])"))}, {},
       mtlsFrom(kSleep), deniedBy("foo/d", 0)},
      {"l7_deny_l7_and_l4_sources_l7_one_matches",
       {denyRule(R"({from: [{source: {requestPrincipals: ["*"]}}, {source: {namespaces: [dev]}}]})")}, {},
       mtlsFrom(kSleep), deniedBy("foo/d", 0)},
  };
}

std::vector<Case> peerAuthenticationCases() {
  using M = MtlsMode;
  const std::string mesh_strict = pa(kRoot, "default", "{mtls: {mode: STRICT}}");
  const std::string finance = "{matchLabels: {app: finance}}";
  const Dest finance_pod{.labels = {{"app", "finance"}}};
  const std::string finance_strict_8080_exempt =
      pa("foo", "finance", "{selector: " + finance + ", mtls: {mode: STRICT}, portLevelMtls: {8080: {mode: DISABLE}}}");
  const std::string finance_permissive_9000_strict =
      pa("foo", "finance", "{selector: " + finance + ", mtls: {mode: PERMISSIVE}, portLevelMtls: {9000: {mode: STRICT}}}");
  return {
      {"pa_none_fallback_permissive", {}, {}, plaintext(), mtlsIs(M::kPermissive)},
      {"pa_none_fallback_workload_strict", {}, {.strict = true}, plaintext(), mtlsIs(M::kStrict)},
      {"pa_mesh_strict", {mesh_strict}, {}, plaintext(), mtlsIs(M::kStrict, "istio-system/default")},
      {"pa_mesh_permissive_overrides_workload_fallback", {pa(kRoot, "default", "{mtls: {mode: PERMISSIVE}}")},
       {.strict = true}, plaintext(), mtlsIs(M::kPermissive, "istio-system/default")},
      // UNSET at every level: the workload's own mode (Istio's default is PERMISSIVE).
      {"pa_mesh_unset_falls_back_to_workload", {pa(kRoot, "default", "{mtls: {mode: UNSET}}")}, {.strict = true},
       plaintext(), mtlsIs(M::kStrict)},
      {"pa_mesh_without_mtls_is_unset", {pa(kRoot, "default", "{}")}, {}, plaintext(), mtlsIs(M::kPermissive)},
      {"pa_namespace_overrides_mesh", {mesh_strict, pa("foo", "default", "{mtls: {mode: PERMISSIVE}}")}, {},
       plaintext(), mtlsIs(M::kPermissive, "foo/default")},
      {"pa_namespace_disable_overrides_strict_mesh", {mesh_strict, pa("foo", "default", "{mtls: {mode: DISABLE}}")},
       {}, plaintext(), mtlsIs(M::kDisable, "foo/default")},
      {"pa_namespace_unset_inherits_mesh", {mesh_strict, pa("foo", "default", "{mtls: {mode: UNSET}}")}, {},
       plaintext(), mtlsIs(M::kStrict, "istio-system/default")},
      {"pa_namespace_empty_selector_is_namespace_level", {pa("foo", "all", "{selector: {}, mtls: {mode: STRICT}}")},
       {.labels = {}}, plaintext(), mtlsIs(M::kStrict, "foo/all")},
      {"pa_other_namespace_not_applied", {pa("bar", "default", "{mtls: {mode: STRICT}}")}, {}, plaintext(),
       mtlsIs(M::kPermissive)},
      {"pa_mesh_applies_to_root_namespace_workloads", {mesh_strict}, {.ns = kRoot}, plaintext(),
       mtlsIs(M::kStrict, "istio-system/default")},
      {"pa_workload_overrides_namespace",
       {pa("foo", "default", "{mtls: {mode: PERMISSIVE}}"), pa("foo", "finance", "{selector: " + finance + ", mtls: {mode: STRICT}}")},
       finance_pod, plaintext(), mtlsIs(M::kStrict, "foo/finance")},
      {"pa_workload_permissive_overrides_strict_namespace",
       {pa("foo", "default", "{mtls: {mode: STRICT}}"), pa("foo", "finance", "{selector: " + finance + ", mtls: {mode: PERMISSIVE}}")},
       finance_pod, plaintext(), mtlsIs(M::kPermissive, "foo/finance")},
      {"pa_workload_unset_inherits_namespace",
       {pa("foo", "default", "{mtls: {mode: STRICT}}"), pa("foo", "finance", "{selector: " + finance + "}")},
       finance_pod, plaintext(), mtlsIs(M::kStrict, "foo/default")},
      {"pa_workload_unset_inherits_mesh_through_unset_namespace",
       {mesh_strict, pa("foo", "default", "{mtls: {mode: UNSET}}"), pa("foo", "finance", "{selector: " + finance + "}")},
       finance_pod, plaintext(), mtlsIs(M::kStrict, "istio-system/default")},
      {"pa_unlabeled_workload_ignores_selector_policy",
       {pa("foo", "finance", "{selector: " + finance + ", mtls: {mode: STRICT}}")}, {.labels = {}}, plaintext(),
       mtlsIs(M::kPermissive)},
      // The oldest creationTimestamp wins at each level; the newer ones are ignored.
      {"pa_oldest_wins_mesh",
       {pa(kRoot, "new", "{mtls: {mode: STRICT}}", "2021-01-01T00:00:00Z"),
        pa(kRoot, "old", "{mtls: {mode: PERMISSIVE}}", "2020-01-01T00:00:00Z")},
       {}, plaintext(), mtlsIs(M::kPermissive, "istio-system/old")},
      {"pa_oldest_wins_namespace",
       {pa("foo", "a-new", "{mtls: {mode: PERMISSIVE}}", "2021-06-01T00:00:00Z"),
        pa("foo", "z-old", "{mtls: {mode: STRICT}}", "2021-05-01T00:00:00Z")},
       {}, plaintext(), mtlsIs(M::kStrict, "foo/z-old")},
      {"pa_oldest_wins_workload",
       {pa("foo", "a-new", "{selector: {matchLabels: {app: httpbin}}, mtls: {mode: PERMISSIVE}}", "2022-01-01T00:00:00Z"),
        pa("foo", "z-old", "{selector: {matchLabels: {version: v1}}, mtls: {mode: STRICT}}", "2020-01-01T00:00:00Z")},
       {}, plaintext(), mtlsIs(M::kStrict, "foo/z-old")},
      // The oldest namespace policy is UNSET: the level inherits; the newer STRICT is ignored.
      {"pa_oldest_unset_does_not_defer_to_newer",
       {pa("foo", "old", "{mtls: {mode: UNSET}}", "2020-01-01T00:00:00Z"),
        pa("foo", "new", "{mtls: {mode: STRICT}}", "2021-01-01T00:00:00Z")},
       {}, plaintext(), mtlsIs(M::kPermissive)},
      {"pa_with_timestamp_older_than_file_one",
       {pa("foo", "a-file", "{mtls: {mode: STRICT}}"), pa("foo", "z-api", "{mtls: {mode: PERMISSIVE}}", "2020-01-01T00:00:00Z")},
       {}, plaintext(), mtlsIs(M::kPermissive, "foo/z-api")},
      {"pa_same_age_first_by_name",
       {pa("foo", "b", "{mtls: {mode: PERMISSIVE}}", "2020-01-01T00:00:00Z"),
        pa("foo", "a", "{mtls: {mode: STRICT}}", "2020-01-01T00:00:00Z")},
       {}, plaintext(), mtlsIs(M::kStrict, "foo/a")},
      // portLevelMtls: keys are workload (target) ports.
      {"pa_port_level_disable_exempts_port_of_strict_workload",
       {finance_strict_8080_exempt},
       finance_pod, plaintext(8080), mtlsIs(M::kDisable, "foo/finance", true)},
      {"pa_port_level_other_port_keeps_workload_mode",
       {finance_strict_8080_exempt},
       finance_pod, plaintext(9090), mtlsIs(M::kStrict, "foo/finance")},
      {"pa_port_level_permissive_exempts_port_under_inherited_strict",
       {mesh_strict, pa("foo", "finance", "{selector: " + finance + ", portLevelMtls: {8080: {mode: PERMISSIVE}}}")},
       finance_pod, plaintext(8080), mtlsIs(M::kPermissive, "foo/finance", true)},
      // Ferry (3): DISABLE exempts the port under an inherited STRICT too (ztunnel: no).
      {"pa_port_level_disable_exempts_port_under_inherited_strict",
       {mesh_strict, pa("foo", "finance", "{selector: " + finance + ", portLevelMtls: {8080: {mode: DISABLE}}}")},
       finance_pod, plaintext(8080), mtlsIs(M::kDisable, "foo/finance", true)},
      {"pa_port_level_strict_port_on_permissive_workload",
       {finance_permissive_9000_strict},
       finance_pod, plaintext(9000), mtlsIs(M::kStrict, "foo/finance", true)},
      {"pa_port_level_strict_port_other_port_permissive",
       {finance_permissive_9000_strict},
       finance_pod, plaintext(8080), mtlsIs(M::kPermissive, "foo/finance")},
      // Istio's operator-precedence quirk makes this port plaintext; ferry does what was meant.
      {"pa_port_level_strict_port_under_strict_mesh_permissive_workload",
       {mesh_strict, finance_permissive_9000_strict},
       finance_pod, plaintext(9000), mtlsIs(M::kStrict, "foo/finance", true)},
      {"pa_port_level_unset_entry_inherits",
       {pa("foo", "default", "{mtls: {mode: STRICT}}"),
        pa("foo", "finance", "{selector: " + finance + ", portLevelMtls: {8080: {mode: UNSET}}}")},
       finance_pod, plaintext(8080), mtlsIs(M::kStrict, "foo/default")},
      {"pa_port_level_of_unselected_workload_ignored",
       {finance_strict_8080_exempt},
       {}, plaintext(8080), mtlsIs(M::kPermissive)},
      // A workload selector in the root namespace is refused (Istio ignores it).
      {"pa_root_namespace_selector_refused",
       {pa(kRoot, "sel", "{selector: {matchLabels: {app: httpbin}}, mtls: {mode: STRICT}}")}, {}, plaintext(),
       [] {
         Expect e = mtlsIs(M::kPermissive);
         e.refused = 1;
         return e;
       }()},
  };
}

std::vector<Case> captureCases() {
  return {
      {"captures_nothing_applies", {}, {}, plaintext(), capturesPlaintext(false)},
      {"captures_workload_strict_fallback", {}, {.strict = true}, plaintext(), capturesPlaintext(true)},
      {"captures_authorization_policy_applies", {ap("foo", "p", rules("ALLOW", "{}"))}, {}, plaintext(),
       capturesPlaintext(true)},
      {"captures_mesh_authorization_policy_applies", {ap(kRoot, "d", rules("DENY", to(R"(ports: ["22"])")))}, {},
       plaintext(), capturesPlaintext(true)},
      {"captures_audit_policy_applies", {ap("foo", "audit", rules("AUDIT", "{}"))}, {}, plaintext(),
       capturesPlaintext(true)},
      {"captures_not_for_other_namespace_policy", {ap("bar", "p", rules("ALLOW", "{}"))}, {}, plaintext(),
       capturesPlaintext(false)},
      {"captures_not_for_unmatched_selector", {ap("foo", "p", "{selector: {matchLabels: {app: other}}}")}, {},
       plaintext(), capturesPlaintext(false)},
      {"captures_strict_peer_authentication", {pa("foo", "default", "{mtls: {mode: STRICT}}")}, {}, plaintext(),
       capturesPlaintext(true)},
      {"captures_not_for_permissive_peer_authentication", {pa("foo", "default", "{mtls: {mode: PERMISSIVE}}")},
       {.strict = true}, plaintext(), capturesPlaintext(false)},
      {"captures_strict_port_only",
       {pa("foo", "p", "{selector: {matchLabels: {app: httpbin}}, mtls: {mode: PERMISSIVE}, portLevelMtls: {9000: {mode: STRICT}}}")},
       {}, plaintext(), capturesPlaintext(true)},
      {"captures_strict_with_exempt_port",
       {pa("foo", "p", "{selector: {matchLabels: {app: httpbin}}, mtls: {mode: STRICT}, portLevelMtls: {8080: {mode: DISABLE}}}")},
       {}, plaintext(), capturesPlaintext(true)},
  };
}

// Section 6 of the research notes: the documented examples, at L4.
std::vector<Case> documentedCases() {
  using M = MtlsMode;
  // Reference (authorization_policy.proto) example 1: L7 parts drop the only rule.
  const std::string ref_httpbin = ap("foo", "httpbin", R"(
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/sleep"]
    - source:
        namespaces: ["test"]
    to:
    - operation:
        methods: ["GET"]
        paths: ["/info*"]
    - operation:
        methods: ["POST"]
        paths: ["/data"]
    when:
    - key: request.auth.claims[iss]
      values: ["https://accounts.google.com"]
)");
  const std::string ref_deny_dev_post = ap("foo", "httpbin", R"(
  action: DENY
  rules:
  - from:
    - source:
        namespaces: ["dev"]
    to:
    - operation:
        methods: ["POST"]
)");
  const std::string ref_deny_post_8080 = ap("foo", "httpbin", R"(
  action: DENY
  rules:
  - to:
    - operation:
        methods: ["POST"]
        ports: ["8080"]
)");
  const std::string ref_audit = ap("ns1", "anyname", R"(
  selector:
    matchLabels:
      app: myapi
  action: AUDIT
  rules:
  - to:
    - operation:
        methods: ["GET"]
        paths: ["/user/profile/*"]
)");
  const std::string allow_nothing_foo = ap("foo", "allow-nothing", "\n  {}\n");
  const std::string allow_all_foo = ap("foo", "allow-all", "\n  rules:\n  - {}\n");
  const std::string allow_nothing_bar_httpbin = ap("bar", "allow-nothing", "\n  selector:\n    matchLabels:\n      app: httpbin\n");
  const std::string allow_nothing_v1 = ap(kRoot, "allow-nothing", "\n  selector:\n    matchLabels:\n      version: v1\n");
  const std::string ref_dry_run = ap("foo", "dry-run-example", R"(
  selector:
    matchLabels:
      app: httpbin
  action: DENY
  rules:
  - to:
    - operation:
        paths: ["/headers"]
)", R"({"istio.io/dry-run": "true"})");
  const std::string ref_source_snippet = ap("foo", "snippet", rules("ALLOW", from(R"(principals: ["admin", "dev"], namespaces: ["prod", "test"], notIpBlocks: ["203.0.113.4"])")));
  const std::string ref_operation_snippet = ap("foo", "snippet", rules("ALLOW", to(R"(hosts: ["*.example.com"], methods: ["GET", "HEAD"], notPaths: ["/admin*"])")));
  // Concept page (concepts/security). Several examples select app=httpbin,version=v1.
  const std::string httpbin_v1_allow = "\n  selector:\n    matchLabels:\n      app: httpbin\n      version: v1\n  action: ALLOW\n  rules:\n";
  const std::string concept_httpbin = ap("foo", "httpbin", httpbin_v1_allow + R"(  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/sleep"]
    - source:
        namespaces: ["dev"]
    to:
    - operation:
        methods: ["GET"]
    when:
    - key: request.auth.claims[iss]
      values: ["https://accounts.google.com"]
)");
  const std::string concept_httpbin_deny = ap("foo", "httpbin-deny", R"(
  selector:
    matchLabels:
      app: httpbin
      version: v1
  action: DENY
  rules:
  - from:
    - source:
        notNamespaces: ["foo"]
)");
  const Dest products{.ns = "default", .labels = {{"app", "products"}}};
  const std::string products_selector = "\n  selector:\n    matchLabels:\n      app: products\n";
  const std::string concept_allow_read = ap("default", "allow-read", products_selector + R"(  action: ALLOW
  rules:
  - to:
    - operation:
         methods: ["GET", "HEAD"]
)");
  const std::string concept_tester = ap("default", "tester", products_selector + R"(  rules:
  - to:
    - operation:
        paths: ["/test/*", "*/info"]
)");
  const std::string concept_healthz = ap("default", "disable-jwt-for-healthz", products_selector + R"(  action: ALLOW
  rules:
  - to:
    - operation:
        notPaths: ["/healthz"]
    from:
    - source:
        requestPrincipals: ["*"]
)");
  const std::string concept_jwt_admin = ap("default", "enable-jwt-for-admin", products_selector + R"(  action: DENY
  rules:
  - to:
    - operation:
        paths: ["/admin"]
    from:
    - source:
        notRequestPrincipals: ["*"]
)");
  const std::string concept_deny_all = ap("foo", "deny-all", rules("DENY", "{}"));
  const std::string concept_custom_condition = ap("foo", "httpbin", httpbin_v1_allow + R"(  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/sleep"]
    to:
    - operation:
        methods: ["GET"]
    when:
    - key: request.headers[version]
      values: ["v1", "v2"]
)");
  const std::string concept_public = ap("foo", "httpbin", httpbin_v1_allow + R"(  - to:
    - operation:
        methods: ["GET", "POST"]
)");
  const std::string concept_authenticated_l4 = ap("foo", "httpbin", rules("ALLOW", from(R"(principals: ["*"])")));
  const Dest mongodb{.ns = "default", .labels = {{"app", "mongodb"}}};
  const std::string concept_mongodb = ap("default", "mongodb-policy", R"(
 selector:
   matchLabels:
     app: mongodb
 action: ALLOW
 rules:
 - from:
   - source:
       principals: ["cluster.local/ns/default/sa/bookinfo-ratings-v2"]
   to:
   - operation:
       ports: ["27017"]
)");
  const std::string ratings = "cluster.local/ns/default/sa/bookinfo-ratings-v2";
  const std::string concept_deny_bad = ap("foo", "deny-bad", rules("DENY", from("namespaces: [bad]")));
  // Ambient L4 docs (ambient/usage/l4-policy).
  const Dest ambient_httpbin{.ns = "ambient-demo", .labels = {{"app", "httpbin"}}};
  const std::string ambient_sleep_rule = R"(
  selector:
    matchLabels:
      app: httpbin
  action: ALLOW
  rules:
  - from:
    - source:
        principals:
        - cluster.local/ns/ambient-demo/sa/sleep
)";
  const std::string ambient_allow_sleep = ap("ambient-demo", "allow-sleep-to-httpbin", ambient_sleep_rule);
  const std::string ambient_allow_sleep_get = ap("ambient-demo", "allow-sleep-to-httpbin", ambient_sleep_rule + R"(    to:
    - operation:
        methods: ["GET"]
)");
  const std::string ambient_sleep = "cluster.local/ns/ambient-demo/sa/sleep";
  // PeerAuthentication (peer_authentication.proto, concept page).
  const std::string pa_foo_strict = pa("foo", "default", "\n  mtls:\n    mode: STRICT\n");
  const std::string pa_foo_permissive = pa("foo", "default", "\n  mtls:\n    mode: PERMISSIVE\n");
  const std::string finance_selector = "\n  selector:\n    matchLabels:\n      app: finance\n";
  const std::string pa_finance_strict = pa("foo", "finance", finance_selector + "  mtls:\n    mode: STRICT\n");
  const std::string pa_finance_strict_8080 =
      pa("foo", "finance", finance_selector + "  mtls:\n    mode: STRICT\n  portLevelMtls:\n    8080:\n      mode: DISABLE\n");
  const std::string pa_finance_unset_8080 =
      pa("foo", "finance", finance_selector + "  mtls:\n    mode: UNSET\n  portLevelMtls:\n    8080:\n      mode: DISABLE\n");
  const Dest finance{.labels = {{"app", "finance"}}};
  const std::string pa_reviews = pa("foo", "example-peer-policy", R"(
  selector:
    matchLabels:
      app: reviews
  mtls:
    mode: STRICT
)");
  const std::string pa_example_app = pa("foo", "example-workload-policy", R"(
  selector:
     matchLabels:
       app: example-app
  portLevelMtls:
    80:
      mode: DISABLE
)");
  const Dest example_app{.labels = {{"app", "example-app"}}};
  return {
      // --- 6.1 AuthorizationPolicy reference ---
      {"doc_reference_httpbin_allow_l7_rule_denies_everything", {ref_httpbin}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      // Ferry (1): judged on `from`, the methods part counts as matched -- every connection
      // from dev is denied (the reference's TCP outcome; ztunnel: no-op).
      {"doc_reference_deny_post_from_dev_denies_dev", {ref_deny_dev_post}, {}, mtlsFrom(principal("dev", "x")),
       deniedBy("foo/httpbin", 0)},
      {"doc_reference_deny_post_from_dev_other_namespace_passes", {ref_deny_dev_post}, {}, mtlsFrom(kSleep),
       allowedNoAllowPolicy()},
      {"doc_reference_deny_post_8080_denies_port", {ref_deny_post_8080}, {}, mtlsFrom(kSleep, 8080),
       deniedBy("foo/httpbin", 0)},
      {"doc_reference_deny_post_8080_denies_plaintext", {ref_deny_post_8080}, {}, plaintext(8080),
       deniedBy("foo/httpbin", 0)},
      {"doc_reference_deny_post_8080_other_port_passes", {ref_deny_post_8080}, {}, mtlsFrom(kSleep, 9090),
       allowedNoAllowPolicy()},
      // Ferry (1): without the ports, every connection is denied (the reference: "all TCP
      // traffic would be denied"; ztunnel: no-op).
      {"doc_reference_deny_post_without_ports_denies_everything", {denyRule(to(R"(methods: ["POST"])"))}, {},
       mtlsFrom(kSleep, 9090), deniedBy("foo/d", 0)},
      // Ferry (1)+(4): reported as audited (L7 parts match), never decides (ztunnel ignores AUDIT).
      {"doc_reference_audit_never_decides", {ref_audit}, {.ns = "ns1", .labels = {{"app", "myapi"}}},
       mtlsFrom(kSleep), allowedNoAllowPolicy().audit({"ns1/anyname"})},
      {"doc_reference_allow_nothing_namespace", {allow_nothing_foo}, {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"doc_reference_allow_all_namespace", {allow_all_foo}, {}, plaintext(), allowedBy("foo/allow-all", 0)},
      {"doc_reference_allow_all_deny_still_denies", {allow_all_foo, concept_deny_all}, {}, mtlsFrom(kSleep),
       deniedBy("foo/deny-all", 0)},
      {"doc_reference_allow_nothing_selector_selected", {allow_nothing_bar_httpbin},
       {.ns = "bar", .labels = {{"app", "httpbin"}}}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"doc_reference_allow_nothing_selector_other_workload", {allow_nothing_bar_httpbin},
       {.ns = "bar", .labels = {{"app", "web"}}}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"doc_reference_allow_nothing_root_v1_any_namespace", {allow_nothing_v1},
       {.ns = "bar", .labels = {{"app", "x"}, {"version", "v1"}}}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"doc_reference_allow_nothing_root_v1_other_version", {allow_nothing_v1},
       {.ns = "bar", .labels = {{"app", "x"}, {"version", "v2"}}}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      // Ferry (1)+(4): the dry-run DENY is judged on L4 (paths match) and only reported.
      {"doc_reference_dry_run_not_enforced", {ref_dry_run}, {}, mtlsFrom(kSleep),
       allowedNoAllowPolicy().audit({"foo/dry-run-example"})},
      // "admin" is an exact principal: never a real identity.
      {"doc_reference_source_snippet_short_principal_never_matches", {ref_source_snippet}, {},
       mtlsFrom(principal("prod", "admin")), deniedNoAllowMatched()},
      {"doc_reference_operation_snippet_l7_denies_everything", {ref_operation_snippet}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      // Value forms: "abc" exact, "abc*" prefix, "*abc" suffix, "*" presence.
      {"doc_reference_value_exact_not_longer", {allowRule(from("namespaces: [abc]"))}, {},
       mtlsFrom(principal("abcd", "x")), deniedNoAllowMatched()},
      {"doc_reference_value_prefix_matches_itself", {allowRule(from(R"(namespaces: ["abc*"])"))}, {},
       mtlsFrom(principal("abc", "x")), allowedBy("foo/p", 0)},
      {"doc_reference_value_prefix_matches_longer", {allowRule(from(R"(namespaces: ["abc*"])"))}, {},
       mtlsFrom(principal("abcd", "x")), allowedBy("foo/p", 0)},
      {"doc_reference_value_suffix_matches_itself", {allowRule(from(R"(namespaces: ["*abc"])"))}, {},
       mtlsFrom(principal("abc", "x")), allowedBy("foo/p", 0)},
      {"doc_reference_value_suffix_matches_longer", {allowRule(from(R"(namespaces: ["*abc"])"))}, {},
       mtlsFrom(principal("xabc", "x")), allowedBy("foo/p", 0)},
      {"doc_reference_value_presence_any_non_empty", {allowRule(from(R"(namespaces: ["*"])"))}, {},
       mtlsFrom(principal("x", "y")), allowedBy("foo/p", 0)},
      // --- 6.2 Authorization concept page ---
      {"doc_concept_httpbin_l7_rule_denies_selected", {concept_httpbin}, {}, mtlsFrom(kSleep), deniedNoAllowMatched()},
      {"doc_concept_httpbin_l7_rule_other_workload_unaffected", {concept_httpbin},
       {.labels = {{"app", "httpbin"}, {"version", "v2"}}}, mtlsFrom(kSleep), allowedNoAllowPolicy()},
      {"doc_concept_httpbin_deny_other_namespace_denied", {concept_httpbin_deny}, {},
       mtlsFrom(principal("bar", "x")), deniedBy("foo/httpbin-deny", 0)},
      {"doc_concept_httpbin_deny_same_namespace_falls_through", {concept_httpbin_deny}, {},
       mtlsFrom(principal("foo", "x")), allowedNoAllowPolicy()},
      {"doc_concept_httpbin_deny_plaintext_denied", {concept_httpbin_deny}, {}, plaintext(),
       deniedBy("foo/httpbin-deny", 0)},
      {"doc_concept_httpbin_deny_precedes_allow", {concept_httpbin_deny, allow_all_foo}, {},
       mtlsFrom(principal("bar", "x")), deniedBy("foo/httpbin-deny", 0)},
      {"doc_concept_allow_read_l7_denies_everything", {concept_allow_read}, products, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"doc_concept_tester_paths_denies_everything", {concept_tester}, products, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"doc_concept_disable_jwt_for_healthz_denies_everything", {concept_healthz}, products, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      // Ferry (1): every part is L7, so it matches everything: deny all to products
      // (ztunnel: no-op; the reference's "missing attributes match").
      {"doc_concept_enable_jwt_for_admin_denies_everything", {concept_jwt_admin}, products, mtlsFrom(kSleep),
       deniedBy("default/enable-jwt-for-admin", 0)},
      {"doc_concept_allow_nothing", {ap("foo", "allow-nothing", "{action: ALLOW}")}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"doc_concept_deny_all_beats_allow_all", {concept_deny_all, allow_all_foo}, {}, mtlsFrom(kSleep),
       deniedBy("foo/deny-all", 0)},
      {"doc_concept_allow_all", {allow_all_foo, ap("foo", "other", rules("ALLOW", from("namespaces: [x]")))}, {},
       plaintext(), allowedBy("foo/allow-all", 0)},
      {"doc_concept_custom_condition_l7_denies_everything", {concept_custom_condition}, {}, mtlsFrom(kSleep),
       deniedNoAllowMatched()},
      {"doc_concept_public_access_l7_denies_everything", {concept_public}, {}, plaintext(), deniedNoAllowMatched()},
      {"doc_concept_authenticated_only_l4_mtls_allowed", {concept_authenticated_l4}, {}, mtlsFrom(kOther),
       allowedBy("foo/httpbin", 0)},
      {"doc_concept_authenticated_only_l4_plaintext_denied", {concept_authenticated_l4}, {}, plaintext(),
       deniedNoAllowMatched()},
      {"doc_concept_mongodb_policy_ratings_allowed", {concept_mongodb}, mongodb, mtlsFrom(ratings, 27017),
       allowedBy("default/mongodb-policy", 0)},
      {"doc_concept_mongodb_policy_other_port", {concept_mongodb}, mongodb, mtlsFrom(ratings, 8080),
       deniedNoAllowMatched()},
      {"doc_concept_mongodb_policy_other_principal", {concept_mongodb}, mongodb, mtlsFrom(kSleep, 27017),
       deniedNoAllowMatched()},
      {"doc_concept_mongodb_policy_plaintext", {concept_mongodb}, mongodb, plaintext(27017), deniedNoAllowMatched()},
      // Value matching, through trustDomains (ferry (5)): "test.abc.*" prefix, "*.abc.com" suffix.
      {"doc_concept_value_prefix_test_abc_com", {allowRule(from(R"(trustDomains: ["test.abc.*"])"))}, {},
       mtlsFrom(principal("a", "b", "test.abc.com")), allowedBy("foo/p", 0)},
      {"doc_concept_value_prefix_test_abc_com_cn", {allowRule(from(R"(trustDomains: ["test.abc.*"])"))}, {},
       mtlsFrom(principal("a", "b", "test.abc.com.cn")), allowedBy("foo/p", 0)},
      {"doc_concept_value_prefix_test_abc_org", {allowRule(from(R"(trustDomains: ["test.abc.*"])"))}, {},
       mtlsFrom(principal("a", "b", "test.abc.org")), allowedBy("foo/p", 0)},
      {"doc_concept_value_suffix_eng_abc_com", {allowRule(from(R"(trustDomains: ["*.abc.com"])"))}, {},
       mtlsFrom(principal("a", "b", "eng.abc.com")), allowedBy("foo/p", 0)},
      {"doc_concept_value_suffix_test_eng_abc_com", {allowRule(from(R"(trustDomains: ["*.abc.com"])"))}, {},
       mtlsFrom(principal("a", "b", "test.eng.abc.com")), allowedBy("foo/p", 0)},
      // ["*"] is presence, unlike leaving the field out (which matches an empty value too).
      {"doc_concept_presence_differs_from_unset_plaintext_denied", {allowRule(from(R"(principals: ["*"])"))}, {},
       plaintext(), deniedNoAllowMatched()},
      {"doc_concept_presence_differs_from_unset_unset_allows", {allowRule(to(R"(ports: ["8080"])"))}, {},
       plaintext(8080), allowedBy("foo/p", 0)},
      // Exclusion matching: notValues, notIpBlocks, notPorts.
      {"doc_concept_exclusion_not_values", {allowRule(when("key: source.ip, notValues: [10.0.0.1]"))}, {},
       fromIp("10.0.0.1"), deniedNoAllowMatched()},
      {"doc_concept_exclusion_not_ip_blocks", {allowRule(from("notIpBlocks: [10.0.0.0/24]"))}, {}, fromIp("10.0.0.1"),
       deniedNoAllowMatched()},
      {"doc_concept_exclusion_not_ports", {allowRule(to(R"(notPorts: ["8080"])"))}, {}, mtlsFrom(kSleep, 8080),
       deniedNoAllowMatched()},
      // "Using Istio authorization on plain TCP": HTTP fields in an ALLOW rule make it never match.
      {"doc_concept_plain_tcp_http_field_in_allow_never_matches", {allowRule(to(R"(ports: ["8080"], methods: [GET])"))},
       {}, mtlsFrom(kSleep, 8080), deniedNoAllowMatched()},
      // "Dependency on mutual TLS": DENY namespaces [bad] lets plaintext from bad through.
      {"doc_concept_deny_namespace_does_not_deny_plaintext", {concept_deny_bad}, {}, plaintext(),
       allowedNoAllowPolicy()},
      {"doc_concept_deny_namespace_denies_mtls", {concept_deny_bad}, {}, mtlsFrom(principal("bad", "x")),
       deniedBy("foo/deny-bad", 0)},
      // --- 6.3 Ambient L4 docs ---
      {"doc_ambient_allow_sleep_to_httpbin_sleep_allowed", {ambient_allow_sleep}, ambient_httpbin,
       mtlsFrom(ambient_sleep), allowedBy("ambient-demo/allow-sleep-to-httpbin", 0)},
      {"doc_ambient_allow_sleep_to_httpbin_other_denied", {ambient_allow_sleep}, ambient_httpbin,
       mtlsFrom(principal("ambient-demo", "notsleep")), deniedNoAllowMatched()},
      {"doc_ambient_allow_sleep_to_httpbin_plaintext_denied", {ambient_allow_sleep}, ambient_httpbin, plaintext(),
       deniedNoAllowMatched()},
      {"doc_ambient_allow_sleep_get_denied_even_from_sleep", {ambient_allow_sleep_get}, ambient_httpbin,
       mtlsFrom(ambient_sleep), deniedNoAllowMatched()},
      {"doc_ambient_pa_disable_acts_as_permissive", {pa("foo", "default", "{mtls: {mode: DISABLE}}")}, {},
       plaintext(), mtlsIs(M::kDisable, "foo/default")},
      // --- 6.4 PeerAuthentication ---
      {"doc_pa_namespace_strict", {pa_foo_strict}, {.labels = {{"app", "any"}}}, plaintext(),
       mtlsIs(M::kStrict, "foo/default")},
      {"doc_pa_finance_strict_finance_pods", {pa_foo_permissive, pa_finance_strict}, finance, plaintext(),
       mtlsIs(M::kStrict, "foo/finance")},
      {"doc_pa_finance_strict_other_pods", {pa_foo_permissive, pa_finance_strict}, {}, plaintext(),
       mtlsIs(M::kPermissive, "foo/default")},
      {"doc_pa_finance_8080_disable_exempt", {pa_finance_strict_8080}, finance, plaintext(8080),
       mtlsIs(M::kDisable, "foo/finance", true)},
      {"doc_pa_finance_8080_disable_other_port_strict", {pa_finance_strict_8080}, finance, plaintext(9090),
       mtlsIs(M::kStrict, "foo/finance")},
      // Ferry (3): exempt under a STRICT parent (ztunnel keeps 8080 strict).
      {"doc_pa_finance_unset_8080_strict_parent_exempt", {pa_foo_strict, pa_finance_unset_8080}, finance,
       plaintext(8080), mtlsIs(M::kDisable, "foo/finance", true)},
      {"doc_pa_finance_unset_8080_strict_parent_other_port", {pa_foo_strict, pa_finance_unset_8080}, finance,
       plaintext(9090), mtlsIs(M::kStrict, "foo/default")},
      {"doc_pa_finance_unset_8080_permissive_parent", {pa_foo_permissive, pa_finance_unset_8080}, finance,
       plaintext(9090), mtlsIs(M::kPermissive, "foo/default")},
      {"doc_pa_example_peer_policy_reviews_strict", {pa_reviews}, {.labels = {{"app", "reviews"}}}, plaintext(),
       mtlsIs(M::kStrict, "foo/example-peer-policy")},
      // The key is the target port 80, not the Service port 8000 (ferry (3) for DISABLE).
      {"doc_pa_example_workload_policy_target_port_exempt", {pa_foo_strict, pa_example_app}, example_app,
       plaintext(80), mtlsIs(M::kDisable, "foo/example-workload-policy", true)},
      {"doc_pa_example_workload_policy_service_port_not_a_key", {pa_foo_strict, pa_example_app}, example_app,
       plaintext(8000), mtlsIs(M::kStrict, "foo/default")},
      {"doc_pa_oldest_namespace_policy_wins",
       {pa("foo", "newer", "{mtls: {mode: PERMISSIVE}}", "2024-03-01T10:00:00Z"),
        pa("foo", "older", "{mtls: {mode: STRICT}}", "2024-02-01T10:00:00Z")},
       {}, plaintext(), mtlsIs(M::kStrict, "foo/older")},
      {"doc_pa_oldest_workload_policy_wins",
       {pa("foo", "newer", "{selector: {matchLabels: {app: httpbin}}, mtls: {mode: STRICT}}", "2024-03-01T10:00:00Z"),
        pa("foo", "older", "{selector: {matchLabels: {version: v1}}, mtls: {mode: PERMISSIVE}}", "2024-02-01T10:00:00Z")},
       {}, plaintext(), mtlsIs(M::kPermissive, "foo/older")},
      // A mesh policy with UNSET is PERMISSIVE (here: the workload's own mode, permissive).
      {"doc_pa_mesh_unset_is_permissive", {pa(kRoot, "default", "{mtls: {mode: UNSET}}")}, {}, plaintext(),
       mtlsIs(M::kPermissive)},
      {"doc_pa_workload_beats_namespace_beats_mesh",
       {pa(kRoot, "default", "{mtls: {mode: STRICT}}"), pa("foo", "default", "{mtls: {mode: PERMISSIVE}}"),
        pa("foo", "w", "{selector: {matchLabels: {app: httpbin}}, mtls: {mode: STRICT}}")},
       {}, plaintext(), mtlsIs(M::kStrict, "foo/w")},
  };
}

std::vector<Case> allCases() {
  std::vector<Case> all;
  for (auto part : {principalCases(), namespaceCases(), serviceAccountAndTrustDomainCases(), ipBlockCases(),
                    portCases(), conditionCases(), structureCases(), auditCases(), scopeCases(), l7Cases(),
                    peerAuthenticationCases(), captureCases(), documentedCases()}) {
    for (auto& c : part) all.push_back(std::move(c));
  }
  return all;
}

// --- The evaluation ----------------------------------------------------------------------

common::IpAddress ip(const std::string& text) {
  auto parsed = common::parseIp(text);
  EXPECT_TRUE(parsed.ok()) << text;
  return parsed.ok() ? *parsed : common::IpAddress();
}

std::string keyOf(const AuthorizationPtr& p) { return p ? p->meta.key() : ""; }

class PolicyEvalTest : public testing::TestWithParam<Case> {};

TEST_P(PolicyEvalTest, Judges) {
  const Case& c = GetParam();
  std::string yaml;
  for (const auto& doc : c.docs) yaml += (yaml.empty() ? "" : "---\n") + doc;
  SCOPED_TRACE(c.name + "\n" + yaml);

  auto decoded = decodeYamlFile(yaml, "case.yaml", kOrigin);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), c.docs.size());
  for (const auto& d : *decoded) ASSERT_TRUE(d.object.ok()) << d.object.status();
  Store store(kRoot);
  auto result = store.replace(kOrigin, *std::move(decoded));
  ASSERT_EQ(result.refused.size(), c.expect.refused) << (result.refused.empty() ? "" : result.refused.front());
  auto set = store.current();

  workloads::Workload dest;
  dest.name = "dest";
  dest.namespace_name = workloads::intern(c.dest.ns);
  dest.labels = workloads::LabelSet(c.dest.labels);
  dest.ips = {ip(c.req.dst)};
  dest.tls_mode = c.dest.strict ? workloads::TlsMode::kStrict : workloads::TlsMode::kPermissive;
  MtlsMode fallback = c.dest.strict ? MtlsMode::kStrict : MtlsMode::kPermissive;
  Request request{ip(c.req.src), c.req.principal, ip(c.req.dst), c.req.port};

  const Expect& want = c.expect;
  switch (want.what) {
    case Expect::What::kAuthz: {
      Decision d = set->authorize(dest, request);
      EXPECT_EQ(d.allowed, want.allowed) << d.reason;
      EXPECT_EQ(keyOf(d.policy), want.by) << d.reason;
      EXPECT_EQ(d.rule, want.rule) << d.reason;
      if (!want.by.empty()) {
        EXPECT_THAT(d.reason, HasSubstr(want.by));
      }
      std::vector<std::string> audited;
      for (const auto& p : d.audited) audited.push_back(p->meta.key());
      EXPECT_THAT(audited, ElementsAreArray(want.audited));
      // ferryctl policy check says the same.
      EXPECT_EQ(set->explain(dest, request, fallback).decision.allowed, want.allowed);
      break;
    }
    case Expect::What::kMtls: {
      MtlsDecision m = set->mtls(dest, request.destination_port, fallback);
      EXPECT_EQ(mtlsModeName(m.mode), std::string(mtlsModeName(want.mode)));
      EXPECT_EQ(m.policy ? m.policy->meta.key() : "", want.mode_by);
      EXPECT_EQ(m.port_level, want.port_level);
      Explanation e = set->explain(dest, request, fallback);
      EXPECT_EQ(e.plaintext_refused, request.principal.empty() && want.mode == MtlsMode::kStrict);
      break;
    }
    case Expect::What::kCaptures:
      EXPECT_EQ(set->capturesPlaintext(dest, fallback), want.captures);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, PolicyEvalTest, testing::ValuesIn(allCases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// The table must keep covering what it claims: at least 90 rows, every documented example.
TEST(PolicyEvalTableTest, HasEnoughRows) {
  auto all = allCases();
  EXPECT_GE(all.size(), 90u);
  size_t documented = 0;
  for (const auto& c : all) documented += c.name.rfind("doc_", 0) == 0;
  EXPECT_GE(documented, 60u);
}

}  // namespace
}  // namespace ferry::policy
