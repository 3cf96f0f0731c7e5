// Decoding AuthorizationPolicy and PeerAuthentication (proxy/policy/decode.h): what is
// refused, and that every refusal names the object, the field and the reason; what a valid
// object becomes.
#include "proxy/policy/decode.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/policy_docs.h"

namespace ferry::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using namespace testing_docs;  // NOLINT: the YAML builders read as a small language

constexpr const char* kFile = kCaseFile;  // what decodeOne reads, and from where
constexpr const char* kOrigin = kCaseOrigin;
constexpr char kAp[] = "AuthorizationPolicy foo/p";
constexpr char kPa[] = "PeerAuthentication foo/pa";

// An AuthorizationPolicy foo/p with this spec.
std::string apSpec(const std::string& spec) { return ap("foo", "p", spec); }
// An ALLOW foo/p with one rule.
std::string apRule(const std::string& rule) { return ap("foo", "p", rules("ALLOW", rule)); }
// A PeerAuthentication foo/pa with this spec.
std::string paSpec(const std::string& spec) { return pa("foo", "pa", spec); }

struct Refused {
  std::string name;
  std::string yaml;
  std::string who;     // "AuthorizationPolicy foo/p"
  std::string path;    // "spec.rules[0].from[0].source.ipBlocks[0]"
  std::string reason;  // part of the reason
};
void PrintTo(const Refused& r, std::ostream* os) { *os << r.name; }

std::vector<Refused> refusedRows() {
  return {
      // --- top level and metadata ---
      {"alpha_api_version",
       "apiVersion: security.istio.io/v1alpha1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\nspec: {}\n",
       kAp, "apiVersion", "apiVersion 'security.istio.io/v1alpha1' is not served"},
      {"other_group_api_version",
       "apiVersion: networking.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: foo}\nspec: {}\n",
       kAp, "apiVersion", "is not served (expected security.istio.io/v1 or security.istio.io/v1beta1)"},
      {"wrong_kind", object("RequestAuthentication", "foo", "p", "{}"), "RequestAuthentication foo/p", "kind",
       "'RequestAuthentication' is not a policy kind"},
      {"missing_kind", "apiVersion: security.istio.io/v1\nmetadata: {name: p, namespace: foo}\nspec: {}\n", "object",
       "kind", "required key is missing"},
      {"missing_name", "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {namespace: foo}\n",
       "AuthorizationPolicy", "metadata.name", "required key is missing"},
      {"bad_name", object("AuthorizationPolicy", "foo", "Not_A_Name", "{}"), "AuthorizationPolicy", "metadata.name",
       "'Not_A_Name' is not a valid object name"},
      {"bad_namespace", object("AuthorizationPolicy", "Foo Bar", "p", "{}"), "AuthorizationPolicy",
       "metadata.namespace", "is not a valid namespace"},
      {"unknown_top_level_key", apSpec("{}") + "extra: 1\n", kAp, "extra", "unknown key 'extra'"},
      {"dry_run_not_a_boolean", ap("foo", "p", "{}", R"({istio.io/dry-run: "yes"})"), kAp,
       "metadata.annotations.istio.io/dry-run", "'yes' is not a boolean"},
      {"dry_run_on_audit", ap("foo", "p", rules("AUDIT", "{}"), R"({istio.io/dry-run: "true"})"), kAp, "spec",
       "istio.io/dry-run is not for AUDIT policies"},
      // --- spec ---
      {"unknown_spec_field", apSpec("{rule: [{}]}"), kAp, "spec.rule", "unknown key 'rule'"},
      {"unknown_action", apSpec("{action: ALLOWED}"), kAp, "spec.action",
       "unknown action 'ALLOWED' (expected ALLOW, DENY or AUDIT)"},
      {"lowercase_action", apSpec("{action: deny, rules: [{}]}"), kAp, "spec.action", "unknown action 'deny'"},
      {"custom_action", apSpec("{action: CUSTOM, provider: {name: ext-authz}, rules: [{}]}"), kAp, "spec.action",
       "action CUSTOM delegates to an external authorizer"},
      {"provider_without_custom", apSpec("{provider: {name: ext-authz}, rules: [{}]}"), kAp, "spec.provider",
       "provider is only for action CUSTOM"},
      {"deny_without_rules", apSpec("{action: DENY}"), kAp, "spec", "a DENY policy without rules is meaningless"},
      {"deny_with_empty_rules", apSpec("{action: DENY, rules: []}"), kAp, "spec.rules",
       "a DENY policy without rules is meaningless"},
      {"target_refs", apSpec("{targetRefs: [{kind: Service, group: \"\", name: httpbin}], rules: [{}]}"), kAp,
       "spec.targetRefs", "targets a Gateway or Service"},
      {"target_ref", apSpec("{targetRef: {kind: Gateway, group: gateway.networking.k8s.io, name: waypoint}}"), kAp,
       "spec.targetRef", "ferry enforces workload policies only"},
      {"rules_not_a_list", apSpec("{rules: {from: []}}"), kAp, "spec.rules", "expected a list"},
      {"null_rule", apSpec("{rules: [null]}"), kAp, "spec.rules[0]", "a rule must not be empty"},
      {"selector_unknown_field", apSpec("{selector: {matchExpressions: []}}"), kAp, "spec.selector.matchExpressions",
       "unknown key 'matchExpressions'"},
      {"selector_star_in_value", apSpec("{selector: {matchLabels: {app: \"web*\"}}}"), kAp,
       "spec.selector.matchLabels.app", "'*'"},
      {"selector_star_in_key", apSpec("{selector: {matchLabels: {\"a*\": web}}}"), kAp,
       "spec.selector.matchLabels.a*", "'*'"},
      // --- rules[].from ---
      {"empty_from_list", apRule("{from: []}"), kAp, "spec.rules[0].from", "an empty list matches nothing"},
      {"from_entry_without_source", apRule("{from: [{}]}"), kAp, "spec.rules[0].from[0].source",
       "required key is missing"},
      {"null_source", apRule("{from: [{source: null}]}"), kAp, "spec.rules[0].from[0].source", "expected a map"},
      {"empty_source", apRule("{from: [{source: {}}]}"), kAp, "spec.rules[0].from[0].source",
       "a source must set at least one field"},
      {"source_with_only_empty_lists", apRule(from("principals: [], notNamespaces: []")), kAp,
       "spec.rules[0].from[0].source", "a source must set at least one field"},
      {"unknown_source_field", apRule(from("principal: [x]")), kAp, "spec.rules[0].from[0].source.principal",
       "unknown key 'principal'"},
      {"malformed_cidr", apRule(from("ipBlocks: [10.0.0/8]")), kAp, "spec.rules[0].from[0].source.ipBlocks[0]",
       "'10.0.0/8' is not an IP address or CIDR block"},
      {"cidr_prefix_33", apRule(from("ipBlocks: [10.0.0.0/8, 10.0.0.0/33]")), kAp,
       "spec.rules[0].from[0].source.ipBlocks[1]", "'10.0.0.0/33' is not an IP address or CIDR block"},
      {"cidr_ipv6_prefix_129", apRule(from(R"(notIpBlocks: ["fd00::/129"])")), kAp,
       "spec.rules[0].from[0].source.notIpBlocks[0]", "is not an IP address or CIDR block"},
      {"cidr_empty_prefix", apRule(from("ipBlocks: [10.0.0.0/]")), kAp, "spec.rules[0].from[0].source.ipBlocks[0]",
       "is not an IP address or CIDR block"},
      {"ip_block_hostname", apRule(from("ipBlocks: [example.com]")), kAp, "spec.rules[0].from[0].source.ipBlocks[0]",
       "is not an IP address or CIDR block"},
      {"ip_block_leading_zero", apRule(from("ipBlocks: [010.0.0.1]")), kAp,
       "spec.rules[0].from[0].source.ipBlocks[0]", "is not an IP address or CIDR block"},
      {"remote_ip_blocks_checked_too", apRule(from("remoteIpBlocks: [300.0.0.1]")), kAp,
       "spec.rules[0].from[0].source.remoteIpBlocks[0]", "is not an IP address or CIDR block"},
      {"principal_star_in_the_middle", apRule(from(R"(principals: ["cluster.local/ns/*/sa/x"])")), kAp,
       "spec.rules[0].from[0].source.principals[0]", "a '*' may only stand alone, or be the first or last"},
      {"principal_star_at_both_ends", apRule(from(R"(notPrincipals: ["*/ns/foo/*"])")), kAp,
       "spec.rules[0].from[0].source.notPrincipals[0]", "a '*' may only"},
      {"principal_with_spiffe_scheme", apRule(from(R"(principals: ["spiffe://cluster.local/ns/a/sa/b"])")), kAp,
       "spec.rules[0].from[0].source.principals[0]", "principals are written without spiffe://"},
      {"not_principal_with_spiffe_scheme", apRule(from(R"(notPrincipals: ["spiffe://cluster.local/*"])")), kAp,
       "spec.rules[0].from[0].source.notPrincipals[0]", "without spiffe://"},
      {"empty_principal", apRule(from(R"(principals: [""])")), kAp, "spec.rules[0].from[0].source.principals[0]",
       "empty value"},
      {"namespace_star_in_the_middle", apRule(from(R"(namespaces: ["te*st"])")), kAp,
       "spec.rules[0].from[0].source.namespaces[0]", "a '*' may only"},
      {"empty_namespace", apRule(from(R"(notNamespaces: [""])")), kAp, "spec.rules[0].from[0].source.notNamespaces[0]",
       "empty value"},
      {"trust_domain_star_in_the_middle", apRule(from(R"(trustDomains: ["a*.local"])")), kAp,
       "spec.rules[0].from[0].source.trustDomains[0]", "a '*' may only"},
      {"trust_domain_with_slash", apRule(from(R"(trustDomains: ["cluster.local/ns/foo"])")), kAp,
       "spec.rules[0].from[0].source.trustDomains[0]", "a trust domain has no '/'"},
      {"service_accounts_with_principals", apRule(from("serviceAccounts: [a/b], principals: [td/ns/a/sa/b]")), kAp,
       "spec.rules[0].from[0].source", "serviceAccounts cannot be combined with principals or namespaces"},
      {"service_account_with_star", apRule(from(R"(serviceAccounts: ["foo/*"])")), kAp,
       "spec.rules[0].from[0].source.serviceAccounts[0]", "is not a service account"},
      {"service_account_two_slashes", apRule(from("notServiceAccounts: [a/b/c]")), kAp,
       "spec.rules[0].from[0].source.notServiceAccounts[0]", "is not a service account"},
      {"service_account_empty_name", apRule(from("serviceAccounts: [foo/]")), kAp,
       "spec.rules[0].from[0].source.serviceAccounts[0]", "is not a service account"},
      // --- rules[].to ---
      {"empty_to_list", apRule("{to: []}"), kAp, "spec.rules[0].to", "an empty list matches nothing"},
      {"empty_operation", apRule("{to: [{operation: {}}]}"), kAp, "spec.rules[0].to[0].operation",
       "an operation must set at least one field"},
      {"operation_with_only_empty_lists", apRule(to("ports: [], methods: []")), kAp,
       "spec.rules[0].to[0].operation", "an operation must set at least one field"},
      {"port_too_large", apRule(to(R"(ports: ["70000"])")), kAp, "spec.rules[0].to[0].operation.ports[0]",
       "must be between 0 and 65535, got 70000"},
      {"port_not_a_number", apRule(to(R"(ports: ["http"])")), kAp, "spec.rules[0].to[0].operation.ports[0]",
       "'http' is not a whole number"},
      {"port_range", apRule(to(R"(ports: ["8000-9000"])")), kAp, "spec.rules[0].to[0].operation.ports[0]",
       "is not a whole number"},
      {"not_port_negative", apRule(to(R"(notPorts: ["-1"])")), kAp, "spec.rules[0].to[0].operation.notPorts[0]",
       "must be between 0 and 65535"},
      {"empty_port", apRule(to(R"(ports: [""])")), kAp, "spec.rules[0].to[0].operation.ports[0]",
       "is not a whole number"},
      {"empty_method", apRule(to(R"(methods: [GET, ""])")), kAp, "spec.rules[0].to[0].operation.methods[1]",
       "empty value"},
      // --- rules[].when ---
      {"unknown_when_key", apRule(when("key: source.port, values: [\"80\"]")), kAp, "spec.rules[0].when[0].key",
       "unknown condition key 'source.port'"},
      {"header_key_without_name", apRule(when("key: request.headers, values: [x]")), kAp,
       "spec.rules[0].when[0].key", "unknown condition key 'request.headers'"},
      {"retired_when_key_destination_namespace", apRule(when("key: destination.namespace, values: [foo]")), kAp,
       "spec.rules[0].when[0].key", "replaced by the policy's own namespace"},
      {"retired_when_key_destination_labels", apRule(when("key: \"destination.labels[app]\", values: [web]")), kAp,
       "spec.rules[0].when[0].key", "replaced by the workload selector"},
      {"retired_when_key_destination_user", apRule(when("key: destination.user, values: [x]")), kAp,
       "spec.rules[0].when[0].key", "only supported in v1alpha1"},
      {"when_without_key", apRule(when("values: [x]")), kAp, "spec.rules[0].when[0].key", "required key is missing"},
      {"when_without_values", apRule(when("key: source.ip")), kAp, "spec.rules[0].when[0]",
       "a condition needs values or notValues"},
      {"when_with_empty_value_lists", apRule(when("key: source.namespace, values: [], notValues: []")), kAp,
       "spec.rules[0].when[0]", "a condition needs values or notValues"},
      {"when_empty_value", apRule(when(R"(key: source.namespace, values: [""])")), kAp,
       "spec.rules[0].when[0].values[0]", "empty value"},
      {"when_empty_l7_value", apRule(when(R"(key: "request.headers[x]", notValues: [""])")), kAp,
       "spec.rules[0].when[0].notValues[0]", "empty value"},
      {"when_source_ip_not_an_ip", apRule(when("key: source.ip, values: [10.0.0.300]")), kAp,
       "spec.rules[0].when[0].values[0]", "is not an IP address or CIDR block"},
      {"when_destination_port_not_a_port", apRule(when("key: destination.port, notValues: [http]")), kAp,
       "spec.rules[0].when[0].notValues[0]", "'http' is not a whole number"},
      {"when_source_principal_star_in_the_middle", apRule(when(R"(key: source.principal, values: ["a/*/b"])")), kAp,
       "spec.rules[0].when[0].values[0]", "a '*' may only"},
      {"when_source_principal_with_spiffe_scheme",
       apRule(when(R"(key: source.principal, values: ["spiffe://cluster.local/ns/a/sa/b"])")), kAp,
       "spec.rules[0].when[0].values[0]", "without spiffe://"},
      // --- PeerAuthentication ---
      {"pa_port_level_without_selector", paSpec("{mtls: {mode: STRICT}, portLevelMtls: {8080: {mode: DISABLE}}}"),
       kPa, "spec.portLevelMtls", "portLevelMtls needs a workload selector"},
      {"pa_port_level_with_empty_selector", paSpec("{selector: {matchLabels: {}}, portLevelMtls: {8080: {mode: DISABLE}}}"),
       kPa, "spec.portLevelMtls", "portLevelMtls needs a workload selector"},
      {"pa_port_level_empty", paSpec("{selector: {matchLabels: {app: a}}, portLevelMtls: {}}"), kPa,
       "spec.portLevelMtls", "portLevelMtls needs at least one port"},
      {"pa_port_zero", paSpec("{selector: {matchLabels: {app: a}}, portLevelMtls: {0: {mode: DISABLE}}}"), kPa,
       "spec.portLevelMtls.0", "'0' is not a port (1 to 65535)"},
      {"pa_port_too_large", paSpec("{selector: {matchLabels: {app: a}}, portLevelMtls: {65536: {mode: DISABLE}}}"), kPa,
       "spec.portLevelMtls.65536", "is not a port"},
      {"pa_port_name", paSpec("{selector: {matchLabels: {app: a}}, portLevelMtls: {http: {mode: DISABLE}}}"), kPa,
       "spec.portLevelMtls.http", "'http' is not a port"},
      {"pa_unknown_mode", paSpec("{mtls: {mode: OPTIONAL}}"), kPa, "spec.mtls.mode", "unknown mTLS mode 'OPTIONAL'"},
      {"pa_unknown_port_mode", paSpec("{selector: {matchLabels: {app: a}}, portLevelMtls: {80: {mode: strict}}}"), kPa,
       "spec.portLevelMtls.80.mode", "unknown mTLS mode 'strict'"},
      {"pa_unknown_spec_field", paSpec("{mode: STRICT}"), kPa, "spec.mode", "unknown key 'mode'"},
      {"pa_unknown_mtls_field", paSpec("{mtls: {mode: STRICT, strict: true}}"), kPa, "spec.mtls.strict",
       "unknown key 'strict'"},
  };
}

class PolicyRefusalTest : public testing::TestWithParam<Refused> {};

TEST_P(PolicyRefusalTest, NamesObjectFieldAndReason) {
  const Refused& r = GetParam();
  SCOPED_TRACE(r.yaml);
  Decoded d = decodeOne(r.yaml);
  ASSERT_FALSE(d.object.ok());
  std::string message(d.object.status().message());
  // "<kind> <namespace>/<name>: case.yaml:<line>: <field path>: <reason>"
  EXPECT_THAT(message, testing::StartsWith(r.who + ": " + kFile + ":"));
  EXPECT_THAT(message, HasSubstr(": " + r.path + ": "));
  EXPECT_THAT(message, HasSubstr(r.reason));
}

INSTANTIATE_TEST_SUITE_P(Table, PolicyRefusalTest, testing::ValuesIn(refusedRows()),
                         [](const testing::TestParamInfo<Refused>& info) { return info.param.name; });

// The example of decode.h, to the character: object, file and line, field, reason.
TEST(PolicyDecodeTest, RefusalReadsAsDocumented) {
  const std::string yaml = R"(apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: allow-frontend
  namespace: shop
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/shop/sa/frontend"]
        ipBlocks:
        - 10.0.0.0/8
        - 10.0.0.0/33
)";
  auto docs = decodeYamlFile(yaml, "policies.yaml", kOrigin);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 1u);
  const Decoded& d = docs->front();
  EXPECT_EQ(d.kind, "AuthorizationPolicy");
  EXPECT_EQ(d.key, "shop/allow-frontend");
  ASSERT_FALSE(d.object.ok());
  EXPECT_EQ(std::string(d.object.status().message()),
            "AuthorizationPolicy shop/allow-frontend: policies.yaml:14: spec.rules[0].from[0].source.ipBlocks[1]: "
            "'10.0.0.0/33' is not an IP address or CIDR block");
}

TEST(PolicyDecodeTest, WrongKindKeepsNoKindForTheStore) {
  // The message names the object as written; `kind` stays empty: it is no policy object.
  Decoded d = decodeOne(object("Service", "foo", "web", "{}"));
  ASSERT_FALSE(d.object.ok());
  EXPECT_EQ(d.kind, "");
}

TEST(PolicyDecodeTest, DecodesEveryFieldOfAnAuthorizationPolicy) {
  const std::string yaml = R"(apiVersion: security.istio.io/v1beta1
kind: AuthorizationPolicy
metadata:
  name: shop-api
  namespace: shop
  annotations:
    istio.io/dry-run: "true"
spec:
  selector:
    matchLabels: {version: v1, app: api}
  action: DENY
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/web/sa/front", "*/sa/admin", "cluster.local/ns/ops/*", "*"]
        notNamespaces: [kube-system]
        ipBlocks: ["10.1.2.3/16", "fd00::1"]
        requestPrincipals: ["*"]
    - source:
        serviceAccounts: [batch, ops/cron]
        trustDomains: [cluster.local]
    to:
    - operation:
        ports: ["8080", 9090]
        notPorts: ["22"]
        methods: [POST]
    when:
    - key: source.ip
      notValues: [10.9.0.0/16]
    - key: destination.port
      values: ["8080"]
    - key: request.headers[x-debug]
      values: ["1"]
  - {}
)";
  Decoded d = decodeOne(yaml);
  ASSERT_TRUE(d.object.ok()) << d.object.status();
  EXPECT_EQ(d.kind, "AuthorizationPolicy");
  EXPECT_EQ(d.key, "shop/shop-api");
  const auto& p = *std::get<AuthorizationPtr>(*d.object);
  EXPECT_EQ(p.meta.origin, kOrigin);
  EXPECT_TRUE(p.dry_run);
  EXPECT_EQ(p.action, Action::kDeny);
  ASSERT_TRUE(p.selector.has_value());
  EXPECT_THAT(*p.selector, ElementsAre(Pair("app", "api"), Pair("version", "v1")));  // sorted
  ASSERT_EQ(p.rules.size(), 2u);
  const Rule& r = p.rules[0];
  ASSERT_EQ(r.from.size(), 2u);
  const Source& s = r.from[0];
  std::vector<std::string> principals;
  for (const auto& m : s.principals.values) principals.push_back(m.str());
  EXPECT_THAT(principals, ElementsAre("cluster.local/ns/web/sa/front", "*/sa/admin", "cluster.local/ns/ops/*", "*"));
  EXPECT_EQ(s.principals.values[1].kind, StringMatch::Kind::kSuffix);
  EXPECT_EQ(s.principals.values[2].kind, StringMatch::Kind::kPrefix);
  EXPECT_EQ(s.principals.values[3].kind, StringMatch::Kind::kPresence);
  ASSERT_EQ(s.namespaces.not_values.size(), 1u);
  EXPECT_EQ(s.namespaces.not_values[0].str(), "kube-system");
  ASSERT_EQ(s.ip_blocks.values.size(), 2u);
  EXPECT_EQ(s.ip_blocks.values[0].str(), "10.1.0.0/16");  // host bits cleared
  EXPECT_EQ(s.ip_blocks.values[1].str(), "fd00::1/128");
  EXPECT_THAT(s.l7_fields, ElementsAre("spec.rules[0].from[0].source.requestPrincipals"));
  // A bare service account is in the policy's namespace.
  EXPECT_THAT(r.from[1].service_accounts.values, ElementsAre("shop/batch", "ops/cron"));
  ASSERT_EQ(r.from[1].trust_domains.values.size(), 1u);
  ASSERT_EQ(r.to.size(), 1u);
  EXPECT_THAT(r.to[0].ports.values, ElementsAre(8080, 9090));
  EXPECT_THAT(r.to[0].ports.not_values, ElementsAre(22));
  ASSERT_EQ(r.when.size(), 3u);
  EXPECT_EQ(r.when[0].attribute, Attribute::kSourceIp);
  EXPECT_EQ(r.when[0].ips.not_values.at(0).str(), "10.9.0.0/16");
  EXPECT_EQ(r.when[1].attribute, Attribute::kDestinationPort);
  EXPECT_THAT(r.when[1].ports.values, ElementsAre(8080));
  EXPECT_EQ(r.when[2].attribute, Attribute::kL7);
  // Every L7 part of the rule, by path: what ferryctl and the log show.
  EXPECT_THAT(r.l7_fields, ElementsAre("spec.rules[0].from[0].source.requestPrincipals",
                                       "spec.rules[0].to[0].operation.methods",
                                       "spec.rules[0].when[2] request.headers[x-debug]"));
  EXPECT_TRUE(p.hasL7());
  // `- {}`: a rule with no conditions.
  const Rule& any = p.rules[1];
  EXPECT_TRUE(any.from.empty() && any.to.empty() && any.when.empty() && any.l7_fields.empty());
}

TEST(PolicyDecodeTest, EmptyFormsDecode) {
  // No spec, spec {}, no rules: an ALLOW that matches nothing. rules [{}]: one empty rule.
  for (const std::string& yaml :
       {std::string("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\n"),
        apSpec("{}"), apSpec("{action: ALLOW}"), apSpec("{selector: {}}"), apSpec("{selector: {matchLabels: {}}}")}) {
    SCOPED_TRACE(yaml);
    Decoded d = decodeOne(yaml);
    ASSERT_TRUE(d.object.ok()) << d.object.status();
    const auto& p = *std::get<AuthorizationPtr>(*d.object);
    EXPECT_EQ(p.action, Action::kAllow);
    EXPECT_TRUE(p.rules.empty());
    EXPECT_FALSE(p.selector.has_value());  // an empty selector is no selector
  }
  Decoded d = decodeOne(apSpec(rules("DENY", "{}")));
  ASSERT_TRUE(d.object.ok()) << d.object.status();
  EXPECT_EQ(std::get<AuthorizationPtr>(*d.object)->rules.size(), 1u);
}

TEST(PolicyDecodeTest, NamespaceDefaultsToDefault) {
  Decoded d = decodeOne("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: pa}\nspec: {}\n");
  ASSERT_TRUE(d.object.ok()) << d.object.status();
  EXPECT_EQ(d.key, "default/pa");
}

TEST(PolicyDecodeTest, EmptyListBesideAnotherFieldIsUnset) {
  // As in Istio: an empty list sets nothing; the source is judged on its other fields.
  Decoded d = decodeOne(apRule(from("principals: [], namespaces: [shop]")));
  ASSERT_TRUE(d.object.ok()) << d.object.status();
  const Source& s = std::get<AuthorizationPtr>(*d.object)->rules.at(0).from.at(0);
  EXPECT_TRUE(s.principals.empty());
  EXPECT_EQ(s.namespaces.values.size(), 1u);
}

TEST(PolicyDecodeTest, DecodesAPeerAuthentication) {
  const std::string yaml = R"(apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: finance
  namespace: foo
  creationTimestamp: "2024-05-01T12:00:00Z"
spec:
  selector:
    matchLabels:
      app: finance
  mtls:
    mode: STRICT
  portLevelMtls:
    9090:
      mode: PERMISSIVE
    "8080":
      mode: DISABLE
    7070: {}
)";
  Decoded d = decodeOne(yaml);
  ASSERT_TRUE(d.object.ok()) << d.object.status();
  EXPECT_EQ(d.kind, "PeerAuthentication");
  const auto& p = *std::get<PeerAuthenticationPtr>(*d.object);
  EXPECT_EQ(p.meta.key(), "foo/finance");
  EXPECT_EQ(p.meta.creation_timestamp, "2024-05-01T12:00:00Z");
  EXPECT_EQ(p.mode, MtlsMode::kStrict);
  EXPECT_THAT(p.port_level, ElementsAre(Pair(7070, MtlsMode::kUnset), Pair(8080, MtlsMode::kDisable),
                                        Pair(9090, MtlsMode::kPermissive)));  // sorted
}

TEST(PolicyDecodeTest, OneBadDocumentLeavesTheOthers) {
  const std::string yaml = ap("foo", "first", rules("ALLOW", "{}")) + "---\n" + ap("foo", "bad", "{action: MAYBE}") +
                           "---\n---\n" + pa("foo", "third", "{mtls: {mode: STRICT}}");
  auto docs = decodeYamlFile(yaml, kFile, kOrigin);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 3u);  // the empty document between two `---` is no object
  EXPECT_TRUE((*docs)[0].object.ok());
  EXPECT_EQ((*docs)[0].key, "foo/first");
  ASSERT_FALSE((*docs)[1].object.ok());
  EXPECT_EQ((*docs)[1].kind, "AuthorizationPolicy");
  EXPECT_EQ((*docs)[1].key, "foo/bad");
  EXPECT_THAT(std::string((*docs)[1].object.status().message()), HasSubstr("case.yaml:13: spec.action: unknown action 'MAYBE'"));
  EXPECT_TRUE((*docs)[2].object.ok()) << (*docs)[2].object.status();
  EXPECT_EQ((*docs)[2].kind, "PeerAuthentication");
}

TEST(PolicyDecodeTest, SyntaxErrorRefusesTheWholeFile) {
  const std::string yaml = ap("foo", "good", rules("ALLOW", "{}")) + "---\n" + "kind: [AuthorizationPolicy\n";
  auto docs = decodeYamlFile(yaml, kFile, kOrigin);
  ASSERT_FALSE(docs.ok());
  EXPECT_THAT(std::string(docs.status().message()), HasSubstr(kFile));
}

// As the API server sends it: many metadata fields, status, managedFields.
constexpr char kApiObject[] = R"({
  "apiVersion": "security.istio.io/v1",
  "kind": "AuthorizationPolicy",
  "metadata": {
    "name": "allow-frontend",
    "namespace": "shop",
    "uid": "0b1c9c1e-8f43-4c1e-9f55-7d1a8c2b3e4f",
    "resourceVersion": "123456",
    "generation": 3,
    "creationTimestamp": "2024-05-01T12:00:00Z",
    "labels": {"team": "shop"},
    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}"},
    "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "security.istio.io/v1",
                       "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:rules": {}}}}]
  },
  "spec": {
    "selector": {"matchLabels": {"app": "api"}},
    "rules": [{"from": [{"source": {"principals": ["cluster.local/ns/shop/sa/frontend"]}}],
               "to": [{"operation": {"ports": ["8080"]}}]}]
  },
  "status": {"observedGeneration": "3", "conditions": [{"type": "Reconciled", "status": "True"}]}
})";

TEST(PolicyDecodeTest, DecodesAnApiServerObject) {
  Decoded d = decodeJsonObject(kApiObject, "kubernetes", "kubernetes");
  ASSERT_TRUE(d.object.ok()) << d.object.status();
  EXPECT_EQ(d.kind, "AuthorizationPolicy");
  EXPECT_EQ(d.key, "shop/allow-frontend");
  const auto& p = *std::get<AuthorizationPtr>(*d.object);
  EXPECT_EQ(p.meta.origin, "kubernetes");
  EXPECT_EQ(p.meta.creation_timestamp, "2024-05-01T12:00:00Z");
  EXPECT_FALSE(p.dry_run);
  ASSERT_EQ(p.rules.size(), 1u);
  EXPECT_THAT(p.rules[0].to.at(0).ports.values, ElementsAre(8080));
}

TEST(PolicyDecodeTest, ApiServerObjectWithUnknownSpecFieldIsRefused) {
  std::string json = kApiObject;
  json.replace(json.find("\"selector\""), 10, "\"selectr\"");
  Decoded d = decodeJsonObject(json, "kubernetes", "kubernetes");
  ASSERT_FALSE(d.object.ok());
  EXPECT_EQ(d.key, "shop/allow-frontend");
  EXPECT_THAT(std::string(d.object.status().message()),
              testing::StartsWith("AuthorizationPolicy shop/allow-frontend: kubernetes:"));
  EXPECT_THAT(std::string(d.object.status().message()), HasSubstr("spec.selectr: unknown key 'selectr'"));
}

TEST(PolicyDecodeTest, ApiServerObjectThatIsNotJsonIsRefused) {
  Decoded d = decodeJsonObject("{\"kind\": ", "kubernetes", "kubernetes");
  ASSERT_FALSE(d.object.ok());
  EXPECT_EQ(d.kind, "");
  EXPECT_EQ(d.key, "");
}

TEST(PolicyDecodeTest, StringMatchForms) {
  struct Form {
    const char* text;
    StringMatch::Kind kind;
    const char* rest;
  };
  for (const Form& f : {Form{"abc", StringMatch::Kind::kExact, "abc"}, Form{"abc*", StringMatch::Kind::kPrefix, "abc"},
                        Form{"*abc", StringMatch::Kind::kSuffix, "abc"}, Form{"*", StringMatch::Kind::kPresence, ""}}) {
    auto m = parseStringMatch(f.text);
    ASSERT_TRUE(m.ok()) << f.text;
    EXPECT_EQ(m->kind, f.kind) << f.text;
    EXPECT_EQ(m->text, f.rest) << f.text;
    EXPECT_EQ(m->str(), f.text);
  }
  for (const char* bad : {"", "a*b", "**", "*a*", "a**"}) EXPECT_FALSE(parseStringMatch(bad).ok()) << bad;
}

TEST(PolicyDecodeTest, IpBlockForms) {
  auto v4 = parseIpBlock("192.168.7.9/20");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->str(), "192.168.0.0/20");
  auto host = parseIpBlock("10.0.0.1");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->prefix_len, 32);
  auto v6 = parseIpBlock("fd00:1:2:3::9/48");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->str(), "fd00:1:2::/48");
  auto all = parseIpBlock("::/0");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->prefix_len, 0);
  for (const char* bad : {"", "/8", "10.0.0.0/-1", "10.0.0.0/8/8", "10.0.0.0/ 8", "fd00::/129", "10.0.0.0/33", "x"}) {
    EXPECT_FALSE(parseIpBlock(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace ferry::policy
