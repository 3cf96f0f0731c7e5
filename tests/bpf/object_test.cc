// The production object: loads on this kernel, pins its maps by name, adopts
// them on reload; and the shared header's tables are consistent.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "bpf/shared/datapath.h"
#include "ferry_datapath.skel.h"
#include "tests/bpf/packets.h"
#include "tests/bpf/test_support.h"

namespace ferry::bpftest {
namespace {

// Maps the loader owns (not libbpf's .rodata/.data/.bss).
bool isFerryMap(const bpf_map* map) { return !bpf_map__is_internal(map); }

TEST(SharedHeaderTest, ReasonValuesAreUniqueAndFitTheCounterSlots) {
  std::set<unsigned> values;
  std::set<std::string> names;
#define FERRY_COLLECT(name, value, text)   \
  EXPECT_TRUE(values.insert(value).second) \
      << #name " reuses value " << value;  \
  names.insert(#name);                     \
  EXPECT_LT(value, FERRY_REASON_SLOTS);    \
  EXPECT_STRNE(text, "");
  FERRY_REASONS(FERRY_COLLECT)
#undef FERRY_COLLECT
  EXPECT_EQ(names.size(), values.size());
}

TEST(SharedHeaderTest, CounterCellsDoNotOverlap) {
  std::set<uint32_t> seen;
  for (uint32_t prog = 0; prog < FERRY_PROG_COUNT; ++prog)
    for (uint32_t verdict = 0; verdict < FERRY_VERDICT_COUNT; ++verdict)
      for (uint32_t reason = 0; reason < FERRY_REASON_SLOTS; ++reason) {
        const uint32_t index = ferry_counter_index(prog, verdict, reason);
        EXPECT_LT(index, static_cast<uint32_t>(FERRY_COUNTER_ENTRIES));
        EXPECT_TRUE(seen.insert(index).second);
      }
}

class ProductionObjectTest : public ::testing::Test {
 protected:
  void SetUp() override { FERRY_BPF_REQUIRE_ROOT(); }
  void TearDown() override {
    ferry_datapath__destroy(skel_);
    ferry_datapath__destroy(second_);
  }
  ferry_datapath* skel_ = nullptr;
  ferry_datapath* second_ = nullptr;
};

TEST_F(ProductionObjectTest, EveryProgramPassesTheVerifier) {
  skel_ = ferry_datapath__open();
  ASSERT_NE(skel_, nullptr);
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel_->obj) ASSERT_EQ(bpf_map__set_pin_path(map, nullptr), 0);
  ASSERT_EQ(ferry_datapath__load(skel_), 0) << "verifier log above";
  for (bpf_program* prog : {skel_->progs.pod_egress, skel_->progs.pod_egress_netkit, skel_->progs.pod_ingress,
                            skel_->progs.to_proxy, skel_->progs.from_proxy}) {
    EXPECT_GE(bpf_program__fd(prog), 0) << bpf_program__name(prog);
    EXPECT_EQ(bpf_program__type(prog), BPF_PROG_TYPE_SCHED_CLS) << bpf_program__name(prog);
  }
}

TEST_F(ProductionObjectTest, EveryProgramPassesTheVerifierInEachInjectionMode) {
  for (ferry_injection_mode mode : {FERRY_INJECT_NONE, FERRY_INJECT_PEER_EGRESS, FERRY_INJECT_INGRESS_REDIRECT}) {
    SCOPED_TRACE(mode);
    ferry_datapath* skel = ferry_datapath__open();
    ASSERT_NE(skel, nullptr);
    skel->rodata->injection_mode = mode;
    bpf_map* map = nullptr;
    bpf_object__for_each_map(map, skel->obj) bpf_map__set_pin_path(map, nullptr);
    EXPECT_EQ(ferry_datapath__load(skel), 0);
    ferry_datapath__destroy(skel);
  }
}

TEST_F(ProductionObjectTest, MapsAreNamedWithFerryPrefixWithinKernelNameLength) {
  skel_ = ferry_datapath__open();
  ASSERT_NE(skel_, nullptr);
  int ferry_maps = 0;
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel_->obj) {
    if (!isFerryMap(map)) continue;
    ++ferry_maps;
    const std::string name = bpf_map__name(map);
    EXPECT_EQ(name.rfind("ferry_", 0), 0u) << name;
    EXPECT_LE(name.size(), 15u) << name << " would be truncated by the kernel";
  }
  EXPECT_EQ(ferry_maps, 5) << "ferry_pods, ferry_pod_netns, ferry_capture, ferry_settings, ferry_counters";
}

// Pins under a bpffs mounted in a private mount namespace, so that nothing
// outside the test sees (or has to clean up) the pins.
class PinningTest : public ProductionObjectTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ProductionObjectTest::SetUp());
    if (IsSkipped()) return;
    ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << std::strerror(errno);
    ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0) << std::strerror(errno);
    char dir[] = "/tmp/ferry-bpf-pins-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    bpffs_ = dir;
    ASSERT_EQ(::mount("bpf", dir, "bpf", 0, nullptr), 0) << "mount bpffs: " << std::strerror(errno);
    mounted_ = true;
    pin_root_ = bpffs_ + "/ferry";
  }

  void TearDown() override {
    ProductionObjectTest::TearDown();
    if (mounted_) ::umount2(bpffs_.c_str(), MNT_DETACH);
    if (!bpffs_.empty()) ::rmdir(bpffs_.c_str());
  }

  ferry_datapath* openPinned() {
    bpf_object_open_opts opts{};
    opts.sz = sizeof(opts);
    opts.pin_root_path = pin_root_.c_str();
    return ferry_datapath__open_opts(&opts);
  }

  std::string bpffs_;
  std::string pin_root_;
  bool mounted_ = false;
};

TEST_F(PinningTest, PinsEveryMapByNameUnderThePinRoot) {
  skel_ = openPinned();
  ASSERT_NE(skel_, nullptr);
  ASSERT_EQ(ferry_datapath__load(skel_), 0);
  for (const char* name : {FERRY_MAP_PODS, FERRY_MAP_CAPTURE, FERRY_MAP_SETTINGS, FERRY_MAP_COUNTERS}) {
    struct stat st {};
    EXPECT_EQ(::stat((pin_root_ + "/" + name).c_str(), &st), 0) << name << " is not pinned";
  }
}

TEST_F(PinningTest, ReloadAdoptsPinnedMapsWithTheirEntries) {
  // A restarted ferryd: its new object must reuse the maps (and so the pods
  // and counters) of the previous one, or existing connections would break.
  skel_ = openPinned();
  ASSERT_NE(skel_, nullptr);
  ASSERT_EQ(ferry_datapath__load(skel_), 0);
  const uint32_t pod_ip = ipv4(10, 77, 1, 11);
  ferry_pod pod{};
  pod.host_ifindex = 7;
  pod.flags = FERRY_POD_STRICT;
  ASSERT_EQ(bpf_map__update_elem(skel_->maps.ferry_pods, &pod_ip, sizeof(pod_ip), &pod, sizeof(pod), BPF_ANY), 0);

  second_ = openPinned();
  ASSERT_NE(second_, nullptr);
  ASSERT_EQ(ferry_datapath__load(second_), 0);
  bpf_map_info first_info{}, second_info{};
  uint32_t len = sizeof(first_info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(bpf_map__fd(skel_->maps.ferry_pods), &first_info, &len), 0);
  len = sizeof(second_info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(bpf_map__fd(second_->maps.ferry_pods), &second_info, &len), 0);
  EXPECT_EQ(first_info.id, second_info.id) << "the reload created a new ferry_pods";
  ferry_pod read{};
  ASSERT_EQ(bpf_map__lookup_elem(second_->maps.ferry_pods, &pod_ip, sizeof(pod_ip), &read, sizeof(read), 0), 0);
  EXPECT_EQ(read.host_ifindex, 7u);
  EXPECT_EQ(read.flags, FERRY_POD_STRICT);
}

}  // namespace
}  // namespace ferry::bpftest
