#include "tests/bpf/datapath_fixture.h"

#include <arpa/inet.h>
#include <linux/pkt_cls.h>

namespace ferry::bpftest {

void DatapathTest::SetUp() {
  FERRY_BPF_REQUIRE_ROOT();
  const std::string err = enterFreshNetns();
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_NO_FATAL_FAILURE(load({}));
}

void DatapathTest::TearDown() {
  ferry_datapath_test__destroy(skel_);
  skel_ = nullptr;
}

void DatapathTest::defaultConfig(Config& config) {
  config.proxy_netns_id = static_cast<uint64_t>(kTestNsid);
  config.proxy_host_ifindex = kProxyHostIfindex;
  config.proxy_ipv4 = kProxyIp;
}

void DatapathTest::reload(const std::function<void(Config&)>& configure) {
  ferry_datapath_test__destroy(skel_);
  skel_ = nullptr;
  load(configure);
}

void DatapathTest::load(const std::function<void(Config&)>& configure) {
  skel_ = ferry_datapath_test__open();
  ASSERT_NE(skel_, nullptr) << "opening the test skeleton failed: errno " << errno;
  defaultConfig(*skel_->rodata);
  if (configure) configure(*skel_->rodata);
  // Each test owns its maps: nothing is pinned (pinning has its own test).
  bpf_map* map = nullptr;
  bpf_object__for_each_map(map, skel_->obj) ASSERT_EQ(bpf_map__set_pin_path(map, nullptr), 0);
  ASSERT_EQ(ferry_datapath_test__load(skel_), 0) << "the verifier refused the test build (log above)";
}

void DatapathTest::enroll(const TestPod& pod, uint32_t flags) {
  ferry_pod value{};
  value.host_ifindex = pod.host_ifindex;
  std::copy(pod.pod_mac.begin(), pod.pod_mac.end(), value.pod_mac);
  std::copy(pod.host_mac.begin(), pod.host_mac.end(), value.host_mac);
  value.flags = flags;
  ASSERT_EQ(bpf_map__update_elem(skel_->maps.ferry_pods, &pod.ip, sizeof(pod.ip), &value, sizeof(value), BPF_ANY),
            0);
  // The pod's sockets live in the test netns too, which the lookups reach by kTestNsid.
  const ferry_pod_netns ns{static_cast<uint32_t>(kTestNsid)};
  ASSERT_EQ(bpf_map__update_elem(skel_->maps.ferry_pod_netns, &pod.ip, sizeof(pod.ip), &ns, sizeof(ns), BPF_ANY), 0);
}

void DatapathTest::addCaptureDestination(uint32_t ip) {
  const ferry_capture_dst value{FERRY_DST_HBONE};
  ASSERT_EQ(bpf_map__update_elem(skel_->maps.ferry_capture, &ip, sizeof(ip), &value, sizeof(value), BPF_ANY), 0);
}

void DatapathTest::setCaptureAll(bool on) {
  const uint32_t zero = 0;
  const ferry_settings value{on ? FERRY_SETTING_CAPTURE_ALL : 0u, 0};
  ASSERT_EQ(bpf_map__update_elem(skel_->maps.ferry_settings, &zero, sizeof(zero), &value, sizeof(value), BPF_ANY),
            0);
}

RunResult DatapathTest::run(bpf_program* prog, const Bytes& frame) {
  RunResult result{};
  Bytes out(frame.size() + 256);
  __sk_buff ctx_in{};
  __sk_buff ctx_out{};
  bpf_test_run_opts opts{};
  opts.sz = sizeof(opts);
  opts.data_in = frame.data();
  opts.data_size_in = static_cast<uint32_t>(frame.size());
  opts.data_out = out.data();
  opts.data_size_out = static_cast<uint32_t>(out.size());
  opts.ctx_in = &ctx_in;
  opts.ctx_size_in = sizeof(ctx_in);
  opts.ctx_out = &ctx_out;
  opts.ctx_size_out = sizeof(ctx_out);
  opts.repeat = 1;
  const int err = bpf_prog_test_run_opts(bpf_program__fd(prog), &opts);
  EXPECT_EQ(err, 0) << "BPF_PROG_TEST_RUN of " << bpf_program__name(prog) << " failed: " << std::strerror(-err);
  out.resize(opts.data_size_out);
  result.verdict = static_cast<int32_t>(opts.retval);
  result.data = std::move(out);
  result.mark = ctx_out.mark;
  return result;
}

void DatapathTest::expectPassedUnchanged(ferry_prog prog, const RunResult& result, const Bytes& frame,
                                         ferry_reason reason) {
  EXPECT_EQ(result.verdict, kPass) << "pass must be TC_ACT_UNSPEC (TCX_NEXT), never TC_ACT_OK";
  EXPECT_EQ(result.data, frame);
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT_PEER).empty());
  EXPECT_TRUE(calls(FERRY_TEST_CALL_REDIRECT).empty());
  EXPECT_EQ(packets(prog, FERRY_VERDICT_PASS, reason), 1u);
}

std::vector<ferry_test_call> DatapathTest::calls() const {
  std::vector<ferry_test_call> log;
  const uint32_t n = std::min<uint32_t>(skel_->bss->ferry_test_ncalls, FERRY_TEST_MAX_CALLS);
  EXPECT_LE(skel_->bss->ferry_test_ncalls, static_cast<uint32_t>(FERRY_TEST_MAX_CALLS))
      << "the call log overflowed; the test made too many calls to see them all";
  for (uint32_t slot = 0; slot < n; ++slot) {
    ferry_test_call call{};
    EXPECT_EQ(bpf_map__lookup_elem(skel_->maps.ferry_test_calls, &slot, sizeof(slot), &call, sizeof(call), 0), 0);
    log.push_back(call);
  }
  return log;
}

std::vector<ferry_test_call> DatapathTest::calls(ferry_test_call_kind kind) const {
  std::vector<ferry_test_call> of_kind;
  for (const ferry_test_call& call : calls())
    if (call.kind == static_cast<uint32_t>(kind)) of_kind.push_back(call);
  return of_kind;
}

ferry_counter DatapathTest::counter(ferry_prog prog, ferry_verdict verdict, ferry_reason reason) const {
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<ferry_counter> per_cpu(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
  const uint32_t key = ferry_counter_index(prog, verdict, reason);
  ferry_counter sum{};
  if (bpf_map__lookup_elem(skel_->maps.ferry_counters, &key, sizeof(key), per_cpu.data(),
                           per_cpu.size() * sizeof(ferry_counter), 0) != 0) {
    ADD_FAILURE() << "reading ferry_counters[" << key << "] failed";
    return sum;
  }
  for (const ferry_counter& c : per_cpu) {
    sum.packets += c.packets;
    sum.bytes += c.bytes;
  }
  return sum;
}

Path fromPod(const TestPod& pod, uint32_t daddr) { return Path{pod.pod_mac, pod.host_mac, pod.ip, daddr}; }

Path toPod(uint32_t saddr, const TestPod& pod) { return Path{pod.host_mac, pod.pod_mac, saddr, pod.ip}; }

Path between(uint32_t saddr, uint32_t daddr) { return Path{kProxyMac, kNodeMac, saddr, daddr}; }

}  // namespace ferry::bpftest
