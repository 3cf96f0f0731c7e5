// KubernetesPolicies (proxy/policy/kubernetes.h): AuthorizationPolicy and PeerAuthentication
// objects exactly as a real API server sent them -- the LIST and WATCH bodies recorded from
// the k8s lab by tests/k8s/record_wire.py (tests/k8s/replay/README.md, the policies cases) --
// delivered to the handlers the way the informer does, and followed into the Store. The last
// test runs the whole path: a client on the recorded bytes, both informers attached.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proxy/policy/kubernetes.h"
#include "tests/k8s/replay/replay_server.h"

namespace ferry::policy {
namespace {
namespace json = boost::json;
using k8s::CustomObject;
using k8s::EventType;
using k8s::replay::Recorded;
using namespace std::chrono_literals;

#define LOAD_FIXTURE(var, name)                                                                          \
  auto var = k8s::replay::loadCase(name);                                                                \
  if (var.size() < 2) {                                                                                  \
    FAIL() << "fixture " << name << " missing under " << k8s::replay::fixtureDir()                       \
           << " (tests/k8s/replay/README.md says how to record it)";                                     \
  }

// What the informer hands over for one object (k8s::internal::decodeCustomObject's work).
CustomObject objectOf(const json::value& v) {
  const auto& md = v.at("metadata");
  return CustomObject{std::string(md.at("namespace").as_string()), std::string(md.at("name").as_string()),
                      json::serialize(v)};
}

std::vector<CustomObject> listed(const Recorded& list) {
  std::vector<CustomObject> out;
  json::value body = json::parse(list.body);
  for (const auto& item : body.at("items").as_array()) out.push_back(objectOf(item));
  return out;
}

struct Event {
  EventType type;
  CustomObject object;
};
// The change events of a recorded watch, in order (bookmarks never reach a handler).
std::vector<Event> eventsOf(const Recorded& watch) {
  std::vector<Event> out;
  for (const std::string& line : watch.lines()) {
    json::value ev = json::parse(line);
    std::string type(ev.at("type").as_string());
    if (type == "BOOKMARK") continue;
    EventType t = type == "ADDED" ? EventType::kAdded : type == "MODIFIED" ? EventType::kModified : EventType::kDeleted;
    out.push_back({t, objectOf(ev.at("object"))});
  }
  return out;
}

// The store's objects by "<Kind> <namespace>/<name>".
std::map<std::string, Object> held(const Store& store) {
  std::map<std::string, Object> out;
  store.current()->forEach([&](const Object& o) {
    if (const auto* a = std::get_if<AuthorizationPtr>(&o)) out[absl::StrCat("AuthorizationPolicy ", (*a)->meta.key())] = o;
    if (const auto* p = std::get_if<PeerAuthenticationPtr>(&o)) out[absl::StrCat("PeerAuthentication ", (*p)->meta.key())] = o;
  });
  return out;
}
std::vector<std::string> keys(const std::map<std::string, Object>& objects) {
  std::vector<std::string> out;
  for (const auto& [k, _] : objects) out.push_back(k);
  return out;
}

AuthorizationPtr authorization(const Store& store, const std::string& key) {
  auto objects = held(store);
  auto it = objects.find("AuthorizationPolicy " + key);
  return it == objects.end() ? nullptr : std::get<AuthorizationPtr>(it->second);
}
PeerAuthenticationPtr peer(const Store& store, const std::string& key) {
  auto objects = held(store);
  auto it = objects.find("PeerAuthentication " + key);
  return it == objects.end() ? nullptr : std::get<PeerAuthenticationPtr>(it->second);
}

const Refusal* refusalOf(const std::vector<Refusal>& refusals, const std::string& key) {
  for (const auto& r : refusals) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

bool refused(const Store& store, const std::string& key) {
  auto refusals = store.refusals();
  return refusalOf(refusals, key) != nullptr;
}

// The first port of the first rule's first `to` (fy-allow-client's).
uint16_t firstPort(const AuthorizationPolicy& p) { return p.rules.at(0).to.at(0).ports.values.at(0); }

class PolicyKubernetesTest : public ::testing::Test {
 protected:
  Store store_{"istio-system"};
  KubernetesPolicies policies_{store_};
};

TEST_F(PolicyKubernetesTest, ListedPoliciesApplyAndAMalformedOneIsRefusedNamingItsField) {
  LOAD_FIXTURE(c, "authorizationpolicies-list-watch");
  policies_.authorizationPolicies().replace(listed(c[0]));
  EXPECT_EQ(keys(held(store_)), (std::vector<std::string>{"AuthorizationPolicy fy-replay/fy-allow-client",
                                                           "AuthorizationPolicy fy-replay/fy-beta-written",
                                                           "AuthorizationPolicy fy-replay/fy-deny-range"}));
  auto allow = authorization(store_, "fy-replay/fy-allow-client");
  ASSERT_NE(allow, nullptr);
  EXPECT_EQ(allow->action, Action::kAllow);
  EXPECT_EQ(allow->meta.origin, "kubernetes");
  EXPECT_FALSE(allow->meta.creation_timestamp.empty());
  ASSERT_TRUE(allow->selector.has_value());
  EXPECT_EQ(*allow->selector, (Labels{{"app", "fy-echo"}}));
  EXPECT_EQ(allow->rules.at(0).from.at(0).principals.values.at(0).str(), "cluster.local/ns/fy-replay/sa/fy-client");
  EXPECT_EQ(firstPort(*allow), 8080);
  EXPECT_EQ(authorization(store_, "fy-replay/fy-deny-range")->action, Action::kDeny);
  EXPECT_EQ(authorization(store_, "fy-replay/fy-beta-written")->action, Action::kAudit);

  // The /33 the API server accepted (its schema keeps any spec): refused alone, by field.
  auto refusals = store_.refusals();
  ASSERT_EQ(refusals.size(), 1u);
  const Refusal* bad = refusalOf(refusals, "fy-replay/fy-bad-cidr");
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->origin, "kubernetes");
  EXPECT_EQ(bad->kind, "AuthorizationPolicy");
  EXPECT_NE(bad->reason.find("AuthorizationPolicy fy-replay/fy-bad-cidr"), std::string::npos) << bad->reason;
  EXPECT_NE(bad->reason.find("ipBlocks"), std::string::npos) << bad->reason;
  EXPECT_NE(bad->reason.find("'10.0.0.0/33' is not an IP address or CIDR block"), std::string::npos) << bad->reason;
  EXPECT_FALSE(bad->kept_previous);
}

TEST_F(PolicyKubernetesTest, WatchEventsAddChangeAndRemoveAndABrokenChangeKeepsThePreviousVersion) {
  LOAD_FIXTURE(c, "authorizationpolicies-list-watch");
  auto& handler = policies_.authorizationPolicies();
  handler.replace(listed(c[0]));
  auto events = eventsOf(c[1]);
  // Recorded in this order (record_wire.py): fy-added created, fy-allow-client's port
  // changed, fy-deny-range given action BLOCK, fy-bad-cidr deleted, fy-added deleted.
  ASSERT_EQ(events.size(), 5u);

  handler.apply(events[0].type, events[0].object);
  EXPECT_EQ(events[0].type, EventType::kAdded);
  ASSERT_NE(authorization(store_, "fy-replay/fy-added"), nullptr);

  handler.apply(events[1].type, events[1].object);
  EXPECT_EQ(firstPort(*authorization(store_, "fy-replay/fy-allow-client")), 9090);

  uint64_t refused_before = store_.refusedTotal();
  handler.apply(events[2].type, events[2].object);
  EXPECT_EQ(store_.refusedTotal(), refused_before + 1);
  auto refusals = store_.refusals();
  const Refusal* blocked = refusalOf(refusals, "fy-replay/fy-deny-range");
  ASSERT_NE(blocked, nullptr);
  EXPECT_NE(blocked->reason.find("BLOCK"), std::string::npos) << blocked->reason;
  EXPECT_TRUE(blocked->kept_previous);
  ASSERT_NE(authorization(store_, "fy-replay/fy-deny-range"), nullptr);
  EXPECT_EQ(authorization(store_, "fy-replay/fy-deny-range")->action, Action::kDeny) << "the previous version applies";

  // Deleting the refused object clears its refusal; deleting an applied one removes it.
  handler.apply(events[3].type, events[3].object);
  EXPECT_FALSE(refused(store_, "fy-replay/fy-bad-cidr"));
  handler.apply(events[4].type, events[4].object);
  EXPECT_EQ(authorization(store_, "fy-replay/fy-added"), nullptr);
  EXPECT_EQ(keys(held(store_)), (std::vector<std::string>{"AuthorizationPolicy fy-replay/fy-allow-client",
                                                           "AuthorizationPolicy fy-replay/fy-beta-written",
                                                           "AuthorizationPolicy fy-replay/fy-deny-range"}));
}

TEST_F(PolicyKubernetesTest, PeerAuthenticationsFollowTheirListAndWatch) {
  LOAD_FIXTURE(c, "peerauthentications-list-watch");
  auto& handler = policies_.peerAuthentications();
  handler.replace(listed(c[0]));
  auto port_level = peer(store_, "fy-replay/fy-port-level");
  ASSERT_NE(port_level, nullptr);
  EXPECT_EQ(port_level->mode, MtlsMode::kStrict);
  EXPECT_EQ(port_level->port_level, (std::vector<std::pair<uint16_t, MtlsMode>>{{8080, MtlsMode::kPermissive}}));
  EXPECT_EQ(peer(store_, "fy-replay/fy-strict")->mode, MtlsMode::kStrict);

  for (const auto& e : eventsOf(c[1])) handler.apply(e.type, e.object);
  EXPECT_EQ(peer(store_, "fy-replay/fy-strict")->mode, MtlsMode::kPermissive);
  EXPECT_EQ(peer(store_, "fy-replay/fy-port-level"), nullptr);
  EXPECT_EQ(peer(store_, "fy-replay/fy-bad-mode"), nullptr);
  auto refusals = store_.refusals();
  const Refusal* bad = refusalOf(refusals, "fy-replay/fy-bad-mode");
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->kind, "PeerAuthentication");
  EXPECT_NE(bad->reason.find("SORTA"), std::string::npos) << bad->reason;
  EXPECT_EQ(store_.current()->peerAuthenticationCount(), 1u);
}

// The server refuses to judge until the cluster's policies are known: both kinds' first
// lists (an absent CRD's empty one counts), said once.
TEST_F(PolicyKubernetesTest, SyncedOnceBothKindsDeliveredAFirstList) {
  LOAD_FIXTURE(pa, "peerauthentications-list-watch");
  int called = 0;
  policies_.onSynced([&] { ++called; });
  EXPECT_FALSE(policies_.synced());
  policies_.authorizationPolicies().replace({});  // no CRD: the informer's empty state
  EXPECT_FALSE(policies_.synced());
  EXPECT_EQ(called, 0);
  policies_.peerAuthentications().replace(listed(pa[0]));
  EXPECT_TRUE(policies_.synced());
  EXPECT_EQ(called, 1);
  policies_.peerAuthentications().replace(listed(pa[0]));  // a re-list
  policies_.authorizationPolicies().replace({});
  EXPECT_EQ(called, 1);
}

// Written for an Istio before 1.22 (security.istio.io/v1beta1, served by its v1beta1-only CRD).
TEST_F(PolicyKubernetesTest, APolicyOfAnOldIstiosV1beta1IsAppliedTheSame) {
  LOAD_FIXTURE(c, "authorizationpolicies-v1beta1-only");
  auto objects = listed(c[1]);
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_NE(objects[0].json.find("\"apiVersion\":\"security.istio.io/v1beta1\""), std::string::npos);
  policies_.authorizationPolicies().replace(objects);
  auto legacy = authorization(store_, "fy-replay/fy-legacy");
  ASSERT_NE(legacy, nullptr);
  EXPECT_EQ(legacy->rules.at(0).from.at(0).namespaces.values.at(0).str(), "fy-replay");
  EXPECT_TRUE(store_.refusals().empty());
}

// A CRD deleted (the informer's empty list): that kind's cluster objects go; the other kind
// and the objects of a policy file stay.
TEST_F(PolicyKubernetesTest, AnEmptyListClearsOnlyThatKindOfTheCluster) {
  LOAD_FIXTURE(ap, "authorizationpolicies-list-watch");
  LOAD_FIXTURE(pa, "peerauthentications-list-watch");
  auto file = decodeYamlFile(R"(apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: from-file, namespace: fy-files}
spec: {action: DENY, rules: [{from: [{source: {namespaces: [fy-evil]}}]}]}
)",
                             "policies.yaml", "file policies.yaml");
  ASSERT_TRUE(file.ok()) << file.status();
  store_.replace("file policies.yaml", *std::move(file));
  policies_.authorizationPolicies().replace(listed(ap[0]));
  policies_.peerAuthentications().replace(listed(pa[0]));
  EXPECT_EQ(store_.current()->authorizationCount(), 4u);
  EXPECT_EQ(store_.current()->peerAuthenticationCount(), 2u);

  policies_.authorizationPolicies().replace({});
  EXPECT_EQ(keys(held(store_)), (std::vector<std::string>{"AuthorizationPolicy fy-files/from-file",
                                                           "PeerAuthentication fy-replay/fy-port-level",
                                                           "PeerAuthentication fy-replay/fy-strict"}));
  EXPECT_FALSE(refused(store_, "fy-replay/fy-bad-cidr")) << "its refusal went with it";
}

// The whole path: an ApiClient on the recorded bytes (a stand-in server on 127.0.0.1), both
// informers attached by attach(), LIST then WATCH of each kind into the Store.
TEST_F(PolicyKubernetesTest, AttachedToAClientBothKindsFlowFromTheApiServerIntoTheStore) {
  LOAD_FIXTURE(ap, "authorizationpolicies-list-watch");
  LOAD_FIXTURE(pa, "peerauthentications-list-watch");
  boost::asio::io_context io;
  k8s::replay::ReplayServer server(io);
  const std::string kAp = "/apis/security.istio.io/v1/authorizationpolicies";
  const std::string kPa = "/apis/security.istio.io/v1/peerauthentications";
  server.respond(k8s::replay::ReplayServer::byPath({{kAp, ap}, {kPa, pa}}));  // LIST, WATCH, then quiet
  auto asked = [&](const std::string& path) {
    const auto& all = server.requests();
    return std::count_if(all.begin(), all.end(), [&](const auto& r) { return r.path() == path; });
  };
  k8s::ClusterAccess access;
  access.server = server.url();
  access.ca_pem = server.caPem();
  auto client = k8s::ApiClient::create(io, access, k8s::Options{});
  ASSERT_TRUE(client.ok()) << client.status();
  policies_.attach(**client);
  (*client)->start();
  auto deadline = std::chrono::steady_clock::now() + 20s;
  // Both watches ended by their timeoutSeconds and watched again.
  while ((asked(kAp) < 3 || asked(kPa) < 3) && std::chrono::steady_clock::now() < deadline) io.run_for(5ms);
  EXPECT_EQ(static_cast<size_t>(asked(kAp) + asked(kPa)), server.requests().size()) << "v1 of both kinds, nothing else";
  EXPECT_EQ(keys(held(store_)), (std::vector<std::string>{"AuthorizationPolicy fy-replay/fy-allow-client",
                                                           "AuthorizationPolicy fy-replay/fy-beta-written",
                                                           "AuthorizationPolicy fy-replay/fy-deny-range",
                                                           "PeerAuthentication fy-replay/fy-strict"}));
  EXPECT_EQ(firstPort(*authorization(store_, "fy-replay/fy-allow-client")), 9090);
  EXPECT_EQ(peer(store_, "fy-replay/fy-strict")->mode, MtlsMode::kPermissive);
  auto refusals = store_.refusals();
  ASSERT_EQ(refusals.size(), 2u);
  EXPECT_NE(refusalOf(refusals, "fy-replay/fy-deny-range"), nullptr);
  EXPECT_NE(refusalOf(refusals, "fy-replay/fy-bad-mode"), nullptr);
  EXPECT_LT((*client)->stateAge(), k8s::Millis::max()) << "both synced";
  EXPECT_TRUE((*client)->unsynced().empty());
  server.respond(nullptr);
  (*client)->stop();
  io.run_for(20ms);
}

}  // namespace
}  // namespace ferry::policy
