#include "proxy/workloads/registry.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ferry::workloads {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

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

IpAddress ip(std::string_view text) { return *common::parseIp(text); }

absl::StatusOr<std::shared_ptr<const Registry>> parse(std::string_view text,
                                                      std::string_view node = "n1") {
  return Registry::parse(text, kSource, node);
}

void expectError(const absl::StatusOr<std::shared_ptr<const Registry>>& result, int line,
                 const std::string& prefix, const std::string& detail = "") {
  ASSERT_FALSE(result.ok()) << "expected an error at line " << line;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  std::string message(result.status().message());
  EXPECT_THAT(message, StartsWith(absl::StrCat(kSource, ":", line, ": ", prefix)));
  if (!detail.empty()) {
    EXPECT_THAT(message, HasSubstr(detail));
  }
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
  const auto& all = (*registry)->all();
  ASSERT_EQ(all.size(), 2u);
  const Workload& p1 = all[0];
  EXPECT_EQ(p1.name, "p1");
  EXPECT_EQ(p1.namespace_name, "default");
  EXPECT_EQ(p1.service_account, "sa1");
  EXPECT_EQ(p1.node, "n1");
  EXPECT_EQ(p1.ips, (std::vector{ip("10.77.1.11"), ip("fd00::11")}));
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
  EXPECT_TRUE((*registry)->all().empty());
  EXPECT_EQ((*registry)->localCount(), 0u);
}

TEST(RegistryTest, EmptyRegistryFindsNothing) {
  auto registry = Registry::empty("n1");
  EXPECT_EQ(registry->localNode(), "n1");
  EXPECT_TRUE(registry->all().empty());
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
  w.namespace_name = "shop";
  w.service_account = "cart";
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
  EXPECT_EQ((*registry)->all().size(), 3u);
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

// Watcher tests write into a fresh folder and give every write its own mtime, so a change is
// visible even when two writes land within the filesystem's timestamp granularity.
class WatcherTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           absl::StrCat("workloads_test_",
                        testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "workloads.yaml").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(std::string_view text) {
    {
      std::ofstream out(path_, std::ios::trunc);
      out << text;
    }
    ++mtime_sec_;
    timespec times[2] = {{mtime_sec_, 0}, {mtime_sec_, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  }

  std::filesystem::path dir_;
  std::string path_;
  time_t mtime_sec_ = 1'700'000'000;
};

TEST_F(WatcherTest, LoadInitialPublishesFirstSnapshot) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  int calls = 0;
  watcher.setOnChange([&](const std::shared_ptr<const Registry>& r) {
    ++calls;
    EXPECT_EQ(r->all().size(), 2u);
  });
  ASSERT_TRUE(watcher.loadInitial().ok());
  EXPECT_EQ(watcher.current()->all().size(), 2u);
  EXPECT_EQ(watcher.current()->localNode(), "n1");
  EXPECT_EQ(watcher.generation(), 1u);
  EXPECT_EQ(calls, 1);
}

TEST_F(WatcherTest, StartsWithEmptySnapshotBeforeLoading) {
  Watcher watcher(path_, "n1");
  ASSERT_NE(watcher.current(), nullptr);
  EXPECT_TRUE(watcher.current()->all().empty());
  EXPECT_EQ(watcher.generation(), 0u);
}

TEST_F(WatcherTest, LoadInitialFailsOnBrokenFile) {
  write(entry("    tls_mode: mutual\n"));
  Watcher watcher(path_, "n1");
  auto status = watcher.loadInitial();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), StartsWith(path_ + ":7: workloads[0].tls_mode: "));
}

TEST_F(WatcherTest, LoadInitialFailsOnMissingFile) {
  Watcher watcher(path_, "n1");
  auto status = watcher.loadInitial();
  ASSERT_FALSE(status.ok());
  std::string message(status.message());
  EXPECT_THAT(message, HasSubstr(path_));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

TEST_F(WatcherTest, PollWithoutChangeDoesNothing) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  ASSERT_TRUE(watcher.loadInitial().ok());
  auto before = watcher.current();
  EXPECT_FALSE(watcher.poll());
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(watcher.current(), before);
  EXPECT_EQ(watcher.generation(), 1u);
}

TEST_F(WatcherTest, PollSwapsSnapshotWhenFileChanges) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  ASSERT_TRUE(watcher.loadInitial().ok());
  auto before = watcher.current();
  std::shared_ptr<const Registry> published;
  watcher.setOnChange([&](const std::shared_ptr<const Registry>& r) { published = r; });

  write(entry());
  EXPECT_TRUE(watcher.poll());
  EXPECT_EQ(watcher.current()->all().size(), 1u);
  EXPECT_EQ(published, watcher.current());
  EXPECT_EQ(watcher.generation(), 2u);
  // A reader still holding the old snapshot keeps a valid one.
  EXPECT_EQ(before->all().size(), 2u);
  EXPECT_NE(before->findByIp(ip("10.77.2.21")), nullptr);
  EXPECT_EQ(watcher.current()->findByIp(ip("10.77.2.21")), nullptr);
}

TEST_F(WatcherTest, PollPicksUpFileReplacedByRename) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  ASSERT_TRUE(watcher.loadInitial().ok());
  std::string next = (dir_ / "next.yaml").string();
  std::ofstream(next) << "workloads: []\n";
  std::filesystem::rename(next, path_);
  EXPECT_TRUE(watcher.poll());
  EXPECT_TRUE(watcher.current()->all().empty());
}

TEST_F(WatcherTest, BrokenFileKeepsPreviousSnapshotAndCountsFailureOnce) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  ASSERT_TRUE(watcher.loadInitial().ok());
  auto before = watcher.current();

  write("workloads:\n  - name: [\n");
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(watcher.current(), before);
  EXPECT_EQ(watcher.reloadFailures(), 1u);
  EXPECT_EQ(watcher.generation(), 1u);
  // The same broken file is not re-parsed nor re-counted on later polls.
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(watcher.reloadFailures(), 1u);

  write(entry("    tls_mode: mutual\n"));
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(watcher.reloadFailures(), 2u);
  EXPECT_EQ(watcher.current(), before);
}

TEST_F(WatcherTest, RecoversAfterBrokenFileIsFixed) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  ASSERT_TRUE(watcher.loadInitial().ok());
  write("workloads: {}\n");
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(watcher.reloadFailures(), 1u);

  write(entry());
  EXPECT_TRUE(watcher.poll());
  EXPECT_EQ(watcher.current()->all().size(), 1u);
  EXPECT_EQ(watcher.generation(), 2u);
  EXPECT_EQ(watcher.reloadFailures(), 1u);
}

TEST_F(WatcherTest, MissingFileOnPollKeepsSnapshotAndRecoversWhenBack) {
  write(kTwoNodes);
  Watcher watcher(path_, "n1");
  ASSERT_TRUE(watcher.loadInitial().ok());
  auto before = watcher.current();

  std::filesystem::remove(path_);
  EXPECT_FALSE(watcher.poll());
  EXPECT_FALSE(watcher.poll());
  EXPECT_EQ(watcher.current(), before);
  EXPECT_EQ(watcher.reloadFailures(), 1u);

  write(entry());
  EXPECT_TRUE(watcher.poll());
  EXPECT_EQ(watcher.current()->all().size(), 1u);
}

}  // namespace
}  // namespace ferry::workloads
