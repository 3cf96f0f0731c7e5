// Store::replace as a source's whole state (proxy/policy/store.h): what a batch lists
// applies, what it no longer lists goes, a name defined twice in one batch keeps the first,
// and a refused object keeps its previous version. The batch is checked against its own keys
// with a set (a list made a 10,000-object replace O(n^2), docs/benchmarks/policy.md).
#include "proxy/policy/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ferry::policy {
namespace {

using ::testing::HasSubstr;

constexpr char kFile[] = "file policies.yaml";

std::string allow(const std::string& name, const std::string& principal) {
  return absl::StrCat("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ", name,
                      ", namespace: shop}\nspec:\n  rules: [{from: [{source: {principals: [", principal, "]}}]}]\n");
}

std::vector<Decoded> decode(const std::vector<std::string>& documents, const std::string& origin = kFile) {
  std::string text;
  for (const auto& d : documents) absl::StrAppend(&text, text.empty() ? "" : "---\n", d);
  auto decoded = decodeYamlFile(text, "policies.yaml", origin);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return decoded.ok() ? *std::move(decoded) : std::vector<Decoded>{};
}

// The principals of shop/<name> in force, "" when it is not.
std::string principalsOf(const Store& store, const std::string& name) {
  std::string out;
  store.current()->forEach([&](const Object& o) {
    const auto* a = std::get_if<AuthorizationPtr>(&o);
    if (a == nullptr || (*a)->meta.key() != "shop/" + name) return;
    for (const auto& rule : (*a)->rules) {
      for (const auto& source : rule.from) {
        for (const auto& p : source.principals.values) absl::StrAppend(&out, out.empty() ? "" : ",", p.str());
      }
    }
  });
  return out;
}

TEST(PolicyStoreTest, ReplaceKeepsWhatTheBatchListsAndDropsWhatItNoLongerDoes) {
  Store store("istio-system");
  store.replace(kFile, decode({allow("a", "td/ns/shop/sa/a"), allow("b", "td/ns/shop/sa/b")}));
  store.replace("kubernetes", decode({allow("k", "td/ns/shop/sa/k")}, "kubernetes"));
  ASSERT_EQ(store.current()->authorizationCount(), 3u);

  auto result = store.replace(kFile, decode({allow("b", "td/ns/shop/sa/b2"), allow("c", "td/ns/shop/sa/c")}));
  EXPECT_EQ(result.changed, 3u) << "b replaced, c added, a removed";
  EXPECT_EQ(principalsOf(store, "a"), "");
  EXPECT_EQ(principalsOf(store, "b"), "td/ns/shop/sa/b2");
  EXPECT_EQ(principalsOf(store, "c"), "td/ns/shop/sa/c");
  EXPECT_EQ(principalsOf(store, "k"), "td/ns/shop/sa/k") << "another origin's object is not this batch's to drop";
}

TEST(PolicyStoreTest, AnObjectDefinedTwiceInOneBatchKeepsTheFirst) {
  Store store("istio-system");
  auto result = store.replace(kFile, decode({allow("a", "td/ns/shop/sa/first"), allow("a", "td/ns/shop/sa/second")}));
  ASSERT_EQ(result.refused.size(), 1u);
  EXPECT_THAT(result.refused[0], HasSubstr("shop/a: defined more than once in file policies.yaml"));
  EXPECT_EQ(principalsOf(store, "a"), "td/ns/shop/sa/first");
}

TEST(PolicyStoreTest, ARefusedVersionKeepsThePreviousOneInForce) {
  Store store("istio-system");
  store.replace(kFile, decode({allow("a", "td/ns/shop/sa/a"), allow("b", "td/ns/shop/sa/b")}));
  auto result = store.replace(kFile, decode({allow("a", "bad*pattern"), allow("b", "td/ns/shop/sa/b")}));
  ASSERT_EQ(result.refused.size(), 1u);
  EXPECT_EQ(principalsOf(store, "a"), "td/ns/shop/sa/a") << "refused, not removed";
  auto refusals = store.refusals();
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_TRUE(refusals[0].kept_previous);

  // Gone from the batch altogether: now it goes.
  store.replace(kFile, decode({allow("b", "td/ns/shop/sa/b")}));
  EXPECT_EQ(principalsOf(store, "a"), "");
  EXPECT_TRUE(store.refusals().empty());
}

TEST(PolicyStoreTest, ReplacingTenThousandObjectsAppliesEachOnce) {
  std::vector<std::string> documents;
  for (int i = 0; i < 10000; ++i) documents.push_back(allow(absl::StrCat("p-", i), absl::StrCat("td/ns/x/sa/", i)));
  Store store("istio-system");
  auto result = store.replace(kFile, decode(documents));
  EXPECT_EQ(result.changed, 10000u);
  EXPECT_TRUE(result.refused.empty());
  documents.pop_back();
  result = store.replace(kFile, decode(documents));
  EXPECT_TRUE(result.refused.empty());
  EXPECT_EQ(store.current()->authorizationCount(), 9999u);
  EXPECT_EQ(principalsOf(store, "p-9999"), "");
  EXPECT_EQ(principalsOf(store, "p-9998"), "td/ns/x/sa/9998");
}

}  // namespace
}  // namespace ferry::policy
