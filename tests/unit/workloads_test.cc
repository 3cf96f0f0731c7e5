#include "proxy/workloads/registry.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proxy/config/workloads_file.h"
#include "proxy/workloads/file_source.h"
#include "tests/support/parse_error.h"
#include "tests/support/watched_dir.h"

namespace ferry::workloads {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using config::FileFormat;

constexpr char kSource[] = "workloads.yaml";

constexpr char kTwoNodes[] =
    "workloads:\n"
    "  - name: p1\n"  // line 2
    "    namespace: default\n"
    "    service_account: sa1\n"
    "    node: n1\n"
    "    ips: [10.77.1.11, \"fd00::11\"]\n"
    "    hbone: true\n"
    "    host_interface: fy-n1-p1\n"
    "    tls_mode: strict\n"
    "  - name: p2\n"  // line 10
    "    namespace: default\n"
    "    service_account: sa2\n"
    "    node: n2\n"
    "    ips: [10.77.2.21]\n";

// The same two workloads as JSON, with the lines the errors below point at.
constexpr char kTwoNodesJson[] =
    "{\"workloads\": [\n"
    "  {\"name\": \"p1\", \"namespace\": \"default\", \"service_account\": \"sa1\", \"node\": \"n1\",\n"
    "   \"ips\": [\"10.77.1.11\", \"fd00::11\"], \"hbone\": true, \"host_interface\": \"fy-n1-p1\",\n"
    "   \"tls_mode\": \"strict\"},\n"
    "  {\"name\": \"p2\", \"namespace\": \"default\", \"service_account\": \"sa2\", \"node\": \"n2\",\n"
    "   \"ips\": [\"10.77.2.21\"]}\n"
    "]}\n";

IpAddress ip(std::string_view text) { return *common::parseIp(text); }

// The file parsed and loaded into a fresh store, as FileSource does.
absl::StatusOr<std::shared_ptr<const Registry>> parse(std::string_view text, std::string_view node = "n1",
                                                      FileFormat format = FileFormat::kYaml) {
  return parseRegistry(text, kSource, node, format);
}

// Every workload once, by key (the registry keeps no order).
std::vector<Workload> list(const Registry& registry) {
  std::vector<Workload> out;
  registry.forEach([&](const Workload& w) { out.push_back(w); });
  std::sort(out.begin(), out.end(), [](const Workload& a, const Workload& b) { return a.displayName() < b.displayName(); });
  return out;
}

// The error is InvalidArgument and its message starts with "workloads.yaml:<line>: <prefix>".
void expectError(const absl::StatusOr<std::shared_ptr<const Registry>>& result, int line,
                 const std::string& prefix, const std::string& detail = "") {
  ferry::test_support::expectErrorAt(result, kSource, line, prefix, detail);
}

// One valid local workload, with `extra` lines appended to its entry (line 7 onwards).
std::string entry(const std::string& extra = "") {
  return absl::StrCat(
      "workloads:\n"
      "  - name: p1\n"
      "    namespace: default\n"
      "    service_account: sa1\n"
      "    node: n1\n"
      "    ips: [10.77.1.11]\n",
      extra);
}

TEST(RegistryTest, ParsesValidFile) {
  auto registry = parse(kTwoNodes);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto all = list(**registry);
  ASSERT_EQ(all.size(), 2u);
  const Workload& p1 = all[0];
  EXPECT_EQ(p1.name, "p1");
  EXPECT_EQ(p1.namespace_name, "default");
  EXPECT_EQ(p1.service_account, "sa1");
  EXPECT_EQ(p1.node, "n1");
  EXPECT_EQ(p1.ips, (IpList{ip("10.77.1.11"), ip("fd00::11")}));
  EXPECT_TRUE(p1.hbone);
  EXPECT_EQ(p1.host_interface, "fy-n1-p1");
  EXPECT_EQ(p1.tls_mode, TlsMode::kStrict);
  const Workload& p2 = all[1];
  EXPECT_FALSE(p2.hbone);
  EXPECT_EQ(p2.host_interface, "");
  EXPECT_EQ(p2.tls_mode, TlsMode::kPermissive);
  EXPECT_EQ((*registry)->localNode(), "n1");
  EXPECT_EQ((*registry)->localCount(), 1u);
}

TEST(RegistryTest, AcceptsEmptyList) {
  auto registry = parse("workloads: []\n");
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->size(), 0u);
  EXPECT_EQ((*registry)->localCount(), 0u);
}

TEST(RegistryTest, EmptyRegistryFindsNothing) {
  auto registry = Registry::empty("n1");
  EXPECT_EQ(registry->localNode(), "n1");
  EXPECT_EQ(registry->size(), 0u);
  EXPECT_EQ(registry->findByIp(ip("10.77.1.11")), nullptr);
}

TEST(RegistryTest, FindsWorkloadByAnyOfItsIps) {
  auto registry = parse(kTwoNodes);
  ASSERT_TRUE(registry.ok()) << registry.status();
  const Workload* by_v4 = (*registry)->findByIp(ip("10.77.1.11"));
  const Workload* by_v6 = (*registry)->findByIp(ip("fd00::11"));
  ASSERT_NE(by_v4, nullptr);
  EXPECT_EQ(by_v4->name, "p1");
  EXPECT_EQ(by_v6, by_v4);
  const Workload* remote = (*registry)->findByIp(ip("10.77.2.21"));
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(remote->name, "p2");
  EXPECT_EQ((*registry)->findByIp(ip("10.77.9.9")), nullptr);
}

TEST(RegistryTest, FindsIpv4WorkloadByV4MappedAddress) {
  auto registry = parse(kTwoNodes);
  ASSERT_TRUE(registry.ok()) << registry.status();
  const Workload* w = (*registry)->findByIp(ip("::ffff:10.77.1.11"));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->name, "p1");
}

TEST(RegistryTest, SharedLookupOutlivesTheSnapshot) {
  WorkloadPtr local, remote;
  {
    auto registry = parse(kTwoNodes, "n1");
    ASSERT_TRUE(registry.ok()) << registry.status();
    EXPECT_EQ((*registry)->sharedByIp(ip("10.77.9.9")), nullptr);
    EXPECT_EQ((*registry)->sharedLocalByIp(ip("10.77.2.21")), nullptr);  // n2's
    EXPECT_EQ((*registry)->sharedByIp(ip("::ffff:10.77.1.11")).get(), (*registry)->findByIp(ip("10.77.1.11")));
    local = (*registry)->sharedLocalByIp(ip("10.77.1.11"));
    remote = (*registry)->sharedByIp(ip("10.77.2.21"));
  }
  ASSERT_NE(local, nullptr);
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(local->displayName(), "default/p1");
  EXPECT_EQ(remote->name, "p2");
}

TEST(RegistryTest, FindLocalByIpIgnoresWorkloadsOfOtherNodes) {
  auto registry = parse(kTwoNodes, "n1");
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_NE((*registry)->findLocalByIp(ip("10.77.1.11")), nullptr);
  EXPECT_EQ((*registry)->findLocalByIp(ip("10.77.2.21")), nullptr);
  EXPECT_EQ((*registry)->findLocalByIp(ip("10.77.9.9")), nullptr);

  auto on_n2 = parse(kTwoNodes, "n2");
  ASSERT_TRUE(on_n2.ok()) << on_n2.status();
  EXPECT_EQ((*on_n2)->findLocalByIp(ip("10.77.1.11")), nullptr);
  ASSERT_NE((*on_n2)->findLocalByIp(ip("10.77.2.21")), nullptr);
}

TEST(RegistryTest, SpiffeIdFollowsNamespaceAndServiceAccount) {
  Workload w;
  w.name = "p1";
  w.namespace_name = intern("shop");
  w.service_account = intern("cart");
  EXPECT_EQ(w.spiffeId("cluster.local"), "spiffe://cluster.local/ns/shop/sa/cart");
  EXPECT_EQ(w.displayName(), "shop/p1");
}

TEST(RegistryTest, RejectsIpUsedByTwoWorkloadsNamingBoth) {
  expectError(parse(absl::StrCat(kTwoNodes,
                                 "  - name: p3\n"  // line 15
                                 "    namespace: other\n"
                                 "    service_account: sa3\n"
                                 "    node: n2\n"
                                 "    ips:\n"
                                 "      - 10.77.3.31\n"
                                 "      - 10.77.1.11\n")),  // line 21
              21, "workloads[2].ips[1]: 10.77.1.11 is already used by workloads[0] 'default/p1'",
              "(workload 'p3')");
}

TEST(RegistryTest, RejectsIpListedTwiceInOneWorkload) {
  expectError(parse(absl::StrCat(
                  "workloads:\n  - name: p1\n    namespace: default\n    service_account: sa\n"
                  "    node: n1\n    ips: [10.0.0.1, \"::ffff:10.0.0.1\"]\n")),
              6, "workloads[0].ips[1]: 10.0.0.1 is listed twice");
}

TEST(RegistryTest, RejectsDuplicateNameInNamespace) {
  expectError(parse(absl::StrCat(kTwoNodes,
                                 "  - name: p1\n"  // line 15
                                 "    namespace: default\n"
                                 "    service_account: sa3\n"
                                 "    node: n2\n"
                                 "    ips: [10.77.3.31]\n")),
              15, "workloads[2].name: 'default/p1' is already defined by workloads[0] (line 2)");
}

TEST(RegistryTest, AllowsSameNameInDifferentNamespaces) {
  auto registry = parse(absl::StrCat(kTwoNodes,
                                     "  - name: p1\n"
                                     "    namespace: other\n"
                                     "    service_account: sa3\n"
                                     "    node: n2\n"
                                     "    ips: [10.77.3.31]\n"));
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->size(), 3u);
}

class MissingWorkloadKeyTest : public testing::TestWithParam<std::string> {};

TEST_P(MissingWorkloadKeyTest, RejectsEntryMissingRequiredKey) {
  std::string text = "workloads:\n  - hbone: false\n";
  for (std::string_view line :
       {"    name: p1\n", "    namespace: default\n", "    service_account: sa1\n",
        "    node: n1\n", "    ips: [10.0.0.1]\n"}) {
    if (!line.substr(4).starts_with(GetParam() + ":")) text += line;
  }
  expectError(parse(text), 2, "workloads[0]." + GetParam() + ": required key is missing");
}

INSTANTIATE_TEST_SUITE_P(RegistryTest, MissingWorkloadKeyTest,
                         testing::Values("name", "namespace", "service_account", "node", "ips"),
                         [](const auto& info) { return info.param; });

TEST(RegistryTest, RejectsUnknownKeyNamingEntryAndLine) {
  expectError(parse(entry("    hbone_port: 15008\n")), 7,
              "workloads[0].hbone_port: unknown key 'hbone_port'", "(workload 'p1')");
}

TEST(RegistryTest, RejectsUnknownTopLevelKey) {
  expectError(parse("workloads: []\nservices: []\n"), 2, "services: unknown key 'services'");
}

TEST(RegistryTest, RejectsMissingWorkloadsKey) {
  expectError(parse("{}\n"), 1, "workloads: required key is missing");
}

TEST(RegistryTest, RejectsEntryThatIsNotAMap) {
  expectError(parse("workloads:\n  - p1\n"), 2, "workloads[0]: expected a map, got a scalar");
}

TEST(RegistryTest, RejectsBadIp) {
  expectError(parse(absl::StrCat(kTwoNodes,
                                 "  - name: p3\n    namespace: default\n"
                                 "    service_account: sa3\n    node: n2\n"
                                 "    ips: [10.77.3.300]\n")),
              19, "workloads[2].ips[0]: '10.77.3.300' is not an IP address", "(workload 'p3')");
}

TEST(RegistryTest, RejectsEmptyIpList) {
  expectError(parse("workloads:\n  - name: p1\n    namespace: default\n    service_account: sa\n"
                    "    node: n1\n    ips: []\n"),
              6, "workloads[0].ips: needs at least one IP address");
}

TEST(RegistryTest, RejectsBadTlsMode) {
  expectError(parse(entry("    tls_mode: mutual\n")), 7,
              "workloads[0].tls_mode: unknown tls_mode 'mutual'", "permissive or strict");
}

TEST(RegistryTest, RejectsBadName) {
  expectError(parse("workloads:\n  - name: P_1\n    namespace: default\n    service_account: sa\n"
                    "    node: n1\n    ips: [10.0.0.1]\n"),
              2, "workloads[0].name: 'P_1' is not a valid name");
  expectError(parse("workloads:\n  - name: p1\n    namespace: ..\n    service_account: sa\n"
                    "    node: n1\n    ips: [10.0.0.1]\n"),
              3, "workloads[0].namespace: '..' is not a valid name");
}

TEST(RegistryTest, RejectsBadHostInterface) {
  expectError(
      parse(entry("    host_interface: a-name-that-is-too-long\n")), 7,
      "workloads[0].host_interface: 'a-name-that-is-too-long' is not a valid interface name");
}

TEST(RegistryTest, RejectsNonBooleanHbone) {
  expectError(parse(entry("    hbone: 1\n")), 7, "workloads[0].hbone: '1' is not a boolean");
}

TEST(RegistryTest, RejectsEmptyDocument) { expectError(parse(""), 1, "the document is empty"); }

TEST(RegistryTest, ReportsYamlSyntaxErrorWithLine) {
  expectError(parse("workloads:\n  - name: p1\n    ips: [10.0.0.1\n    node: n1\n"), 4,
              "YAML syntax error");
}

// --- JSON: the same file, parsed by Boost.JSON line by line ---------------------------

TEST(WorkloadsJsonTest, ParsesTheSameWorkloadsAsYaml) {
  auto yaml = parse(kTwoNodes);
  auto json = parse(kTwoNodesJson, "n1", FileFormat::kJson);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(list(**json), list(**yaml));
}

TEST(WorkloadsJsonTest, ErrorsNameTheLineOfTheBadValue) {
  std::string text = kTwoNodesJson;
  text.replace(text.find("10.77.2.21"), 10, "10.77.2.300");
  expectError(parse(text, "n1", FileFormat::kJson), 6, "workloads[1].ips[0]: '10.77.2.300' is not an IP address",
              "(workload 'p2')");
}

TEST(WorkloadsJsonTest, RejectsDuplicateIpNamingTheFirstEntryAndItsLine) {
  std::string text = kTwoNodesJson;
  text.replace(text.find("10.77.2.21"), 10, "10.77.1.11");
  expectError(parse(text, "n1", FileFormat::kJson), 6,
              "workloads[1].ips[0]: 10.77.1.11 is already used by workloads[0] 'default/p1' (line 2)");
}

TEST(WorkloadsJsonTest, ReportsSyntaxErrorWithLine) {
  expectError(parse("{\"workloads\": [\n  {\"name\": \"p1\",,}\n]}\n", "n1", FileFormat::kJson), 2,
              "JSON syntax error");
}

TEST(WorkloadsJsonTest, RejectsUnknownKeyAndTrailingDocument) {
  expectError(parse("{\"workloads\": [],\n \"services\": []}\n", "n1", FileFormat::kJson), 2,
              "services: unknown key 'services'");
  expectError(parse("{\"workloads\": []}\n\n{}\n", "n1", FileFormat::kJson), 3,
              "only one JSON value is allowed per file");
  expectError(parse("  \n", "n1", FileFormat::kJson), 1, "the document is empty");
}

TEST(WorkloadsJsonTest, FormatFollowsTheExtension) {
  EXPECT_EQ(config::formatOf("/etc/ferry/workloads.json"), FileFormat::kJson);
  EXPECT_EQ(config::formatOf("/etc/ferry/workloads.yaml"), FileFormat::kYaml);
  EXPECT_EQ(config::formatOf("workloads"), FileFormat::kYaml);
}

// --- Store: changes by key, published as deltas --------------------------------------

Workload pod(std::string name, std::string node, std::string address, bool hbone = true) {
  Workload w;
  w.name = std::move(name);
  w.namespace_name = intern("default");
  w.service_account = intern("sa");
  w.node = intern(node);
  w.ips = {ip(address)};
  w.hbone = hbone;
  return w;
}

Update upsert(Workload w) { return Update{w.displayName(), std::move(w)}; }
Update removal(std::string name) { return Update{"default/" + name, std::nullopt}; }

class StoreTest : public testing::Test {
 protected:
  void SetUp() override {
    store_.subscribe([this](const Registry& after, const Delta& delta) {
      ++published_;
      last_ = delta;
      EXPECT_EQ(&after, store_.current().get());
    });
  }
  Store store_{"n1"};
  int published_ = 0;
  Delta last_;
};

TEST_F(StoreTest, OneChangeLeavesEveryOtherWorkloadSharedWithThePreviousSnapshot) {
  std::vector<Workload> all;
  for (int i = 0; i < 2000; ++i) {
    all.push_back(pod(absl::StrCat("p", i), i % 2 ? "n1" : "n2", absl::StrCat("10.1.", i / 250, ".", i % 250)));
  }
  store_.replaceAll(std::move(all));
  auto before = store_.current();
  auto result = store_.apply({upsert(pod("p7", "n1", "10.1.0.7", /*hbone=*/false))});
  EXPECT_EQ(result.changed, 1u);
  auto after = store_.current();
  ASSERT_NE(after, before);
  // Untouched workloads are the same objects, not copies; the old snapshot is intact.
  for (int i : {0, 1, 500, 1999}) {
    IpAddress address = ip(absl::StrCat("10.1.", i / 250, ".", i % 250));
    EXPECT_EQ(after->findByIp(address), before->findByIp(address)) << i;
  }
  EXPECT_FALSE(after->findByIp(ip("10.1.0.7"))->hbone);
  EXPECT_TRUE(before->findByIp(ip("10.1.0.7"))->hbone);
  ASSERT_EQ(last_.changes.size(), 1u);
  EXPECT_TRUE(last_.changes[0].before->hbone);
  EXPECT_FALSE(last_.changes[0].after->hbone);
}

TEST_F(StoreTest, DeltaSaysWhatWasAddedReplacedAndRemoved) {
  store_.apply({upsert(pod("a", "n1", "10.0.0.1")), upsert(pod("b", "n2", "10.0.0.2"))});
  EXPECT_EQ(published_, 1);
  ASSERT_EQ(last_.changes.size(), 2u);
  EXPECT_EQ(last_.changes[0].before, nullptr);
  EXPECT_EQ(last_.changes[0].after->name, "a");

  store_.apply({removal("a"), upsert(pod("b", "n2", "10.0.0.3"))});
  EXPECT_EQ(published_, 2);
  ASSERT_EQ(last_.changes.size(), 2u);
  EXPECT_EQ(last_.changes[0].before->name, "a");
  EXPECT_EQ(last_.changes[0].after, nullptr);
  EXPECT_EQ(last_.changes[1].before->ips.front(), ip("10.0.0.2"));
  EXPECT_EQ(last_.changes[1].after->ips.front(), ip("10.0.0.3"));
  auto now = store_.current();
  EXPECT_EQ(now->size(), 1u);
  EXPECT_EQ(now->findByIp(ip("10.0.0.1")), nullptr);
  EXPECT_EQ(now->findByIp(ip("10.0.0.2")), nullptr);
  EXPECT_NE(now->findByIp(ip("10.0.0.3")), nullptr);
}

TEST_F(StoreTest, AnUnchangedWorkloadPublishesNothing) {
  store_.apply({upsert(pod("a", "n1", "10.0.0.1"))});
  auto generation = store_.generation();
  auto result = store_.apply({upsert(pod("a", "n1", "10.0.0.1")), removal("never-there")});
  EXPECT_EQ(result.changed, 0u);
  EXPECT_EQ(store_.generation(), generation);
  EXPECT_EQ(published_, 1);
}

TEST_F(StoreTest, RefusesAnIpAnotherWorkloadHoldsAndAppliesTheRest) {
  store_.apply({upsert(pod("a", "n1", "10.0.0.1"))});
  auto result = store_.apply({upsert(pod("b", "n2", "10.0.0.1")), upsert(pod("c", "n2", "10.0.0.3"))});
  ASSERT_EQ(result.rejected.size(), 1u);
  EXPECT_THAT(result.rejected[0], HasSubstr("default/b: 10.0.0.1 is already used by default/a"));
  EXPECT_EQ(store_.rejected(), 1u);
  EXPECT_EQ(result.changed, 1u);
  EXPECT_EQ(store_.current()->findByIp(ip("10.0.0.1"))->name, "a");
  EXPECT_NE(store_.current()->findByIp(ip("10.0.0.3")), nullptr);
}

TEST_F(StoreTest, RefusesAWorkloadWithoutAnIp) {
  Workload w = pod("a", "n1", "10.0.0.1");
  w.ips.clear();
  auto result = store_.apply({upsert(std::move(w))});
  ASSERT_EQ(result.rejected.size(), 1u);
  EXPECT_THAT(result.rejected[0], HasSubstr("default/a: has no IP address"));
  EXPECT_EQ(store_.current()->size(), 0u);
}

TEST_F(StoreTest, WorkloadsOfOneBatchMaySwapAddresses) {
  store_.replaceAll({pod("a", "n1", "10.0.0.1"), pod("b", "n2", "10.0.0.2")});
  auto result = store_.replaceAll({pod("a", "n1", "10.0.0.2"), pod("b", "n2", "10.0.0.1")});
  EXPECT_TRUE(result.rejected.empty());
  EXPECT_EQ(store_.current()->findByIp(ip("10.0.0.1"))->name, "b");
  EXPECT_EQ(store_.current()->findByIp(ip("10.0.0.2"))->name, "a");
}

TEST_F(StoreTest, AnIpFreedByARemovalCanBeTakenInTheSameBatch) {
  store_.apply({upsert(pod("old", "n1", "10.0.0.1"))});
  auto result = store_.apply({upsert(pod("new", "n2", "10.0.0.1")), removal("old")});
  EXPECT_TRUE(result.rejected.empty());
  EXPECT_EQ(store_.current()->findByIp(ip("10.0.0.1"))->name, "new");
}

TEST_F(StoreTest, TheLastUpdateOfAKeyInABatchWins) {
  store_.apply({upsert(pod("a", "n1", "10.0.0.1")), removal("a")});
  EXPECT_EQ(store_.current()->size(), 0u);
  EXPECT_EQ(published_, 0);
}

TEST_F(StoreTest, LocalWorkloadsFollowChanges) {
  store_.replaceAll({pod("a", "n1", "10.0.0.1"), pod("b", "n2", "10.0.0.2")});
  ASSERT_EQ(store_.current()->localCount(), 1u);
  EXPECT_EQ(store_.current()->local()[0]->name, "a");
  store_.apply({upsert(pod("b", "n1", "10.0.0.2")), upsert(pod("a", "n2", "10.0.0.1"))});
  ASSERT_EQ(store_.current()->localCount(), 1u);
  EXPECT_EQ(store_.current()->local()[0]->name, "b");
  EXPECT_NE(store_.current()->findLocalByIp(ip("10.0.0.2")), nullptr);
  EXPECT_EQ(store_.current()->findLocalByIp(ip("10.0.0.1")), nullptr);
}

// Reported, not asserted (docs/benchmarks/registry.md has the 150,000-workload figure): the
// heap the registry holds per workload, with interned names and one inline IP.
TEST(RegistryMemoryTest, ReportsHeapBytesPerWorkload) {
  constexpr int kCount = 20'000;
  std::vector<Workload> all;
  all.reserve(kCount);
  for (int i = 0; i < kCount; ++i) {
    Workload w;
    w.name = absl::StrCat("web-7d9f8c6b5-", i);
    w.namespace_name = intern(absl::StrCat("ns-", i % 500));
    w.service_account = intern(absl::StrCat("sa-", i % 500));
    w.node = intern(absl::StrCat("node-", i % 5000));
    w.ips = {IpAddress(boost::asio::ip::address_v4(0x0a000000u + i))};
    w.hbone = true;
    all.push_back(std::move(w));
  }
  malloc_trim(0);
  size_t before = mallinfo2().uordblks;
  Store store("node-1");
  {
    auto copy = all;  // what replaceAll consumes, outside the measurement
    store.replaceAll(std::move(copy));
  }
  size_t after = mallinfo2().uordblks;
  double per_workload = static_cast<double>(after - before) / kCount;
  std::printf("registry heap: %.0f bytes per workload (%d workloads)\n", per_workload, kCount);
  RecordProperty("bytes_per_workload", static_cast<int>(per_workload));
  EXPECT_EQ(store.current()->size(), static_cast<size_t>(kCount));
}

// --- FileSource: the file, watched -------------------------------------------------------

class FileSourceTest : public ferry::test_support::WatchedDirTest {
 protected:
  FileSourceTest() { file_name_ = "workloads.yaml"; }
};

TEST_F(FileSourceTest, LoadInitialPublishesFirstSnapshot) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  int calls = 0;
  store.subscribe([&](const Registry& r, const Delta& delta) {
    ++calls;
    EXPECT_EQ(r.size(), 2u);
    EXPECT_EQ(delta.changes.size(), 2u);
  });
  ASSERT_TRUE(watcher.start(store).ok());
  EXPECT_EQ(store.current()->size(), 2u);
  EXPECT_EQ(store.current()->localNode(), "n1");
  EXPECT_EQ(store.generation(), 1u);
  EXPECT_EQ(calls, 1);
}

TEST_F(FileSourceTest, StartsWithEmptySnapshotBeforeLoading) {
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_NE(store.current(), nullptr);
  EXPECT_TRUE(store.current()->size() == 0);
  EXPECT_EQ(store.generation(), 0u);
}

TEST_F(FileSourceTest, LoadInitialFailsOnBrokenFile) {
  write(entry("    tls_mode: mutual\n"));
  Store store("n1");
  FileSource watcher(path_);
  auto status = watcher.start(store);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), StartsWith(path_ + ":7: workloads[0].tls_mode: "));
}

TEST_F(FileSourceTest, LoadInitialFailsOnMissingFile) {
  Store store("n1");
  FileSource watcher(path_);
  auto status = watcher.start(store);
  ASSERT_FALSE(status.ok());
  std::string message(status.message());
  EXPECT_THAT(message, HasSubstr(path_));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

TEST_F(FileSourceTest, PollWithoutChangeDoesNothing) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  auto before = store.current();
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(store.current(), before);
  EXPECT_EQ(store.generation(), 1u);
}

TEST_F(FileSourceTest, PollSwapsSnapshotWhenFileChanges) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  auto before = store.current();
  const Registry* published = nullptr;
  store.subscribe([&](const Registry& r, const Delta&) { published = &r; });

  write(entry());
  EXPECT_TRUE(watcher.poll(store));
  EXPECT_EQ(store.current()->size(), 1u);
  EXPECT_EQ(published, store.current().get());
  EXPECT_EQ(store.generation(), 2u);
  // A reader still holding the old snapshot keeps a valid one.
  EXPECT_EQ(before->size(), 2u);
  EXPECT_NE(before->findByIp(ip("10.77.2.21")), nullptr);
  EXPECT_EQ(store.current()->findByIp(ip("10.77.2.21")), nullptr);
}

TEST_F(FileSourceTest, PollPicksUpFileReplacedByRename) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  std::string next = (dir_ / "next.yaml").string();
  std::ofstream(next) << "workloads: []\n";
  std::filesystem::rename(next, path_);
  EXPECT_TRUE(watcher.poll(store));
  EXPECT_TRUE(store.current()->size() == 0);
}

TEST_F(FileSourceTest, BrokenFileKeepsPreviousSnapshotAndCountsFailureOnce) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  auto before = store.current();

  write("workloads:\n  - name: [\n");
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(store.current(), before);
  EXPECT_EQ(watcher.failures(), 1u);
  EXPECT_EQ(store.generation(), 1u);
  // The same broken file is not re-parsed nor re-counted on later polls.
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(watcher.failures(), 1u);

  write(entry("    tls_mode: mutual\n"));
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(watcher.failures(), 2u);
  EXPECT_EQ(store.current(), before);
}

TEST_F(FileSourceTest, RecoversAfterBrokenFileIsFixed) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  write("workloads: {}\n");
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(watcher.failures(), 1u);

  write(entry());
  EXPECT_TRUE(watcher.poll(store));
  EXPECT_EQ(store.current()->size(), 1u);
  EXPECT_EQ(store.generation(), 2u);
  EXPECT_EQ(watcher.failures(), 1u);
}

TEST_F(FileSourceTest, MissingFileOnPollKeepsSnapshotAndRecoversWhenBack) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  auto before = store.current();

  std::filesystem::remove(path_);
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(store.current(), before);
  EXPECT_EQ(watcher.failures(), 1u);

  write(entry());
  EXPECT_TRUE(watcher.poll(store));
  EXPECT_EQ(store.current()->size(), 1u);
}


TEST_F(FileSourceTest, RewriteWithTheSameContentChangesNothing) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  write(kTwoNodes);  // new mtime, same bytes
  EXPECT_FALSE(watcher.poll(store));
  EXPECT_EQ(store.generation(), 1u);
}

TEST_F(FileSourceTest, JsonFileIsReadByItsExtension) {
  path_ = (dir_ / "workloads.json").string();
  write(kTwoNodesJson);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  EXPECT_EQ(store.current()->size(), 2u);
  EXPECT_EQ(store.current()->localCount(), 1u);
}

TEST_F(FileSourceTest, ChangingOneEntryPublishesADeltaOfOne) {
  write(kTwoNodes);
  Store store("n1");
  FileSource watcher(path_);
  ASSERT_TRUE(watcher.start(store).ok());
  Delta seen;
  store.subscribe([&](const Registry&, const Delta& delta) { seen = delta; });
  std::string next = kTwoNodes;
  next.replace(next.find("10.77.2.21"), 10, "10.77.2.22");
  write(next);
  EXPECT_TRUE(watcher.poll(store));
  ASSERT_EQ(seen.changes.size(), 1u);
  EXPECT_EQ(seen.changes[0].before->name, "p2");
  EXPECT_EQ(seen.changes[0].after->ips.front(), ip("10.77.2.22"));
}

// --- FileSource and ferry-cni (docs/install.md, "The CNI chain") ---------------------------

namespace {
CniSandbox fileSandbox(const std::string& key, const std::string& ip, const std::string& device,
                       const std::string& container) {
  return CniSandbox{key, container, "", IpList{*common::parseIp(ip)}, device};
}
constexpr char kCniPods[] =
    "workloads:\n"
    "  - {name: p3, namespace: default, service_account: p3, node: n1, ips: [10.77.1.13], hbone: true}\n"
    "  - {name: p4, namespace: default, service_account: p4, node: n1, ips: [10.77.1.14], hbone: true,"
    " host_interface: fy1-p4}\n"
    "  - {name: r1, namespace: default, service_account: r1, node: n2, ips: [10.77.2.11], hbone: true}\n";
}  // namespace

TEST_F(FileSourceTest, TheFileDecidesAndTheSandboxSuppliesTheDeviceItDoesNotName) {
  write(kCniPods);
  Store store("n1");
  FileSource source(path_);
  ASSERT_TRUE(source.start(store).ok());
  EXPECT_EQ(source.cniDecide(store, "default/p3", "").kind, CniDecision::kEnrolled);
  EXPECT_EQ(source.cniDecide(store, "default/other", "").kind, CniDecision::kNotEnrolled);
  EXPECT_EQ(source.cniDecide(store, "default/r1", "").kind, CniDecision::kNotEnrolled) << "another node's";
  CniDecision d = source.cniAdd(store, fileSandbox("default/p3", "10.77.1.13", "veth3", "c1"));
  EXPECT_EQ(d.kind, CniDecision::kEnrolled) << d.reason;
  EXPECT_EQ(store.current()->findByIp(*common::parseIp("10.77.1.13"))->host_interface, "veth3");
  // The file and the sandbox must agree: the address, a device the file names.
  d = source.cniAdd(store, fileSandbox("default/p3", "10.77.1.99", "veth3", "c1"));
  EXPECT_EQ(d.kind, CniDecision::kRefused);
  EXPECT_THAT(d.reason, HasSubstr("10.77.1.99"));
  d = source.cniAdd(store, fileSandbox("default/p4", "10.77.1.14", "veth4", "c2"));
  EXPECT_EQ(d.kind, CniDecision::kRefused);
  EXPECT_THAT(d.reason, HasSubstr("host_interface fy1-p4"));
  // A reload keeps the device the sandbox gave.
  write(std::string(kCniPods) + "  - {name: p5, namespace: default, service_account: p5, node: n1, ips: [10.77.1.15]}\n");
  ASSERT_TRUE(source.poll(store));
  EXPECT_EQ(store.current()->findByIp(*common::parseIp("10.77.1.13"))->host_interface, "veth3");
}

TEST_F(FileSourceTest, ADelTakesThePodOutUntilItsNextAddAndADelOfAnOlderSandboxDoesNothing) {
  write(kCniPods);
  Store store("n1");
  FileSource source(path_);
  ASSERT_TRUE(source.start(store).ok());
  ASSERT_EQ(source.cniAdd(store, fileSandbox("default/p3", "10.77.1.13", "veth3", "c1")).kind, CniDecision::kEnrolled);
  source.cniDel(store, "default/p3", "c0");
  EXPECT_NE(store.current()->findByIp(*common::parseIp("10.77.1.13")), nullptr);
  source.cniDel(store, "default/p3", "c1");
  EXPECT_EQ(store.current()->findByIp(*common::parseIp("10.77.1.13")), nullptr) << "released with its sandbox";
  write(std::string(kCniPods) + "# touched\n");
  source.poll(store);
  EXPECT_EQ(store.current()->findByIp(*common::parseIp("10.77.1.13")), nullptr) << "a reload does not bring it back";
  EXPECT_EQ(source.cniDecide(store, "default/p3", "").kind, CniDecision::kEnrolled);
  ASSERT_EQ(source.cniAdd(store, fileSandbox("default/p3", "10.77.1.13", "veth9", "c2")).kind, CniDecision::kEnrolled);
  EXPECT_EQ(store.current()->findByIp(*common::parseIp("10.77.1.13"))->host_interface, "veth9");
}

}  // namespace
}  // namespace ferry::workloads
