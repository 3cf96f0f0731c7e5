#pragma once
// Attaching tc programs so that they run before anything else on the device (docs/datapath.md,
// "Ordering with a CNI"): TCX with BPF_F_BEFORE where the kernel has it (6.6+; libbpf 1.1
// has no wrapper, so BPF_LINK_CREATE is issued directly), else cls_bpf at the lowest
// priority. netkit devices (6.7+) have their own attach points, on the primary device's
// ifindex: kNetkitPeer runs for every packet the peer (the pod's eth0) sends, before it
// reaches the node; kNetkitPrimary for every packet the primary sends towards the pod. They
// exist only as links (no cls_bpf fallback). Each Attachment detaches exactly what it
// attached when destroyed.
#include <string>

#include "absl/status/statusor.h"
#include "proxy/common/unique_fd.h"

namespace ferry::datapath {

enum class Hook { kIngress, kEgress, kNetkitPrimary, kNetkitPeer };
const char* hookName(Hook hook);

// Where in the device's program list: ferry's own programs go first (docs/datapath.md,
// "Ordering with a CNI"); kLast is for others' programs, e.g. a test's CNI stand-in that
// must run after ferry.
enum class Position { kFirst, kLast };

class Attachment {
 public:
  // `pin_path` (TCX only): also pin the link there, so that it outlives ferryd (fail
  // closed); an existing pin at that path is taken over and pointed at `prog_fd`.
  static absl::StatusOr<Attachment> attach(int prog_fd, int ifindex, Hook hook, bool tcx,
                                           const std::string& what,
                                           const std::string& pin_path = "",
                                           Position position = Position::kFirst);
  Attachment() = default;  // attached to nothing
  Attachment(Attachment&& other) noexcept { *this = std::move(other); }
  Attachment& operator=(Attachment&& other) noexcept;
  ~Attachment() { detach(); }

  // Detaches now (unpinning a pinned link).
  void detach();
  // Forgets the attachment without detaching: a pinned link stays in the kernel.
  void release();
  // Points this attachment's link at its own program again (another process updated the
  // link to its program); true when it did.
  bool reclaim();
  // Someone else can take ferry's programs off a device underneath it (`bpftool link
  // detach`, `tc filter del`, a CNI that recreates the clsact qdisc, an unlinked pin).
  // repair() looks, and puts back what is missing: the program on its hook (a fresh link,
  // pinned again) or just the pin. An error when the hook cannot be re-attached (the
  // device is gone: the registry will release the pod).
  enum class Repair { kIntact, kRepinned, kReattached };
  absl::StatusOr<Repair> repair();
  // The last repair() failed (to log a failing hook once, not on every check).
  bool repairFailing() const { return repair_failing_; }
  const std::string& what() const { return what_; }
  bool usesTcx() const { return static_cast<bool>(link_fd_); }

 private:
  bool stillAttached() const;
  // What attach() was given, for repair().
  int prog_fd_ = -1;
  int ifindex_ = 0;
  bool tcx_ = false;
  Position position_ = Position::kFirst;
  std::string want_pin_;
  bool repair_failing_ = false;
  common::UniqueFd link_fd_;  // TCX link
  std::string pin_path_;  // where the link is pinned, if it is
  int tc_ifindex_ = 0;    // cls_bpf: where to detach from
  Hook hook_ = Hook::kIngress;
  bool tc_attached_ = false;
  std::string what_;
};

}  // namespace ferry::datapath
