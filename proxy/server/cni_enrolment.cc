#include "proxy/server/cni_enrolment.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/net.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/datapath/netns.h"
#include "proxy/datapath/pod_sync.h"

namespace ferry::server {
namespace {

cni::Answer error(std::string reason) { return cni::Answer{cni::Verdict::kError, std::move(reason), {}}; }

}  // namespace

absl::StatusOr<std::string> choosePodDevice(const std::vector<std::string>& candidates, const std::string& netns) {
  // The pod's own netns as the node netns knows it: the device's peer must be there.
  std::optional<int32_t> pod_nsid;
  if (!netns.empty()) {
    auto fd = datapath::NetnsFd::open(netns);
    if (!fd.ok()) return absl::FailedPreconditionError(absl::StrCat("the pod's netns ", netns, ": ", fd.status().message()));
    auto id = datapath::netnsIdOf(*fd);
    if (!id.ok()) return absl::FailedPreconditionError(absl::StrCat("the id of netns ", netns, ": ", id.status().message()));
    pod_nsid = *id;
  }
  std::vector<std::string> seen;
  for (const auto& name : candidates) {
    auto link = rtnetlink::linkByName(name);
    if (!link.ok()) {
      seen.push_back(absl::StrCat(name, " (", link.status().message(), ")"));
      continue;
    }
    bool pair = link->kind == "veth" || link->kind == "netkit";
    if (pair && link->peer_netnsid >= 0 && (!pod_nsid || link->peer_netnsid == *pod_nsid)) return name;
    seen.push_back(absl::StrCat(name, " (", link->kind.empty() ? "no kind" : link->kind,
                                pair ? ", its peer is in another netns" : "", ")"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("none of the host-side interfaces the previous plugin reported is a veth or netkit device with its "
                   "peer in the pod's netns: ",
                   seen.empty() ? "it reported none" : absl::StrJoin(seen, ", ")));
}

bool PodEnrolment::sandboxExists(const cni::Request& r) {
  if (!r.netns.empty() && ::access(r.netns.c_str(), F_OK) != 0) return false;
  return choosePodDevice(r.host_interfaces, r.netns).ok();
}

std::optional<cni::Answer> PodEnrolment::add(const cni::Request& r, std::string* pending) {
  const std::string key = cni::podKey(r);
  // The source decides first: a pod outside the mesh starts whatever its sandbox looks like.
  workloads::CniDecision d = source_.cniDecide(store_, key, r.pod_uid);
  switch (d.kind) {
    case workloads::CniDecision::kNotEnrolled:
      return cni::Answer{cni::Verdict::kNotEnrolled, d.reason, {}};
    case workloads::CniDecision::kNotYet:
      *pending = d.reason;
      return std::nullopt;
    case workloads::CniDecision::kRefused:
      return error(d.reason);
    case workloads::CniDecision::kEnrolled:
      break;
  }
  workloads::CniSandbox s;
  s.key = key;
  s.container_id = r.container_id;
  s.pod_uid = r.pod_uid;
  bool v4 = false;
  for (const auto& text : r.ips) {
    auto ip = common::parseIp(text);
    if (!ip.ok()) return error(absl::StrCat("the pod's address '", text, "': ", ip.status().message()));
    s.ips.push_back(common::canonicalIp(*ip));
    v4 = v4 || s.ips.back().is_v4();
  }
  if (s.ips.empty()) {
    return error(absl::StrCat("the previous plugin's result gives the pod no address on ", r.ifname));
  }
  // The datapath steers IPv4 (docs/datapath.md): an IPv6-only pod would not be held.
  if (!v4) return error("the pod has no IPv4 address, and ferry steers IPv4 only");
  auto device = choosePodDevice(r.host_interfaces, r.netns);
  if (!device.ok()) return error(std::string(device.status().message()));
  s.device = *device;
  d = source_.cniAdd(store_, s);
  switch (d.kind) {
    case workloads::CniDecision::kNotEnrolled:
      return cni::Answer{cni::Verdict::kNotEnrolled, d.reason, {}};
    case workloads::CniDecision::kRefused:
      return error(d.reason);
    case workloads::CniDecision::kNotYet:
      *pending = d.reason;
      return std::nullopt;
    case workloads::CniDecision::kEnrolled:
      break;
  }
  // The source published the workload and the registry change enrolled it (or failed to:
  // a failed enrolment is retried here rather than at the next workloads poll).
  for (const auto& ip : s.ips) {
    if (!ip.is_v4()) continue;
    uint32_t k = datapath::ipv4Key(ip);
    const std::string* on = datapath_.enrolledDevice(k);
    if (on == nullptr || *on != s.device) {
      datapath_.retryFailed(*store_.current());
      on = datapath_.enrolledDevice(k);
    }
    if (on == nullptr || *on != s.device) {
      std::string why = datapath_.enrolmentFailure(k);
      *pending = absl::StrCat("its programs are not attached to ", s.device, " yet",
                              why.empty() ? "" : absl::StrCat(": ", why));
      return std::nullopt;
    }
  }
  return cni::Answer{cni::Verdict::kEnrolled, {}, s.device};
}

cni::Answer PodEnrolment::del(const cni::Request& r) {
  source_.cniDel(store_, cni::podKey(r), r.container_id);
  return cni::Answer{cni::Verdict::kReleased, {}, {}};
}

cni::Answer PodEnrolment::check(const cni::Request& r) {
  std::string key = cni::podKey(r);
  auto registry = store_.current();
  std::string device;
  for (const auto& text : r.ips) {
    auto ip = common::parseIp(text);
    if (!ip.ok() || !ip->is_v4()) continue;
    const workloads::Workload* w = registry->findLocalByIp(common::canonicalIp(*ip));
    if (w == nullptr || w->displayName() != key) {
      return cni::Answer{cni::Verdict::kNotEnrolled, "not a mesh workload of this node", {}};
    }
    uint32_t k = datapath::ipv4Key(*ip);
    const std::string* on = datapath_.enrolledDevice(k);
    if (on == nullptr) {
      std::string why = datapath_.enrolmentFailure(k);
      return error(absl::StrCat(key, " is in the mesh and its programs are not attached",
                                why.empty() ? "" : absl::StrCat(": ", why)));
    }
    device = *on;
  }
  if (device.empty()) return cni::Answer{cni::Verdict::kNotEnrolled, "no IPv4 address to check", {}};
  return cni::Answer{cni::Verdict::kEnrolled, {}, device};
}

}  // namespace ferry::server
