#include "proxy/datapath/datapath.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <ifaddrs.h>
#include <linux/magic.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "bpf/shared/datapath.h"
#include "ferry_datapath.skel.h"
#include "proxy/common/log.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/telemetry/metrics.h"
#include "proxy/common/unique_fd.h"

namespace ferry::datapath {
namespace {

int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG && !common::logEnabled(common::LogLevel::kTrace)) return 0;
  char buf[1024];
  int n = vsnprintf(buf, sizeof(buf), format, args);
  std::string line(buf, n > 0 ? std::min<size_t>(n, sizeof(buf) - 1) : 0);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  common::logLine(level == LIBBPF_WARN ? common::LogLevel::kWarn : common::LogLevel::kDebug,
                  absl::StrCat("libbpf: ", line));
  return n;
}

absl::StatusOr<uint32_t> interfaceIpv4(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return absl::InternalError(absl::StrCat("getifaddrs: ", strerror(errno)));
  uint32_t found = 0;
  for (auto* a = list; a; a = a->ifa_next) {
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && ifname == a->ifa_name) {
      found = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
      break;
    }
  }
  freeifaddrs(list);
  if (found == 0) return absl::NotFoundError(absl::StrCat("no IPv4 address on ", ifname));
  return found;
}

absl::Status ensureBpffsDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
  struct statfs st {};
  if (statfs(dir.c_str(), &st) != 0 || st.f_type != BPF_FS_MAGIC) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is not on a bpffs; mount one (mount -t bpf bpf <dir>) where `ip netns exec` does not "
             "hide it (it remounts /sys)"));
  }
  return absl::OkStatus();
}

// libbpf refuses to adopt a pinned map whose size differs from the program's. The capture
// map holds only what ferryd writes from the registry on every start, so a pin of another
// size (left by a ferryd built with another FERRY_MAX_CAPTURE) is removed and re-created;
// programs still attached keep the old map until their links point at the new programs.
void dropResizedCapturePin(const std::string& pin_dir) {
  std::string pin = absl::StrCat(pin_dir, "/", FERRY_MAP_CAPTURE);
  common::UniqueFd fd(bpf_obj_get(pin.c_str()));
  if (!fd) return;
  bpf_map_info info{};
  uint32_t length = sizeof(info);
  bool resized = bpf_obj_get_info_by_fd(fd.get(), &info, &length) == 0 && info.max_entries != FERRY_MAX_CAPTURE;
  fd.reset();
  if (resized && ::unlink(pin.c_str()) == 0) {
    FERRY_LOG(kInfo, "datapath: %s held %d entries at most, this ferryd needs %d: re-created", pin,
              info.max_entries, FERRY_MAX_CAPTURE);
  }
}

const char* reasonName(uint32_t reason) {
  switch (reason) {
#define FERRY_X(name, value, text) \
  case value:                      \
    return #name;
    FERRY_REASONS(FERRY_X)
#undef FERRY_X
  }
  return "UNKNOWN";
}

// The proxy netns's side of the proxy link, as the BPF programs need it.
struct ProxyInterface {
  uint32_t ip = 0;  // IPv4, network order
  int ifindex = 0;  // in the proxy netns
};

absl::StatusOr<ProxyInterface> proxyInterface(const NetnsFd& proxy_netns, const std::string& name) {
  auto in_proxy = ScopedNetns::enter(proxy_netns);
  if (!in_proxy.ok()) return in_proxy.status();
  auto ip = interfaceIpv4(name);
  if (!ip.ok()) return absl::Status(ip.status().code(), absl::StrCat("datapath.proxy_interface: ", ip.status().message()));
  return ProxyInterface{*ip, static_cast<int>(if_nametoindex(name.c_str()))};
}

// The programs' load-time constants (.rodata): how to inject, where the proxy is, ferryd's
// mark and listening ports.
void setLoadTimeConstants(ferry_datapath& skel, const config::Config& config, const InjectionChoice& injection,
                          uint64_t proxy_netns_id, uint32_t proxy_host_ifindex, uint32_t proxy_ip) {
  const auto& cfg = config.datapath;
  auto* ro = skel.rodata;
  switch (injection.mode) {
    case config::Injection::kPeerEgress: ro->injection_mode = FERRY_INJECT_PEER_EGRESS; break;
    case config::Injection::kIngressRedirect: ro->injection_mode = FERRY_INJECT_INGRESS_REDIRECT; break;
    default: ro->injection_mode = FERRY_INJECT_NONE; break;
  }
  ro->egress_flag = cfg.egress_flag;
  ro->proxy_netns_id = proxy_netns_id;
  ro->proxy_host_ifindex = proxy_host_ifindex;
  ro->proxy_ipv4 = proxy_ip;
  ro->proxy_mark = cfg.mark;
  ro->exempt_node = cfg.exempt_node ? 1 : 0;
  auto firstPort = [](const std::vector<common::HostPort>& v, uint16_t dflt) {
    return v.empty() ? dflt : v.front().port;
  };
  ro->port_outbound = firstPort(config.listen.outbound, FERRY_PORT_OUTBOUND);
  ro->port_inbound_plain = firstPort(config.listen.inbound_plaintext, FERRY_PORT_INBOUND_PLAIN);
  ro->port_hbone = firstPort(config.listen.hbone, FERRY_PORT_HBONE);
}

// The settings map's one entry, as the programs start with it.
void writeSettings(ferry_datapath& skel, const config::Datapath& cfg, bool taking_over) {
  uint32_t zero = 0;
  ferry_settings settings{};
  if (cfg.capture == config::Capture::kAll) settings.flags |= FERRY_SETTING_CAPTURE_ALL;
  // Paused until the server listens (setHbonePaused(false)): a peer's SYN meanwhile is
  // dropped and retransmitted, not reset (bpf/to_proxy.bpf.c). Taken over, it listens.
  if (!taking_over) settings.flags |= FERRY_SETTING_HBONE_PAUSED;
  bpf_map__update_elem(skel.maps.ferry_settings, &zero, sizeof(zero), &settings,
                       sizeof(settings), BPF_ANY);
}

// A ferryd that failed closed before left its links pinned; failing open, nothing may keep
// steering pods once this ferryd is gone: removing the pins detaches them.
void removePinnedLinks(const std::string& pin_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(pin_dir, ec)) {
    auto name = entry.path().filename().string();
    if (name.rfind("link_", 0) == 0 && ::unlink(entry.path().c_str()) == 0) {
      FERRY_LOG(kInfo, "datapath: failure_mode open: removed pinned link %s", name);
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Datapath>> Datapath::create(const config::Config& config,
                                                           const NetnsFd& proxy_netns, bool taking_over) {
  libbpf_set_print(libbpfPrint);
  std::unique_ptr<Datapath> dp(new Datapath());
  dp->cfg_ = config.datapath;
  const auto& cfg = dp->cfg_;
  dp->features_ = probeKernel(cfg.egress_flag);
  dp->injection_ = chooseInjection(dp->features_, cfg.injection, cfg.egress_flag);
  FERRY_LOG(kInfo, "datapath: kernel %s", describe(dp->features_));
  FERRY_LOG(kInfo, "datapath: injection %s (%s)", injectionName(dp->injection_.mode), dp->injection_.why);

  dp->pin_dir_ = cfg.bpffs;
  if (auto st = ensureBpffsDir(dp->pin_dir_); !st.ok()) return st;

  auto host_proxy = rtnetlink::linkByName(cfg.host_proxy_interface);
  if (!host_proxy.ok()) return absl::Status(host_proxy.status().code(),
                                            absl::StrCat("datapath.host_proxy_interface: ", host_proxy.status().message()));
  auto nsid = netnsIdOf(proxy_netns);
  if (!nsid.ok()) return nsid.status();
  auto proxy = proxyInterface(proxy_netns, cfg.proxy_interface);
  if (!proxy.ok()) return proxy.status();

  dropResizedCapturePin(dp->pin_dir_);
  LIBBPF_OPTS(bpf_object_open_opts, open_opts, .pin_root_path = dp->pin_dir_.c_str());
  dp->skel_ = ferry_datapath__open_opts(&open_opts);
  if (dp->skel_ == nullptr) {
    return absl::InternalError(absl::StrCat("opening the BPF programs: ", strerror(errno)));
  }
  setLoadTimeConstants(*dp->skel_, config, dp->injection_, static_cast<uint64_t>(*nsid),
                       static_cast<uint32_t>(host_proxy->ifindex), proxy->ip);
  if (int rc = ferry_datapath__load(dp->skel_); rc != 0) {
    return absl::InternalError(absl::StrCat(
        "loading the BPF programs (verifier or pinned-map mismatch; see libbpf's messages above): ",
        strerror(-rc)));
  }
  writeSettings(*dp->skel_, cfg, taking_over);

  if (cfg.failure_mode == config::FailureMode::kOpen && !taking_over) removePinnedLinks(dp->pin_dir_);
  if (auto st = dp->attachProxyPrograms(proxy_netns, host_proxy->ifindex, proxy->ifindex); !st.ok()) return st;
  FERRY_LOG(kInfo, "datapath: attached with %s; maps pinned under %s",
            dp->features_.tcx ? "TCX (first)" : "cls_bpf (priority 1)", dp->pin_dir_);
  return dp;
}

absl::Status Datapath::attachProxyPrograms(const NetnsFd& proxy_netns, int host_proxy_ifindex, int proxy_ifindex) {
  bool tcx = features_.tcx;
  // Links are pinned when failing closed: if ferryd dies, pods stay steered into the
  // (now empty) proxy netns, so mesh traffic stops instead of leaving in plaintext.
  bool pin_links = tcx && cfg_.failure_mode == config::FailureMode::kClosed;
  auto pinFor = [&](const std::string& name) {
    return pin_links ? absl::StrCat(pin_dir_, "/link_", name) : std::string();
  };
  auto from = Attachment::attach(bpf_program__fd(skel_->progs.from_proxy), host_proxy_ifindex,
                                 Hook::kIngress, tcx, absl::StrCat("from_proxy on ", cfg_.host_proxy_interface),
                                 pinFor(cfg_.host_proxy_interface + "_in"));
  if (!from.ok()) return from.status();
  from_proxy_ = std::make_unique<Attachment>(std::move(*from));
  auto in_proxy = ScopedNetns::enter(proxy_netns);
  if (!in_proxy.ok()) return in_proxy.status();
  // The pin path is on the bpffs, which is the same mount in both netns.
  auto to = Attachment::attach(bpf_program__fd(skel_->progs.to_proxy), proxy_ifindex, Hook::kIngress,
                               tcx, absl::StrCat("to_proxy on ", cfg_.proxy_interface, " (proxy netns)"),
                               pinFor("proxy_" + cfg_.proxy_interface + "_in"));
  if (!to.ok()) return to.status();
  to_proxy_ = std::make_unique<Attachment>(std::move(*to));
  return absl::OkStatus();
}

Datapath::~Datapath() {
  // Handed over: the next ferryd steers with these very links and entries.
  if (!handed_over_) {
    while (!managed_neighbours_.empty()) forgetNeighbour(managed_neighbours_.begin()->first);
  }
  bool keep = handed_over_ || (cfg_.failure_mode == config::FailureMode::kClosed && !remove_everything_);
  for (auto& [ip, pod] : pods_) {
    if (keep) {
      pod.egress_side.release();
      pod.ingress_side.release();
    }
  }
  if (keep && from_proxy_) from_proxy_->release();
  if (keep && to_proxy_) to_proxy_->release();
  pods_.clear();
  from_proxy_.reset();
  to_proxy_.reset();
  if (skel_) ferry_datapath__destroy(skel_);
  // The attachments above detached and unpinned their links; the maps' pins and a link an
  // earlier ferryd pinned for a pod this one never saw go with the directory.
  if (remove_everything_) removePinDir();
}

void Datapath::removePinDir() {
  std::error_code ec;
  size_t removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(pin_dir_, ec)) {
    auto name = entry.path().filename().string();
    // Only what a ferryd pins here: its maps (ferry_*, bpf/lib/maps.h) and links (link_*).
    if ((name.rfind("link_", 0) == 0 || name.rfind("ferry_", 0) == 0) && ::unlink(entry.path().c_str()) == 0) ++removed;
  }
  if (::rmdir(pin_dir_.c_str()) == 0) {
    FERRY_LOG(kInfo, "datapath: uninstall: removed %s and its %d pins", pin_dir_, removed);
  } else {
    // A bpffs mounted on the directory itself (the lab), or pins of something else.
    FERRY_LOG(kInfo, "datapath: uninstall: removed ferry's %d pins from %s; the directory stays: %s", removed, pin_dir_,
              strerror(errno));
  }
}

void Datapath::forgetNeighbour(uint32_t ip) {
  auto it = managed_neighbours_.find(ip);
  if (it == managed_neighbours_.end()) return;
  (void)rtnetlink::deleteNeighbour(ip, it->second);  // gone with its bridge already: nothing to do
  managed_neighbours_.erase(it);
}

absl::StatusOr<std::string> Datapath::deviceOf(uint32_t ip, const workloads::Workload& w) {
  if (!w.host_interface.empty()) return w.host_interface;
  int managed_bridge = 0;
  auto found = rtnetlink::findPodInterface(ip, &managed_bridge);
  if (managed_bridge != 0) managed_neighbours_[ip] = managed_bridge;
  if (!found.ok()) return found.status();
  auto [it, fresh] = found_how_.try_emplace(ip, found->how);
  if (fresh || it->second != found->how) {
    it->second = found->how;
    FERRY_LOG(kInfo, "datapath: %s is on %s (found by %s)", w.displayName(), found->link.name, found->how);
  }
  return found->link.name;
}

absl::Status Datapath::enroll(uint32_t ip, const workloads::Workload& w, const std::string& device, uint32_t flags) {
  Pod pod;
  auto host = rtnetlink::linkByName(device);
  if (!host.ok()) return host.status();
  ferry_pod value{};
  value.host_ifindex = static_cast<uint32_t>(host->ifindex);
  std::memcpy(value.host_mac, host->mac.data(), 6);
  if (host->peer_netnsid >= 0) {
    auto peer = rtnetlink::linkByIndexInNetns(host->peer_ifindex, host->peer_netnsid);
    if (peer.ok()) std::memcpy(value.pod_mac, peer->mac.data(), 6);
  }
  value.flags = flags;
  pod.flags = flags;
  // The maps first: the programs read them from their first packet on (a pod without its
  // entry would be neither injected into nor told apart as a server).
  auto forget = [&] { forgetPodEntries(ip); };
  if (bpf_map__update_elem(skel_->maps.ferry_pods, &ip, sizeof(ip), &value, sizeof(value), BPF_ANY) != 0) {
    return absl::InternalError(absl::StrCat("ferry_pods update: ", strerror(errno)));
  }
  // Without it pod_egress cannot tell a flow the pod serves from a flow of its own that
  // the mesh lost, and resets both (fail closed): say so rather than fail enrolment.
  if (host->peer_netnsid >= 0) {
    const ferry_pod_netns ns{static_cast<uint32_t>(host->peer_netnsid)};
    if (bpf_map__update_elem(skel_->maps.ferry_pod_netns, &ip, sizeof(ip), &ns, sizeof(ns), BPF_ANY) != 0) {
      auto err = absl::InternalError(absl::StrCat("ferry_pod_netns update: ", strerror(errno)));
      forget();
      return err;
    }
  } else {
    FERRY_LOG(kWarn,
              "datapath: %s: the node netns has no id for the pod's netns; plaintext clients that reach "
              "the pod directly will be reset",
              device);
  }
  bool tcx = features_.tcx;
  bool pin = tcx && cfg_.failure_mode == config::FailureMode::kClosed;
  pod.ifname = device;
  pod.ifindex = host->ifindex;
  pod.netkit = host->isNetkit();
  auto eg = pod.netkit
                ? Attachment::attach(bpf_program__fd(skel_->progs.pod_egress_netkit), host->ifindex,
                                     Hook::kNetkitPeer, tcx,
                                     absl::StrCat("pod_egress_netkit on ", device, " (netkit peer)"),
                                     pin ? absl::StrCat(pin_dir_, "/link_", device, "_nkpeer") : "")
                : Attachment::attach(bpf_program__fd(skel_->progs.pod_egress), host->ifindex, Hook::kIngress, tcx,
                                     absl::StrCat("pod_egress on ", device),
                                     pin ? absl::StrCat(pin_dir_, "/link_", device, "_in") : "");
  if (!eg.ok()) {
    forget();
    return eg.status();
  }
  auto in = Attachment::attach(bpf_program__fd(skel_->progs.pod_ingress), host->ifindex, Hook::kEgress, tcx,
                               absl::StrCat("pod_ingress on ", device),
                               pin ? absl::StrCat(pin_dir_, "/link_", device, "_eg") : "");
  if (!in.ok()) {
    forget();
    return in.status();
  }
  pod.egress_side = std::move(*eg);
  pod.ingress_side = std::move(*in);
  if (pod.netkit && injection_.mode == config::Injection::kIngressRedirect) {
    FERRY_LOG(kWarn,
              "datapath: %s is netkit and injection is ingress-redirect: ferryd's upstream packets enter "
              "%s at the node side and skip the pod's netkit peer programs (its CNI egress policy); "
              "peer-egress needs a kernel whose bpf_redirect_peer accepts the egress flag",
              device, device);
  }
  FERRY_LOG(kInfo, "datapath: enrolled %s (%s %s ifindex %d, pod mac %s)", w.displayName(),
            pod.netkit ? "netkit" : "veth", device, host->ifindex, rtnetlink::formatMac(rtnetlink::MacAddress{value.pod_mac[0], value.pod_mac[1], value.pod_mac[2],
                                                value.pod_mac[3], value.pod_mac[4], value.pod_mac[5]}));
  pods_.insert_or_assign(ip, std::move(pod));
  return absl::OkStatus();
}

void Datapath::release(uint32_t ip) {
  auto it = pods_.find(ip);
  forgetPodEntries(ip);
  found_how_.erase(ip);
  forgetNeighbour(ip);
  if (it == pods_.end()) return;
  FERRY_LOG(kInfo, "datapath: released %s", it->second.ifname);
  pods_.erase(it);  // the Attachments detach
}

const std::string* Datapath::enrolledDevice(uint32_t ip) const {
  auto it = pods_.find(ip);
  return it == pods_.end() ? nullptr : &it->second.ifname;
}

void Datapath::forgetPodEntries(uint32_t ip) {
  bpf_map__delete_elem(skel_->maps.ferry_pods, &ip, sizeof(ip), 0);
  bpf_map__delete_elem(skel_->maps.ferry_pod_netns, &ip, sizeof(ip), 0);
}

void Datapath::releaseStale(const workloads::Registry& registry) {
  if (handed_over_) return;
  // What stays: every enrolled pod's device, and, for a local workload whose enrolment is
  // failing right now (its device not found yet), the entry and links an earlier ferryd
  // made for it: it stays steered until it is enrolled again.
  absl::flat_hash_set<std::string> devices{cfg_.host_proxy_interface};
  for (const auto& [ip, pod] : pods_) devices.insert(pod.ifname);
  absl::flat_hash_set<uint32_t> local_ips;
  for (const auto& w : registry.local()) {
    for (const auto& ip : w->ips) {
      if (ip.is_v4()) local_ips.insert(ipv4Key(ip));
    }
  }
  std::vector<uint32_t> stale;
  uint32_t cur = 0, next = 0;
  const void* prev = nullptr;
  while (bpf_map__get_next_key(skel_->maps.ferry_pods, prev, &next, sizeof(next)) == 0) {
    if (pods_.contains(next)) {
      // enrolled: kept
    } else if (local_ips.contains(next)) {
      ferry_pod value{};
      char name[IF_NAMESIZE] = {};
      if (bpf_map__lookup_elem(skel_->maps.ferry_pods, &next, sizeof(next), &value, sizeof(value), 0) == 0 &&
          if_indextoname(value.host_ifindex, name) != nullptr) {
        devices.insert(name);
      }
    } else {
      stale.push_back(next);
    }
    cur = next;
    prev = &cur;
  }
  for (uint32_t ip : stale) forgetPodEntries(ip);
  size_t pins = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(pin_dir_, ec)) {
    // Pod links are link_<device>_{in,eg,nkpeer} (enroll()); the proxy's own are kept.
    std::string name = entry.path().filename().string();
    if (name.rfind("link_", 0) != 0 || name.rfind("link_proxy_", 0) == 0) continue;
    size_t cut = name.rfind('_');
    if (cut <= 5) continue;
    if (devices.contains(name.substr(5, cut - 5))) continue;
    if (::unlink(entry.path().c_str()) == 0) {
      ++pins;
      FERRY_LOG(kInfo, "datapath: released %s, left by an earlier ferryd for a pod no longer enrolled", name);
    }
  }
  if (pins + stale.size() > 0) {
    FERRY_LOG(kInfo, "datapath: start-up reconciliation released %d pinned links and %d pod entries", pins, stale.size());
  }
}

void Datapath::setPlaintextCapture(std::function<bool(const workloads::Workload&)> captured) {
  sync_.setFlagsOf([captured = std::move(captured)](const workloads::Workload& w) {
    return captured(w) ? FERRY_POD_STRICT : 0u;
  });
}

void Datapath::applyServices(const std::vector<workloads::ServiceChange>& changes) {
  if (handed_over_) return;
  for (const auto& change : changes) {
    if (change.before == change.after || !change.port.first.is_v4()) continue;
    uint32_t ip = ipv4Key(change.port.first);
    if (change.after) {
      if (service_vips_[ip]++ == 0) setCapture(ip, true);
    } else if (auto it = service_vips_.find(ip); it != service_vips_.end() && --it->second == 0) {
      service_vips_.erase(it);
      setCapture(ip, false);
    }
  }
}

void Datapath::setCapture(uint32_t ip, bool capture) {
  auto* map = skel_->maps.ferry_capture;
  if (!capture) {
    bpf_map__delete_elem(map, &ip, sizeof(ip), 0);
    return;
  }
  ferry_capture_dst value{FERRY_DST_HBONE};
  if (bpf_map__update_elem(map, &ip, sizeof(ip), &value, sizeof(value), BPF_ANY) != 0) {
    // Full (FERRY_MAX_CAPTURE): SYNs to this destination are not captured and leave in
    // plaintext to a peer that expects HBONE, which its ferryd refuses (STRICT) or passes.
    FERRY_LOG(kWarn, "datapath: ferry_capture update for %s: %s", boost::asio::ip::address_v4(ntohl(ip)).to_string(),
              strerror(errno));
  }
}

absl::Status Datapath::setFlags(uint32_t ip, uint32_t flags) {
  // The entry's other fields (device, MACs) stay as enrolment wrote them: read them back
  // rather than keeping a second copy that could drift from the map.
  ferry_pod value{};
  if (bpf_map__lookup_elem(skel_->maps.ferry_pods, &ip, sizeof(ip), &value, sizeof(value), 0) != 0) {
    return absl::InternalError(absl::StrCat("ferry_pods lookup: ", strerror(errno)));
  }
  value.flags = flags;
  if (bpf_map__update_elem(skel_->maps.ferry_pods, &ip, sizeof(ip), &value, sizeof(value), BPF_EXIST) != 0) {
    return absl::InternalError(absl::StrCat("ferry_pods update: ", strerror(errno)));
  }
  if (auto it = pods_.find(ip); it != pods_.end()) it->second.flags = flags;
  return absl::OkStatus();
}

absl::Status Datapath::sync(const workloads::Registry& registry) {
  if (handed_over_) return absl::OkStatus();
  // The capture map may be a pin a previous ferryd filled: read what it holds once, so that
  // entries no workload wants any more are removed.
  auto* map = skel_->maps.ferry_capture;
  std::vector<uint32_t> existing;
  uint32_t cur = 0;
  uint32_t next = 0;
  const void* prev = nullptr;
  while (bpf_map__get_next_key(map, prev, &next, sizeof(next)) == 0) {
    existing.push_back(next);
    cur = next;
    prev = &cur;
  }
  sync_.syncAll(registry, existing);
  return absl::OkStatus();
}

void Datapath::apply(const workloads::Registry& after, const workloads::Delta& delta) {
  if (!handed_over_) sync_.apply(after, delta);
}

void Datapath::setHandedOver(bool handed_over) {
  if (handed_over_ == handed_over) return;
  handed_over_ = handed_over;
  if (handed_over) return;
  // The next ferryd may have pointed the pinned links at its programs before it failed:
  // they run this process's again (a cls_bpf filter is put back by the check).
  size_t reclaimed = 0;
  auto reclaim = [&reclaimed](Attachment* a) {
    if (a != nullptr && a->reclaim()) ++reclaimed;
  };
  reclaim(from_proxy_.get());
  reclaim(to_proxy_.get());
  for (auto& [ip, pod] : pods_) {
    reclaim(&pod.egress_side);
    reclaim(&pod.ingress_side);
  }
  checkAttachments();
  FERRY_LOG(kInfo, "datapath: managed by this ferryd again; %d links run its programs", reclaimed);
}

void Datapath::checkAttachments() {
  if (handed_over_) return;
  auto check = [this](Attachment* a) {
    if (a == nullptr) return;
    bool was_failing = a->repairFailing();
    auto r = a->repair();
    if (!r.ok()) {
      // Usually the device is gone and the next workloads change releases the pod: counted
      // on every check, logged once.
      reattach_failures_.fetch_add(1, std::memory_order_relaxed);
      if (!was_failing) {
        FERRY_LOG(kWarn, "datapath: %s is no longer attached and cannot be re-attached: %s", a->what(),
                  r.status().message());
      }
      return;
    }
    if (*r == Attachment::Repair::kIntact) return;
    reattached_.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kWarn, "datapath: %s was %s underneath ferryd; %s", a->what(),
              *r == Attachment::Repair::kReattached ? "detached" : "unpinned",
              *r == Attachment::Repair::kReattached ? "re-attached" : "pinned again");
  };
  check(from_proxy_.get());
  check(to_proxy_.get());
  for (auto& [ip, pod] : pods_) {
    check(&pod.egress_side);
    check(&pod.ingress_side);
  }
}

void Datapath::setHbonePaused(bool paused) {
  if (handed_over_) return;
  const uint32_t zero = 0;
  ferry_settings settings{};
  bpf_map__lookup_elem(skel_->maps.ferry_settings, &zero, sizeof(zero), &settings, sizeof(settings), 0);
  settings.flags = paused ? (settings.flags | FERRY_SETTING_HBONE_PAUSED) : (settings.flags & ~FERRY_SETTING_HBONE_PAUSED);
  if (bpf_map__update_elem(skel_->maps.ferry_settings, &zero, sizeof(zero), &settings, sizeof(settings), BPF_ANY) != 0) {
    FERRY_LOG(kWarn, "datapath: cannot %s HBONE in ferry_settings: %s", paused ? "pause" : "resume", strerror(errno));
  }
}

DatapathCounters Datapath::counters() const {
  DatapathCounters out;
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return out;
  std::vector<ferry_counter> values(static_cast<size_t>(ncpu));
  for (uint32_t prog = 0; prog < FERRY_PROG_COUNT; ++prog) {
    for (uint32_t verdict = 0; verdict < FERRY_VERDICT_COUNT; ++verdict) {
      for (uint32_t reason = 0; reason < FERRY_REASON_SLOTS; ++reason) {
        uint32_t idx = ferry_counter_index(prog, verdict, reason);
        if (bpf_map__lookup_elem(skel_->maps.ferry_counters, &idx, sizeof(idx), values.data(),
                                 values.size() * sizeof(ferry_counter), 0) != 0) {
          continue;
        }
        uint64_t packets = 0;
        for (const auto& v : values) packets += v.packets;
        if (packets == 0) continue;
        out.packets[prog][verdict] += packets;
        const char* name = reasonName(reason);
        out.by_reason[name] += packets;
      }
    }
  }
  return out;
}

void Datapath::collect(telemetry::Exposition& out) const {
  static const char* const kProgs[] = {"pod_egress", "pod_ingress", "to_proxy", "from_proxy"};
  static const char* const kVerdicts[] = {"pass", "redirect", "drop"};
  auto c = counters();
  auto packets = out.counter("ferry_datapath_packets_total", "Packets seen by ferry's tc programs, by verdict");
  for (int p = 0; p < 4; ++p) {
    for (int v = 0; v < 3; ++v) {
      packets.add(static_cast<double>(c.packets[p][v]), {{"program", kProgs[p]}, {"verdict", kVerdicts[v]}});
    }
  }
  auto by_reason = out.counter("ferry_datapath_reason_packets_total", "Packets by the reason of their verdict");
  for (const auto& [reason, n] : c.by_reason) by_reason.add(static_cast<double>(n), {{"reason", reason}});
  auto modes = out.gauge("ferry_datapath_injection_mode", "The injection mode in use (1 for the active one)");
  for (auto mode : {config::Injection::kPeerEgress, config::Injection::kIngressRedirect, config::Injection::kNone}) {
    modes.add(injection_.mode == mode ? 1 : 0, {{"mode", injectionName(mode)}});
  }
  out.gauge("ferry_datapath_enrolled_pods", "Local pods whose devices carry ferry's programs",
            static_cast<double>(pods_.size()));
  out.gauge("ferry_datapath_pods_waiting",
            "Local pods not enrolled yet (their device not found yet, or attaching failed): retried every "
            "workloads_poll",
            static_cast<double>(sync_.failed()));
  out.counter("ferry_datapath_reattached_total",
              "Programs or link pins put back after something removed them underneath ferryd",
              static_cast<double>(reattached_.load(std::memory_order_relaxed)));
  out.counter("ferry_datapath_reattach_failures_total",
              "Checks that found a program detached and could not re-attach it",
              static_cast<double>(reattach_failures_.load(std::memory_order_relaxed)));
  out.gauge("ferry_datapath_kernel_feature", "Kernel features found by the start-up probe")
      .add(features_.tcx ? 1 : 0, {{"feature", "tcx"}})
      .add(features_.redirect_peer ? 1 : 0, {{"feature", "redirect_peer"}})
      .add(features_.egress_flag ? 1 : 0, {{"feature", "egress_flag"}})
      .add(features_.netkit ? 1 : 0, {{"feature", "netkit"}})
      .add(features_.ktls ? 1 : 0, {{"feature", "ktls"}});
}

}  // namespace ferry::datapath
