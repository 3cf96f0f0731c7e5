#include "proxy/datapath/pod_sync.h"

#include <arpa/inet.h>

#include "bpf/shared/datapath.h"
#include "proxy/common/log.h"

namespace ferry::datapath {

uint32_t podFlags(const workloads::Workload& w) {
  return w.tls_mode == workloads::TlsMode::kStrict ? FERRY_POD_STRICT : 0u;
}

uint32_t ipv4Key(const common::IpAddress& ip) { return htonl(ip.to_v4().to_uint()); }

namespace {

common::IpAddress fromKey(uint32_t key) { return boost::asio::ip::address_v4(ntohl(key)); }

template <typename Visit>
void forEachIpv4(const workloads::Workload& w, Visit visit) {
  for (const auto& ip : w.ips) {
    if (ip.is_v4()) visit(ipv4Key(ip));
  }
}

}  // namespace

void PodSync::reconcile(uint32_t ip, const workloads::Registry& registry) {
  const workloads::Workload* w = registry.findByIp(fromKey(ip));
  bool want_capture = w != nullptr && w->hbone;
  if (want_capture != capture_.contains(ip)) {
    kernel_.setCapture(ip, want_capture);
    if (want_capture) {
      capture_.insert(ip);
    } else {
      capture_.erase(ip);
    }
  }
  bool want_pod = w != nullptr && registry.isLocal(*w);
  absl::StatusOr<std::string> device = absl::NotFoundError("not local");
  if (want_pod) device = kernel_.deviceOf(ip, *w);
  auto it = pods_.find(ip);
  // Leave first: a pod that left (or moved to another device) must not keep being steered.
  // A device that cannot be looked up right now leaves an enrolled pod as it is.
  if (it != pods_.end() && (!want_pod || (device.ok() && it->second.ifname != *device))) {
    kernel_.release(ip);
    pods_.erase(it);
    it = pods_.end();
  }
  if (!want_pod) {
    // A pod that leaves while its enrolment kept failing may have left something behind
    // in the kernel (a neighbour entry asked for while looking for its device).
    if (failed_.erase(ip) > 0) kernel_.release(ip);
    return;
  }
  uint32_t flags = flagsOf(*w);
  if (it == pods_.end()) {
    absl::Status st = device.ok() ? kernel_.enroll(ip, *w, *device, flags) : device.status();
    if (!st.ok()) {
      if (failed_.insert_or_assign(ip, std::string(st.message())).second) {
        FERRY_LOG(kWarn, "datapath: cannot enroll %s (retried every workloads_poll): %s", w->displayName(),
                  st.message());
      }
      return;
    }
    if (failed_.erase(ip) > 0) FERRY_LOG(kInfo, "datapath: enrolled %s after earlier failures", w->displayName());
    pods_.emplace(ip, Enrolled{*device, flags});
    return;
  }
  setFlags(ip, it->second, *w, flags);
}

uint32_t PodSync::flagsOf(const workloads::Workload& w) const { return flags_of_ ? flags_of_(w) : podFlags(w); }

void PodSync::setFlags(uint32_t ip, Enrolled& pod, const workloads::Workload& w, uint32_t flags) {
  if (pod.flags == flags) return;
  if (auto st = kernel_.setFlags(ip, flags); !st.ok()) {
    FERRY_LOG(kWarn, "datapath: cannot change the mode of %s: %s", w.displayName(), st.message());
    return;
  }
  pod.flags = flags;
  FERRY_LOG(kInfo, "datapath: %s: new plaintext connections now %s", w.displayName(),
            (flags & FERRY_POD_STRICT) ? "go through ferryd (15006)" : "pass straight to the pod");
}

void PodSync::syncAll(const workloads::Registry& registry, const std::vector<uint32_t>& capture_in_kernel) {
  absl::flat_hash_set<uint32_t> touched(capture_in_kernel.begin(), capture_in_kernel.end());
  // What the kernel holds is what reconcile compares with.
  capture_.insert(capture_in_kernel.begin(), capture_in_kernel.end());
  for (const auto& [ip, pod] : pods_) touched.insert(ip);
  registry.forEach([&](const workloads::Workload& w) { forEachIpv4(w, [&](uint32_t ip) { touched.insert(ip); }); });
  for (uint32_t ip : touched) reconcile(ip, registry);
}

void PodSync::apply(const workloads::Registry& after, const workloads::Delta& delta) {
  absl::flat_hash_set<uint32_t> touched;
  for (const auto& change : delta.changes) {
    for (const auto* w : {change.before.get(), change.after.get()}) {
      if (w != nullptr) forEachIpv4(*w, [&](uint32_t ip) { touched.insert(ip); });
    }
  }
  for (uint32_t ip : touched) reconcile(ip, after);
}

void PodSync::refreshFlags(const workloads::Registry& current) {
  // Only the flags: whether a pod is enrolled, and on which device, is the registry's
  // business (apply), and needs no device lookup per policy change.
  for (auto& [ip, pod] : pods_) {
    const workloads::Workload* w = current.findByIp(fromKey(ip));
    if (w != nullptr && current.isLocal(*w)) setFlags(ip, pod, *w, flagsOf(*w));
  }
}

void PodSync::retryFailed(const workloads::Registry& current) {
  if (failed_.empty()) return;
  std::vector<uint32_t> again;
  for (const auto& [ip, _] : failed_) again.push_back(ip);
  for (uint32_t ip : again) reconcile(ip, current);
}

}  // namespace ferry::datapath
