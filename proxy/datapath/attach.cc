#include "proxy/datapath/attach.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"
#include "proxy/common/unique_fd.h"

namespace ferry::datapath {
namespace {

// Kernel 6.6 UAPI that Debian 12's headers (6.1) and libbpf 1.1 lack.
constexpr uint32_t kTcxIngress = 46;
constexpr uint32_t kTcxEgress = 47;
constexpr uint32_t kNetkitPrimary = 54;  // BPF_NETKIT_PRIMARY (6.7)
constexpr uint32_t kNetkitPeer = 55;     // BPF_NETKIT_PEER (6.7)
constexpr uint32_t kFlagBefore = 1u << 3;  // BPF_F_BEFORE: relative to relative_fd; 0 = head
// cls_bpf priority 1 is the first filter to run; ferry must come before a CNI's.
constexpr uint32_t kTcPriority = 1;
constexpr uint32_t kTcHandle = 0xf0;  // "f0" for ferry; ours to find again on detach

// union bpf_attr's link_create as of 6.6, with the tcx member (netkit's has the same layout).
struct LinkCreateTcx {
  uint32_t prog_fd;
  uint32_t target_ifindex;
  uint32_t attach_type;
  uint32_t flags;
  uint32_t relative_fd;
  uint32_t pad;
  uint64_t expected_revision;
  uint8_t rest[64];
};

uint32_t linkAttachType(Hook hook) {
  switch (hook) {
    case Hook::kIngress: return kTcxIngress;
    case Hook::kEgress: return kTcxEgress;
    case Hook::kNetkitPrimary: return kNetkitPrimary;
    case Hook::kNetkitPeer: return kNetkitPeer;
  }
  return kTcxIngress;
}

int linkCreate(int prog_fd, int ifindex, Hook hook, Position position) {
  LinkCreateTcx attr{};
  attr.prog_fd = static_cast<uint32_t>(prog_fd);
  attr.target_ifindex = static_cast<uint32_t>(ifindex);
  attr.attach_type = linkAttachType(hook);
  // BPF_F_BEFORE without a relative program: before every program already there. No flag:
  // appended after them.
  attr.flags = position == Position::kFirst ? kFlagBefore : 0;
  return static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
}

bool isNetkit(Hook hook) { return hook == Hook::kNetkitPrimary || hook == Hook::kNetkitPeer; }

}  // namespace

const char* hookName(Hook hook) {
  switch (hook) {
    case Hook::kIngress: return "tc ingress";
    case Hook::kEgress: return "tc egress";
    case Hook::kNetkitPrimary: return "netkit primary";
    case Hook::kNetkitPeer: return "netkit peer";
  }
  return "?";
}

Attachment& Attachment::operator=(Attachment&& other) noexcept {
  if (this != &other) {
    detach();
    link_fd_ = std::move(other.link_fd_);
    pin_path_ = std::move(other.pin_path_);
    tc_ifindex_ = other.tc_ifindex_;
    hook_ = other.hook_;
    tc_attached_ = other.tc_attached_;
    what_ = std::move(other.what_);
    prog_fd_ = other.prog_fd_;
    ifindex_ = other.ifindex_;
    tcx_ = other.tcx_;
    position_ = other.position_;
    want_pin_ = std::move(other.want_pin_);
    repair_failing_ = other.repair_failing_;
    other.tc_attached_ = false;
    other.pin_path_.clear();
  }
  return *this;
}

absl::StatusOr<Attachment> Attachment::attach(int prog_fd, int ifindex, Hook hook, bool tcx,
                                              const std::string& what, const std::string& pin_path,
                                              Position position) {
  Attachment a;
  a.what_ = what;
  a.hook_ = hook;
  a.prog_fd_ = prog_fd;
  a.ifindex_ = ifindex;
  a.tcx_ = tcx;
  a.position_ = position;
  a.want_pin_ = pin_path;
  if (isNetkit(hook) && !tcx) {
    return absl::FailedPreconditionError(absl::StrCat(
        "attaching ", what, ": netkit programs need BPF links, which this kernel lacks"));
  }
  if (tcx) {
    if (!pin_path.empty()) {
      common::UniqueFd old(bpf_obj_get(pin_path.c_str()));
      if (old) {
        // A link pinned by an earlier ferryd: point it at the new program, no gap.
        if (bpf_link_update(old.get(), prog_fd, nullptr) == 0) {
          a.link_fd_ = std::move(old);
          a.pin_path_ = pin_path;
          FERRY_LOG(kInfo, "datapath: adopted pinned link %s for %s", pin_path, what);
          return a;
        }
        FERRY_LOG(kWarn, "datapath: pinned link %s unusable (%s); replacing it", pin_path, strerror(errno));
        old.reset();
        ::unlink(pin_path.c_str());
      }
    }
    common::UniqueFd fd(linkCreate(prog_fd, ifindex, hook, position));
    if (!fd) {
      return absl::InternalError(absl::StrCat("attaching ", what, isNetkit(hook) ? " to netkit: " : " with TCX: ",
                                              strerror(errno)));
    }
    a.link_fd_ = std::move(fd);
    if (!pin_path.empty()) {
      if (bpf_obj_pin(a.link_fd_.get(), pin_path.c_str()) != 0) {
        return absl::InternalError(absl::StrCat("pinning the link of ", what, " at ", pin_path, ": ",
                                                strerror(errno)));
      }
      a.pin_path_ = pin_path;
    }
    return a;
  }
  if (position != Position::kFirst) {
    return absl::FailedPreconditionError(absl::StrCat("attaching ", what, " last needs TCX"));
  }
  LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = ifindex,
              .attach_point = hook == Hook::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
  int rc = bpf_tc_hook_create(&h);
  if (rc != 0 && rc != -EEXIST) {
    return absl::InternalError(absl::StrCat("creating the clsact qdisc for ", what, ": ", strerror(-rc)));
  }
  LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = prog_fd, .flags = BPF_TC_F_REPLACE, .handle = kTcHandle,
              .priority = kTcPriority);
  rc = bpf_tc_attach(&h, &o);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("attaching ", what, " with cls_bpf: ", strerror(-rc)));
  }
  a.tc_ifindex_ = ifindex;
  a.tc_attached_ = true;
  return a;
}

void Attachment::detach() {
  if (link_fd_) {
    if (!pin_path_.empty()) ::unlink(pin_path_.c_str());
    link_fd_.reset();  // closing the last reference to an unpinned link detaches it
    pin_path_.clear();
  }
  if (tc_attached_) {
    LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = tc_ifindex_,
                .attach_point = hook_ == Hook::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, o, .handle = kTcHandle, .priority = kTcPriority);
    bpf_tc_detach(&h, &o);
    tc_attached_ = false;
  }
}

bool Attachment::stillAttached() const {
  if (link_fd_) {
    // A TCX or netkit link that was detached (BPF_LINK_DETACH, or its device went away)
    // stays a valid fd but reports ifindex 0. libbpf 1.1's bpf_link_info lacks the tcx and
    // netkit members: both begin with the ifindex, at the start of the union.
    bpf_link_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(link_fd_.get(), &info, &len) != 0) return false;
    uint32_t ifindex = 0;
    std::memcpy(&ifindex, reinterpret_cast<const char*>(&info) + offsetof(bpf_link_info, raw_tracepoint),
                sizeof(ifindex));
    // A netkit peer link belongs to the peer device, inside the pod's netns: it reports
    // that device's ifindex, a number of another netns that never equals the primary's we
    // attached through. Only 0 means detached there (compared with ifindex_, every check
    // "re-attached" it: a gap each second in which the pod's packets went uncaptured).
    if (hook_ == Hook::kNetkitPeer) return ifindex != 0;
    return ifindex == static_cast<uint32_t>(ifindex_);
  }
  if (tc_attached_) {
    LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = tc_ifindex_,
                .attach_point = hook_ == Hook::kIngress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, o, .handle = kTcHandle, .priority = kTcPriority);
    if (bpf_tc_query(&h, &o) != 0) return false;  // filter or whole clsact qdisc gone
    bpf_prog_info pi{};
    uint32_t len = sizeof(pi);
    if (bpf_obj_get_info_by_fd(prog_fd_, &pi, &len) != 0) return true;  // cannot tell: leave it
    return o.prog_id == pi.id;  // our handle and priority, someone else's program: replace it
  }
  return true;  // nothing was attached
}

absl::StatusOr<Attachment::Repair> Attachment::repair() {
  // After a failed re-attach nothing is attached: try again on every check.
  if (!repair_failing_ && !link_fd_ && !tc_attached_) return Repair::kIntact;
  if (!repair_failing_ && stillAttached()) {
    if (pin_path_.empty()) return Repair::kIntact;
    // The pin is what keeps the pod steered into the proxy when ferryd stops (fail closed):
    // it must name this link, not be missing or name another.
    common::UniqueFd pinned(bpf_obj_get(pin_path_.c_str()));
    bool ours = false;
    if (pinned) {
      bpf_link_info a{}, b{};
      uint32_t la = sizeof(a), lb = sizeof(b);
      ours = bpf_obj_get_info_by_fd(pinned.get(), &a, &la) == 0 &&
             bpf_obj_get_info_by_fd(link_fd_.get(), &b, &lb) == 0 && a.id == b.id;
    }
    if (ours) return Repair::kIntact;
    ::unlink(pin_path_.c_str());
    if (bpf_obj_pin(link_fd_.get(), pin_path_.c_str()) != 0) {
      repair_failing_ = true;  // the next check makes a fresh, pinned link
      return absl::InternalError(absl::StrCat("pinning the link of ", what_, " again at ", pin_path_, ": ",
                                              strerror(errno)));
    }
    return Repair::kRepinned;
  }
  // Gone from its hook. Drop the dead link and its pin, so that attach() makes a fresh one
  // rather than adopting the pin of a detached link.
  if (link_fd_) {
    if (!pin_path_.empty()) ::unlink(pin_path_.c_str());
    link_fd_.reset();
    pin_path_.clear();
  }
  tc_attached_ = false;  // BPF_TC_F_REPLACE takes our handle back if another program holds it
  auto a = attach(prog_fd_, ifindex_, hook_, tcx_, what_, want_pin_, position_);
  if (!a.ok()) {
    repair_failing_ = true;
    return a.status();
  }
  *this = std::move(*a);
  return Repair::kReattached;
}

bool Attachment::reclaim() {
  if (!link_fd_ || prog_fd_ < 0) return false;
  if (bpf_link_update(link_fd_.get(), prog_fd_, nullptr) != 0) {
    FERRY_LOG(kWarn, "datapath: pointing the link of %s at this ferryd's program: %s", what_, strerror(errno));
    return false;
  }
  return true;
}

void Attachment::release() {
  link_fd_.reset();  // the pin keeps it attached
  pin_path_.clear();
  tc_attached_ = false;
}

}  // namespace ferry::datapath
