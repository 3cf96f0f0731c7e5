// The memory limit ferryd reads from its cgroup (v1 and v2, with and without a cgroup
// namespace) and the admission limits fitted to it (docs/configuration.md, "Memory").
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proxy/common/cgroup.h"
#include "proxy/config/config.h"
#include "proxy/config/memory_budget.h"

namespace ferry {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A fake root: /proc/self/{cgroup,mountinfo} and the limit files a test writes.
class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("cgroup_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "proc/self");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    fs::create_directories((root_ / path.substr(1)).parent_path());
    std::ofstream(root_ / path.substr(1)) << text;
  }
  absl::StatusOr<std::optional<common::CgroupMemoryLimit>> read() { return common::cgroupMemoryLimit(root_.string()); }

  fs::path root_;
};

// A hybrid host (this lab's): v1 controllers and the v2 tree beside them.
constexpr char kHybridMountinfo[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST_F(CgroupTest, V1TakesTheLowestLimitOnTheWayUp) {
  write("/proc/self/mountinfo", kHybridMountinfo);
  write("/proc/self/cgroup", "9:name=systemd:/\n4:memory:/kubepods/pod1/c1\n0::/\n");
  write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // "unlimited"
  write("/sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes", "8589934592\n");
  write("/sys/fs/cgroup/memory/kubepods/pod1/memory.limit_in_bytes", "1073741824\n");
  write("/sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes", "2147483648\n");
  auto limit = read();
  ASSERT_TRUE(limit.ok()) << limit.status();
  ASSERT_TRUE(limit->has_value());
  EXPECT_EQ((*limit)->bytes, 1073741824u) << "the pod's limit binds its container's";
  EXPECT_EQ((*limit)->file, "/sys/fs/cgroup/memory/kubepods/pod1/memory.limit_in_bytes");
  EXPECT_EQ((*limit)->version, 1);
}

TEST_F(CgroupTest, V2InsideACgroupNamespaceReadsTheMountsRoot) {
  write("/proc/self/mountinfo", "40 30 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  write("/proc/self/cgroup", "0::/\n");
  write("/sys/fs/cgroup/memory.max", "805306368\n");
  auto limit = read();
  ASSERT_TRUE(limit.ok()) << limit.status();
  ASSERT_TRUE(limit->has_value());
  EXPECT_EQ((*limit)->bytes, 805306368u);
  EXPECT_EQ((*limit)->file, "/sys/fs/cgroup/memory.max");
  EXPECT_EQ((*limit)->version, 2);
}

TEST_F(CgroupTest, V2WithoutANamespaceStripsTheMountRootAndMaxIsNoLimit) {
  // A container runtime without cgroupns that bind-mounts the container's own cgroup.
  write("/proc/self/mountinfo", "40 30 0:26 /kubepods/pod2/c2 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
  write("/proc/self/cgroup", "0::/kubepods/pod2/c2\n");
  write("/sys/fs/cgroup/memory.max", "max\n");
  auto limit = read();
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_FALSE(limit->has_value()) << "max: no limit";
}

TEST_F(CgroupTest, NoMemoryCgroupIsNoLimitAndGarbageIsAnError) {
  write("/proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  write("/proc/self/cgroup", "3:cpu:/\n");
  auto none = read();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  write("/proc/self/mountinfo", "40 30 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  write("/proc/self/cgroup", "0::/a\n");
  write("/sys/fs/cgroup/a/memory.max", "lots\n");
  auto bad = read();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("/sys/fs/cgroup/a/memory.max: 'lots' is not a number of bytes"));
}

TEST(ByteSizeTest, KubernetesBinarySuffixesAndPlainBytes) {
  EXPECT_EQ(common::parseByteSize("1Gi"), uint64_t{1} << 30);
  EXPECT_EQ(common::parseByteSize("768Mi"), uint64_t{768} << 20);
  EXPECT_EQ(common::parseByteSize("65536"), 65536u);
  for (const char* bad : {"", "Mi", "1G", "1.5Gi", "-1", "1 Gi", "99999999999999Ti"}) {
    EXPECT_FALSE(common::parseByteSize(bad).has_value()) << bad;
  }
  EXPECT_EQ(common::formatBytes(1536ull << 20), "1.5 GiB");
  EXPECT_EQ(common::formatBytes(700ull << 20), "700 MiB");
}

config::MemoryBudget limitOf(uint64_t bytes) {
  config::MemoryBudget b;
  b.limit = bytes;
  b.source = "test";
  return b;
}

TEST(MemoryBudgetTest, DefaultsComeDownTogetherToFitTheLimit) {
  config::Limits limits;
  const config::Limits defaults;
  auto budget = limitOf(uint64_t{1} << 30);  // the chart's limit
  ASSERT_TRUE(config::fitToMemory(limits, budget).ok());
  EXPECT_TRUE(budget.lowered);
  EXPECT_EQ(budget.headroom, uint64_t{256} << 20) << "a quarter of the limit";
  EXPECT_EQ(budget.default_worst_case, config::worstCase(defaults));
  EXPECT_GT(budget.default_worst_case, budget.limit) << "the defaults alone would not fit 1 GiB";
  EXPECT_LE(budget.worst_case, budget.available);
  EXPECT_GT(budget.worst_case, budget.available * 95 / 100) << "lowered no further than needed";
  // Each in proportion, the parts with their wholes.
  EXPECT_LT(limits.hbone.max_connections, defaults.hbone.max_connections);
  EXPECT_LT(limits.outbound.max_connections, defaults.outbound.max_connections);
  double f = static_cast<double>(limits.hbone.max_connections) / defaults.hbone.max_connections;
  EXPECT_NEAR(static_cast<double>(limits.hbone.max_pending) / defaults.hbone.max_pending, f, 0.01);
  EXPECT_NEAR(static_cast<double>(limits.outbound.max_connections_per_source) /
                  defaults.outbound.max_connections_per_source,
              f, 0.01);
  EXPECT_LE(limits.hbone.max_pending_per_source, limits.hbone.max_pending);
}

TEST(MemoryBudgetTest, NoLimitOrARoomyOneChangesNothing) {
  config::Limits limits;
  auto none = limitOf(0);
  ASSERT_TRUE(config::fitToMemory(limits, none).ok());
  EXPECT_EQ(limits, config::Limits{});
  EXPECT_FALSE(none.lowered);
  auto roomy = limitOf(uint64_t{8} << 30);
  ASSERT_TRUE(config::fitToMemory(limits, roomy).ok());
  EXPECT_EQ(limits, config::Limits{});
  EXPECT_FALSE(roomy.lowered);
}

TEST(MemoryBudgetTest, WrittenLimitsAreKeptAndTheDefaultsFitTheRest) {
  config::Limits limits;
  limits.hbone.max_connections = 1000;
  limits.hbone.written = config::kWrittenConnections;
  auto budget = limitOf(uint64_t{512} << 20);
  ASSERT_TRUE(config::fitToMemory(limits, budget).ok()) << "1,000 tunnels cost 187 MiB of 336";
  EXPECT_EQ(limits.hbone.max_connections, 1000u);
  EXPECT_LT(limits.outbound.max_connections, config::Limits{}.outbound.max_connections);
  EXPECT_LE(budget.worst_case, budget.available);
}

TEST(MemoryBudgetTest, WrittenLimitsThatCannotFitAreRefusedNamingThem) {
  config::Limits limits;
  limits.hbone.max_connections = 4096;
  limits.hbone.written = config::kWrittenConnections;
  auto budget = limitOf(uint64_t{512} << 20);
  auto st = config::fitToMemory(limits, budget);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("limits.hbone.max_connections 4096 x 191 KiB"));
  EXPECT_THAT(st.message(), HasSubstr("the memory limit 512 MiB (test) leaves 336 MiB for connections"));
  EXPECT_THAT(st.message(), HasSubstr("48 MiB for received data (limits.receive_buffer)"));
  EXPECT_THAT(st.message(), HasSubstr("lower them, or raise the memory limit"));
}

TEST(MemoryBudgetTest, ALimitTooSmallForAnythingIsRefused) {
  config::Limits limits;
  auto budget = limitOf(uint64_t{64} << 20);
  auto st = config::fitToMemory(limits, budget);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("leaves nothing for connections"));
}

TEST(MemoryBudgetTest, TheReceiveBufferTakesItsShareAndWhatIsWrittenIsKept) {
  config::Limits limits;
  auto budget = limitOf(uint64_t{1} << 30);
  ASSERT_TRUE(config::fitToMemory(limits, budget).ok());
  EXPECT_EQ(budget.receive_buffer, uint64_t{96} << 20) << "auto: an eighth of the 768 MiB after the headroom";
  EXPECT_EQ(budget.available, uint64_t{672} << 20) << "the connections fit into the rest";
  EXPECT_LE(budget.worst_case + budget.receive_buffer + budget.headroom, budget.limit);
  EXPECT_THAT(config::describeBudget(budget), HasSubstr("received data held to 96 MiB"));

  // Written: kept, and the connections make room for it.
  config::Limits written;
  written.receive_buffer = {config::MemorySetting::Source::kBytes, uint64_t{256} << 20};
  auto b2 = limitOf(uint64_t{1} << 30);
  ASSERT_TRUE(config::fitToMemory(written, b2).ok());
  EXPECT_EQ(b2.receive_buffer, uint64_t{256} << 20);
  EXPECT_LT(written.hbone.max_connections, limits.hbone.max_connections);
  EXPECT_LE(b2.worst_case + b2.receive_buffer + b2.headroom, b2.limit);

  // More than the limit leaves: refused, naming the key.
  written.receive_buffer.bytes = uint64_t{768} << 20;
  auto b3 = limitOf(uint64_t{1} << 30);
  auto st = config::fitToMemory(written, b3);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("limits.receive_buffer 768 MiB does not fit the memory limit 1.0 GiB"));

  // None: only the HTTP/2 windows (the operator's choice, said in the log line).
  config::Limits none;
  none.receive_buffer = {config::MemorySetting::Source::kNone, 0};
  auto b4 = limitOf(uint64_t{1} << 30);
  ASSERT_TRUE(config::fitToMemory(none, b4).ok());
  EXPECT_EQ(b4.receive_buffer, 0u);
  EXPECT_THAT(config::describeBudget(b4), HasSubstr("bounded by the HTTP/2 windows only"));

  // No memory limit: auto still bounds it.
  config::Limits unlimited;
  auto b5 = limitOf(0);
  ASSERT_TRUE(config::fitToMemory(unlimited, b5).ok());
  EXPECT_EQ(b5.receive_buffer, config::kDefaultReceiveBuffer);
}

TEST(MemoryBudgetTest, LimitsMemoryNamesTheSource) {
  auto bytes = config::resolveMemoryLimit(config::MemorySetting{config::MemorySetting::Source::kBytes, 1u << 30});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->limit, 1u << 30);
  EXPECT_EQ(bytes->source, "limits.memory");
  auto none = config::resolveMemoryLimit(config::MemorySetting{config::MemorySetting::Source::kNone, 0});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->limit, 0u);
}

}  // namespace
}  // namespace ferry
