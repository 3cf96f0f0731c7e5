// Store::replace with a large batch (proxy/policy/store.h): 10,000 objects apply once each
// and a batch without one drops just it. The batch is checked against its own keys with a
// set (a list made a 10,000-object replace O(n^2), docs/benchmarks/policy.md); the rules of
// replace one object at a time are in policy_store_test.cc.
#include "proxy/policy/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ferry::policy {
namespace {

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

TEST(PolicyStoreBatchTest, ReplacingTenThousandObjectsAppliesEachOnce) {
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
