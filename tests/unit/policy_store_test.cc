// policy::Store (what applies, what is refused and why, one snapshot per change, only the
// changed namespaces re-indexed) and policy::PolicyFiles (a watched file feeding it).
#include "proxy/policy/store.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/policy/files.h"
#include "proxy/workloads/workload.h"
#include "tests/support/watched_dir.h"
#include "tests/unit/policy_docs.h"

namespace ferry::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace testing_docs;  // NOLINT: the YAML builders read as a small language

constexpr char kRoot[] = "istio-system";
constexpr char kFileA[] = "file a.yaml";
constexpr char kFileB[] = "file b.yaml";
constexpr char kApi[] = "kubernetes";

std::string allowAll(const std::string& ns, const std::string& name) { return ap(ns, name, rules("ALLOW", "{}")); }
std::string denyAll(const std::string& ns, const std::string& name) { return ap(ns, name, rules("DENY", "{}")); }
std::string broken(const std::string& ns, const std::string& name) { return ap(ns, name, "{action: MAYBE}"); }

// Every object of a snapshot as "<kind> <ns>/<name> <origin>".
std::vector<std::string> contents(const PolicySet& set) {
  std::vector<std::string> out;
  set.forEach([&](const Object& o) {
    if (const auto* a = std::get_if<AuthorizationPtr>(&o)) {
      out.push_back("AuthorizationPolicy " + (*a)->meta.key() + " " + (*a)->meta.origin + " " +
                    actionName((*a)->action));
    } else {
      const auto& p = std::get<PeerAuthenticationPtr>(o);
      out.push_back("PeerAuthentication " + p->meta.key() + " " + p->meta.origin);
    }
  });
  return out;
}

workloads::Workload workloadIn(const std::string& ns) {
  workloads::Workload w;
  w.name = "w";
  w.namespace_name = workloads::intern(ns);
  return w;
}

Decision judge(const Store& store, const std::string& ns) {
  auto ip = *common::parseIp("10.0.0.1");
  return store.current()->authorize(workloadIn(ns), Request{ip, "", ip, 80});
}

TEST(PolicyStoreTest, AppliesAFileAndCountsItsObjects) {
  Store store(kRoot);
  auto result = store.replace(kFileA, decode(allowAll("foo", "p") + "---\n" + pa("foo", "pa", "{mtls: {mode: STRICT}}"),
                                             kFileA));
  EXPECT_EQ(result.changed, 2u);
  EXPECT_TRUE(result.refused.empty());
  auto set = store.current();
  EXPECT_EQ(set->authorizationCount(), 1u);
  EXPECT_EQ(set->peerAuthenticationCount(), 1u);
  EXPECT_EQ(set->generation(), 1u);
  EXPECT_THAT(contents(*set), ElementsAre("AuthorizationPolicy foo/p file a.yaml ALLOW",
                                          "PeerAuthentication foo/pa file a.yaml"));
}

TEST(PolicyStoreTest, DuplicateNameInOneFileFirstApplies) {
  Store store(kRoot);
  auto result = store.replace(kFileA, decode(allowAll("foo", "p") + "---\n" + denyAll("foo", "p"), kFileA));
  ASSERT_EQ(result.refused.size(), 1u);
  EXPECT_EQ(result.refused[0],
            "AuthorizationPolicy foo/p: defined more than once in file a.yaml (the first one applies)");
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/p file a.yaml ALLOW"));
  auto refusals = store.refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0].origin, kFileA);
  EXPECT_EQ(refusals[0].kind, "AuthorizationPolicy");
  EXPECT_EQ(refusals[0].key, "foo/p");
  EXPECT_FALSE(refusals[0].kept_previous);
  EXPECT_EQ(store.refusedTotal(), 1u);
}

TEST(PolicyStoreTest, SameNameOfTwoKindsIsNoDuplicate) {
  Store store(kRoot);
  auto result = store.replace(kFileA, decode(allowAll("foo", "p") + "---\n" + pa("foo", "p", "{}"), kFileA));
  EXPECT_TRUE(result.refused.empty());
  EXPECT_EQ(result.changed, 2u);
}

TEST(PolicyStoreTest, SameNameFromTwoOriginsIsRefused) {
  Store store(kRoot);
  store.replace(kFileA, decode(allowAll("foo", "p"), kFileA));
  auto result = store.replace(kFileB, decode(denyAll("foo", "p") + "---\n" + allowAll("foo", "q"), kFileB));
  ASSERT_EQ(result.refused.size(), 1u);
  EXPECT_EQ(result.refused[0], "AuthorizationPolicy foo/p: already defined by file a.yaml");
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/p file a.yaml ALLOW",
                                                      "AuthorizationPolicy foo/q file b.yaml ALLOW"));
  // The API server cannot take it over either.
  auto api = store.upsert(kApi, decodeOne(denyAll("foo", "p"), kApi));
  ASSERT_EQ(api.refused.size(), 1u);
  EXPECT_THAT(api.refused[0], HasSubstr("already defined by file a.yaml"));
  EXPECT_EQ(store.refusals().size(), 2u);
}

TEST(PolicyStoreTest, RefusedNewVersionKeepsThePreviousOne) {
  Store store(kRoot);
  store.replace(kFileA, decode(allowAll("foo", "p") + "---\n" + allowAll("foo", "q"), kFileA));
  auto result = store.replace(kFileA, decode(broken("foo", "p") + "---\n" + allowAll("foo", "q"), kFileA));
  ASSERT_EQ(result.refused.size(), 1u);
  EXPECT_THAT(result.refused[0], HasSubstr("AuthorizationPolicy foo/p: case.yaml:"));
  EXPECT_THAT(result.refused[0], HasSubstr("spec.action: unknown action 'MAYBE'"));
  auto refusals = store.refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_TRUE(refusals[0].kept_previous);
  // foo/p is not removed for missing from the new version: its previous version applies.
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/p file a.yaml ALLOW",
                                                      "AuthorizationPolicy foo/q file a.yaml ALLOW"));
  EXPECT_TRUE(judge(store, "foo").allowed);
}

TEST(PolicyStoreTest, RefusedNewVersionFromTheApiKeepsThePreviousOne) {
  Store store(kRoot);
  store.upsert(kApi, decodeOne(denyAll("foo", "d"), kApi));
  auto result = store.upsert(kApi, decodeOne(broken("foo", "d"), kApi));
  EXPECT_EQ(result.changed, 0u);
  ASSERT_EQ(store.refusals().size(), 1u);
  EXPECT_TRUE(store.refusals()[0].kept_previous);
  EXPECT_FALSE(judge(store, "foo").allowed);
}

TEST(PolicyStoreTest, RefusedFirstVersionKeepsNothing) {
  Store store(kRoot);
  store.replace(kFileA, decode(broken("foo", "p"), kFileA));
  ASSERT_EQ(store.refusals().size(), 1u);
  EXPECT_FALSE(store.refusals()[0].kept_previous);
  EXPECT_EQ(store.current()->authorizationCount(), 0u);
}

TEST(PolicyStoreTest, ReplaceRemovesWhatTheOriginNoLongerLists) {
  Store store(kRoot);
  store.replace(kFileA, decode(allowAll("foo", "p") + "---\n" + allowAll("bar", "q") + "---\n" + pa("foo", "pa", "{}"),
                               kFileA));
  store.upsert(kApi, decodeOne(allowAll("foo", "from-api"), kApi));
  auto result = store.replace(kFileA, decode(allowAll("foo", "p"), kFileA));
  EXPECT_EQ(result.changed, 2u);  // bar/q and foo/pa gone; foo/p unchanged
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/from-api kubernetes ALLOW",
                                                      "AuthorizationPolicy foo/p file a.yaml ALLOW"));
  EXPECT_EQ(store.current()->namespaceBucket("bar"), nullptr);
}

TEST(PolicyStoreTest, ReplaceOfOneKindLeavesTheOther) {
  // One API list (AuthorizationPolicies) must not remove the PeerAuthentications of its origin.
  Store store(kRoot);
  store.upsert(kApi, decodeOne(allowAll("foo", "p"), kApi));
  store.upsert(kApi, decodeOne(pa("foo", "pa", "{}"), kApi));
  store.replace(kApi, decode(allowAll("foo", "other"), kApi), Kind::kAuthorizationPolicy);
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/other kubernetes ALLOW",
                                                      "PeerAuthentication foo/pa kubernetes"));
}

TEST(PolicyStoreTest, UpsertAddsAndChangesRemoveRemoves) {
  Store store(kRoot);
  EXPECT_EQ(store.upsert(kApi, decodeOne(allowAll("foo", "p"), kApi)).changed, 1u);
  EXPECT_TRUE(judge(store, "foo").allowed);
  EXPECT_EQ(store.upsert(kApi, decodeOne(denyAll("foo", "p"), kApi)).changed, 1u);
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/p kubernetes DENY"));
  EXPECT_FALSE(judge(store, "foo").allowed);
  // Another origin cannot remove it; an unknown key is no change.
  EXPECT_EQ(store.remove(kFileA, Kind::kAuthorizationPolicy, "foo/p").changed, 0u);
  EXPECT_EQ(store.remove(kApi, Kind::kPeerAuthentication, "foo/p").changed, 0u);
  EXPECT_EQ(store.remove(kApi, Kind::kAuthorizationPolicy, "foo/nothing").changed, 0u);
  EXPECT_EQ(store.current()->generation(), 2u);
  EXPECT_EQ(store.remove(kApi, Kind::kAuthorizationPolicy, "foo/p").changed, 1u);
  EXPECT_EQ(store.current()->authorizationCount(), 0u);
  EXPECT_EQ(store.current()->namespaceBucket("foo"), nullptr);
  EXPECT_TRUE(judge(store, "foo").allowed);
  EXPECT_EQ(store.changesTotal(), 3u);
}

TEST(PolicyStoreTest, RefusalsAreClearedWhenFixed) {
  Store store(kRoot);
  // A file: its refusals are made anew by each version.
  store.replace(kFileA, decode(broken("foo", "p") + "---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
                               kFileA));
  EXPECT_EQ(store.refusals().size(), 2u);  // foo/p, and the ConfigMap that is no policy
  store.replace(kFileA, decode(allowAll("foo", "p"), kFileA));
  EXPECT_TRUE(store.refusals().empty());
  // The API: a fixed version clears the refusal of the broken one, as does a delete.
  store.upsert(kApi, decodeOne(broken("bar", "q"), kApi));
  store.upsert(kApi, decodeOne(broken("bar", "r"), kApi));
  EXPECT_EQ(store.refusals().size(), 2u);
  store.upsert(kApi, decodeOne(allowAll("bar", "q"), kApi));
  store.remove(kApi, Kind::kAuthorizationPolicy, "bar/r");
  EXPECT_TRUE(store.refusals().empty());
  EXPECT_EQ(store.refusedTotal(), 4u);
}

TEST(PolicyStoreTest, RootNamespacePeerAuthenticationWithSelectorIsRefused) {
  Store store(kRoot);
  auto result =
      store.replace(kFileA, decode(pa(kRoot, "sel", "{selector: {matchLabels: {app: a}}, mtls: {mode: STRICT}}"), kFileA));
  ASSERT_EQ(result.refused.size(), 1u);
  EXPECT_THAT(result.refused[0], HasSubstr("PeerAuthentication istio-system/sel: spec.selector:"));
  EXPECT_THAT(result.refused[0], HasSubstr("root namespace (istio-system)"));
  EXPECT_EQ(store.current()->peerAuthenticationCount(), 0u);
}

TEST(PolicyStoreTest, NewRootNamespaceIsPublishedAndRefusesItsSelectorPeerAuthentications) {
  Store store(kRoot);
  std::vector<std::string> roots;
  store.subscribe([&](const PolicySet& after) { roots.push_back(after.rootNamespace()); });
  store.replace(kFileA, decode(pa("mesh", "sel", "{selector: {matchLabels: {app: a}}, mtls: {mode: STRICT}}") +
                                   "---\n" + allowAll("foo", "a"),
                               kFileA));
  ASSERT_EQ(store.current()->peerAuthenticationCount(), 1u);
  store.setRootNamespace("mesh");
  // Published at once under the new name; the selector PeerAuthentication of the new root
  // namespace is refused as it would be on arrival, the rest stays.
  EXPECT_THAT(roots, ElementsAre(kRoot, "mesh"));
  EXPECT_EQ(store.current()->rootNamespace(), "mesh");
  EXPECT_EQ(store.current()->peerAuthenticationCount(), 0u);
  EXPECT_EQ(store.current()->authorizationCount(), 1u);
  ASSERT_EQ(store.refusals().size(), 1u);
  EXPECT_THAT(store.refusals()[0].reason, HasSubstr("PeerAuthentication mesh/sel: spec.selector:"));
  EXPECT_THAT(store.refusals()[0].reason, HasSubstr("root namespace (mesh)"));
}

TEST(PolicyStoreTest, ListenerIsCalledOncePerPublishWithTheNewSnapshot) {
  Store store(kRoot);
  std::vector<const PolicySet*> seen;
  std::vector<uint64_t> generations;
  store.subscribe([&](const PolicySet& after) {
    seen.push_back(&after);
    generations.push_back(after.generation());
    EXPECT_EQ(store.current().get(), &after);  // already current when listeners hear of it
  });
  store.replace(kFileA, decode(allowAll("foo", "a") + "---\n" + allowAll("bar", "b") + "---\n" + allowAll(kRoot, "c"),
                               kFileA));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]->authorizationCount(), 3u);
  store.upsert(kApi, decodeOne(allowAll("foo", "d"), kApi));
  store.remove(kApi, Kind::kAuthorizationPolicy, "foo/d");
  EXPECT_THAT(generations, ElementsAre(1, 2, 3));
  // Nothing changed: nothing published.
  store.replace(kFileB, {});
  store.upsert(kApi, decodeOne(broken("foo", "x"), kApi));
  store.remove(kApi, Kind::kAuthorizationPolicy, "foo/absent");
  EXPECT_EQ(generations.size(), 3u);
  EXPECT_EQ(store.changesTotal(), 3u);
}

TEST(PolicyStoreTest, OnlyChangedNamespacesAreReindexed) {
  Store store(kRoot);
  store.replace(kFileA, decode(allowAll("foo", "a") + "---\n" + allowAll("bar", "b") + "---\n" + allowAll(kRoot, "c") +
                                   "---\n" + pa("baz", "pa", "{mtls: {mode: STRICT}}"),
                               kFileA));
  auto before = store.current();
  const auto* foo = before->namespaceBucket("foo");
  const auto* bar = before->namespaceBucket("bar");
  const auto* root = before->namespaceBucket(kRoot);
  const auto* baz = before->namespaceBucket("baz");
  ASSERT_TRUE(foo && bar && root && baz);

  store.upsert(kApi, decodeOne(denyAll("foo", "d"), kApi));
  auto after = store.current();
  EXPECT_NE(after.get(), before.get());
  EXPECT_NE(after->namespaceBucket("foo"), foo);
  EXPECT_EQ(after->namespaceBucket("bar"), bar);
  EXPECT_EQ(after->namespaceBucket(kRoot), root);
  EXPECT_EQ(after->namespaceBucket("baz"), baz);
  EXPECT_EQ(after->authorizationCount(), 4u);
  EXPECT_EQ(after->peerAuthenticationCount(), 1u);
  // The old snapshot is untouched: a worker holding it judges as before.
  EXPECT_EQ(before->authorizationCount(), 3u);
  EXPECT_EQ(before->namespaceBucket("foo")->whole.size(), 1u);

  // A new version of a file that changes only bar: the namespaces it lists unchanged keep
  // their index too (an API relist or resync that changes nothing publishes nothing).
  auto bar_before = after->namespaceBucket("bar");
  auto foo_before = after->namespaceBucket("foo");
  auto result = store.replace(kFileA, decode(allowAll("foo", "a") + "---\n" + denyAll("bar", "b") + "---\n" +
                                                 allowAll(kRoot, "c") + "---\n" + pa("baz", "pa", "{mtls: {mode: STRICT}}"),
                                             kFileA));
  EXPECT_EQ(result.changed, 1u);
  auto last = store.current();
  EXPECT_NE(last->namespaceBucket("bar"), bar_before);
  EXPECT_EQ(last->namespaceBucket("foo"), foo_before);
  EXPECT_EQ(last->namespaceBucket(kRoot), root);
  EXPECT_EQ(last->namespaceBucket("baz"), baz);
  uint64_t generation = last->generation();
  EXPECT_EQ(store.upsert(kApi, decodeOne(denyAll("foo", "d"), kApi)).changed, 0u);
  EXPECT_EQ(store.current()->generation(), generation);
}

TEST(PolicyStoreTest, NamespaceNamesThatArePrefixesStayApart) {
  // "foo" and "foo-bar": the index of one must never take the other's objects.
  Store store(kRoot);
  store.replace(kFileA, decode(allowAll("foo", "a") + "---\n" + denyAll("foo-bar", "b"), kFileA));
  auto set = store.current();
  ASSERT_NE(set->namespaceBucket("foo"), nullptr);
  EXPECT_EQ(set->namespaceBucket("foo")->authorization_count, 1u);
  EXPECT_EQ(set->namespaceBucket("foo-bar")->authorization_count, 1u);
  EXPECT_TRUE(judge(store, "foo").allowed);
  EXPECT_FALSE(judge(store, "foo-bar").allowed);
}

// --- PolicyFiles --------------------------------------------------------------------------

class PolicyFilesTest : public ferry::test_support::WatchedDirTest {
 protected:
  std::string origin() const { return "file " + path_; }
};

TEST_F(PolicyFilesTest, FollowsTheFileAndKeepsTheLastGoodVersion) {
  Store store(kRoot);
  PolicyFiles files({path_});

  write(allowAll("foo", "p"));
  EXPECT_TRUE(files.poll(store));
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/p " + origin() + " ALLOW"));
  EXPECT_FALSE(files.poll(store));  // unchanged

  write(denyAll("foo", "p") + "---\n" + allowAll("bar", "q"));
  EXPECT_TRUE(files.poll(store));
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy bar/q " + origin() + " ALLOW",
                                                      "AuthorizationPolicy foo/p " + origin() + " DENY"));

  // A version that is not YAML is refused whole: the previous one keeps applying.
  uint64_t generation = store.current()->generation();
  write("apiVersion: [security.istio.io/v1\n");
  EXPECT_FALSE(files.poll(store));
  EXPECT_EQ(files.failures(), 1u);
  EXPECT_EQ(store.current()->generation(), generation);
  EXPECT_EQ(store.current()->authorizationCount(), 2u);

  // One broken object: it alone is refused (its previous version stays), the rest applies.
  write(broken("foo", "p") + "---\n" + allowAll("bar", "q") + "---\n" + allowAll("baz", "r"));
  EXPECT_TRUE(files.poll(store));
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy bar/q " + origin() + " ALLOW",
                                                      "AuthorizationPolicy baz/r " + origin() + " ALLOW",
                                                      "AuthorizationPolicy foo/p " + origin() + " DENY"));
  ASSERT_EQ(store.refusals().size(), 1u);
  EXPECT_TRUE(store.refusals()[0].kept_previous);
  EXPECT_EQ(store.refusals()[0].origin, origin());

  // Fixed.
  write(allowAll("foo", "p"));
  EXPECT_TRUE(files.poll(store));
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/p " + origin() + " ALLOW"));
  EXPECT_TRUE(store.refusals().empty());
  EXPECT_EQ(files.failures(), 1u);
}

TEST_F(PolicyFilesTest, MissingFileKeepsWhatItApplied) {
  Store store(kRoot);
  PolicyFiles files({path_});
  write(denyAll("foo", "d"));
  ASSERT_TRUE(files.poll(store));
  std::filesystem::remove(path_);
  EXPECT_FALSE(files.poll(store));
  EXPECT_EQ(files.failures(), 1u);
  EXPECT_EQ(store.current()->authorizationCount(), 1u);
  write(allowAll("foo", "d"));
  EXPECT_TRUE(files.poll(store));
  EXPECT_TRUE(judge(store, "foo").allowed);
}

TEST_F(PolicyFilesTest, LoadReadsEverythingBeforeApplyTouchesTheStore) {
  Store store(kRoot);
  write(denyAll("foo", "d"));
  PolicyFiles files;
  ASSERT_TRUE(files.load({path_}).ok());
  EXPECT_EQ(store.current()->authorizationCount(), 0u);  // nothing applied yet
  files.apply(store);
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy foo/d " + origin() + " DENY"));
  EXPECT_EQ(PolicyFiles::origin(path_), origin());

  // A list with a file that does not parse: load() says which, the store is not touched.
  write("apiVersion: [security.istio.io/v1\n");
  PolicyFiles broken_list;
  auto st = broken_list.load({path_});
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr(path_));
  EXPECT_EQ(store.current()->authorizationCount(), 1u);

  // A new list without the file: once applied, what the file applied is withdrawn.
  std::string other = (dir_ / "other.yaml").string();
  { std::ofstream(other) << allowAll("bar", "a"); }
  ASSERT_TRUE(files.load({other}).ok());
  EXPECT_EQ(store.current()->authorizationCount(), 1u);  // nothing applied yet
  files.apply(store);
  EXPECT_THAT(contents(*store.current()), ElementsAre("AuthorizationPolicy bar/a file " + other + " ALLOW"));
}

TEST_F(PolicyFilesTest, EmptyFileRemovesEverything) {
  Store store(kRoot);
  PolicyFiles files({path_});
  write(denyAll("foo", "d"));
  ASSERT_TRUE(files.poll(store));
  write("");
  EXPECT_TRUE(files.poll(store));
  EXPECT_EQ(store.current()->authorizationCount(), 0u);
  EXPECT_EQ(files.failures(), 0u);
}

}  // namespace
}  // namespace ferry::policy
