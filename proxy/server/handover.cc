#include "proxy/server/handover.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"

namespace ferry::server::handover {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr struct {
  Role role;
  const char* name;
} kRoles[] = {{Role::kOutbound, "outbound"},
              {Role::kPlaintext, "inbound_plaintext"},
              {Role::kHbone, "hbone"},
              {Role::kReadiness, "readiness"},
              {Role::kMetrics, "metrics"},
              {Role::kAdmin, "admin"},
              {Role::kHandover, "handover"},
              {Role::kProxyNetns, "proxy_netns"},
              {Role::kHostInterfaceClaim, "host_interface_claim"}};

constexpr struct {
  Message::Type type;
  const char* name;
} kTypes[] = {{Message::Type::kHello, "hello"},
              {Message::Type::kOffer, "offer"},
              {Message::Type::kReady, "ready"},
              {Message::Type::kStatus, "status"}};

const char* typeName(Message::Type type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "?";
}

// Waits for `events` on `fd` until `deadline`; false when it passed.
bool waitUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) left = 0;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // the call that follows reports the error
  }
}

absl::StatusOr<int64_t> integer(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat("no \"", key, "\""));
  if (auto i = v->if_int64()) return *i;
  if (auto u = v->if_uint64(); u && *u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(*u);
  return absl::InvalidArgumentError(absl::StrCat("\"", key, "\" is not an integer"));
}

// An offer's "sockets": one entry (role, address) for each descriptor passed, in order; the
// descriptors move into `sockets`.
absl::Status decodeSockets(const json::object& o, std::vector<common::UniqueFd>& fds,
                           std::vector<PassedSocket>& sockets) {
  const json::value* named = o.if_contains("sockets");
  const json::array* list = named != nullptr ? named->if_array() : nullptr;
  if (list == nullptr) return absl::InvalidArgumentError("offer: no \"sockets\" list");
  if (list->size() != fds.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("offer: ", list->size(), " sockets named, ", fds.size(), " descriptors passed"));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const json::object* s = (*list)[i].if_object();
    const json::value* role = s != nullptr ? s->if_contains("role") : nullptr;
    const json::value* address = s != nullptr ? s->if_contains("address") : nullptr;
    if (role == nullptr || !role->is_string() || address == nullptr || !address->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("offer: socket ", i, " needs a \"role\" and an \"address\""));
    }
    PassedSocket passed;
    bool found = false;
    for (const auto& r : kRoles) {
      if (role->get_string() == r.name) passed.role = r.role, found = true;
    }
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat("offer: socket ", i, " has the unknown role \"", std::string(role->get_string()), "\""));
    }
    passed.address = std::string(address->get_string());
    passed.fd = std::move(fds[i]);
    sockets.push_back(std::move(passed));
  }
  return absl::OkStatus();
}

}  // namespace

const char* roleName(Role role) {
  for (const auto& r : kRoles) {
    if (r.role == role) return r.name;
  }
  return "?";
}

const std::string& selfName() {
  static const std::string name = [] {
    const char* env = std::getenv("POD_NAME");
    std::string n = env != nullptr ? env : "";
    return n.size() <= kMaxName ? n : std::string();
  }();
  return name;
}

std::string describe(int pid, const std::string& name) {
  return name.empty() ? absl::StrCat("ferryd pid ", pid) : absl::StrCat("ferryd pid ", pid, " (pod ", name, ")");
}

std::string encode(const Message& message) {
  json::object o;
  o["type"] = typeName(message.type);
  o["version"] = message.version;
  o["pid"] = message.pid;
  if (!message.name.empty()) o["name"] = message.name;
  if (message.type == Message::Type::kOffer) {
    json::array sockets;
    for (const auto& s : message.sockets) {
      sockets.push_back(json::object{{"role", roleName(s.role)}, {"address", s.address}});
    }
    o["sockets"] = std::move(sockets);
  }
  if (message.type == Message::Type::kStatus) {
    o["live"] = message.live;
    o["deadline_ms"] = message.deadline_ms;
  }
  return json::serialize(o);
}

absl::StatusOr<Message> decode(std::string_view text, std::vector<common::UniqueFd> fds) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("handover message is not JSON: ", ec.message()));
  const json::object* o = v.if_object();
  if (o == nullptr) return absl::InvalidArgumentError("handover message is not a JSON object");
  Message m;
  const json::value* type = o->if_contains("type");
  const json::string* type_name = type != nullptr ? type->if_string() : nullptr;
  if (type_name == nullptr) return absl::InvalidArgumentError("handover message has no \"type\"");
  bool known = false;
  for (const auto& t : kTypes) {
    if (*type_name == t.name) m.type = t.type, known = true;
  }
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat("handover message of unknown type \"", std::string(*type_name), "\""));
  }
  auto version = integer(*o, "version");
  if (!version.ok()) return absl::InvalidArgumentError(absl::StrCat(typeName(m.type), ": ", version.status().message()));
  if (*version != kVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("handover protocol version ", *version, " (this ferryd speaks ", kVersion, ")"));
  }
  auto pid = integer(*o, "pid");
  if (!pid.ok() || *pid <= 0 || *pid > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(typeName(m.type), ": no valid \"pid\""));
  }
  m.pid = static_cast<int>(*pid);
  if (const json::value* name = o->if_contains("name"); name != nullptr) {
    const json::string* text = name->if_string();
    bool printable = text != nullptr && text->size() <= kMaxName &&
                     std::all_of(text->begin(), text->end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (!printable) {
      return absl::InvalidArgumentError(
          absl::StrCat(typeName(m.type), ": \"name\" must be a string of at most ", kMaxName, " printable characters"));
    }
    m.name = std::string(*text);
  }
  if (m.type == Message::Type::kStatus) {
    auto live = integer(*o, "live");
    auto deadline = integer(*o, "deadline_ms");
    if (!live.ok() || !deadline.ok()) return absl::InvalidArgumentError("status: \"live\" and \"deadline_ms\" are required");
    m.live = *live;
    m.deadline_ms = *deadline;
  }
  if (m.type != Message::Type::kOffer) {
    if (!fds.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(typeName(m.type), " came with ", fds.size(), " descriptors; only an offer carries any"));
    }
    return m;
  }
  if (auto st = decodeSockets(*o, fds, m.sockets); !st.ok()) return st;
  return m;
}

absl::Status sendMessage(int fd, const Message& message, Clock::time_point deadline) {
  if (message.sockets.size() > kMaxDescriptors) {
    return absl::ResourceExhaustedError(
        absl::StrCat("handover: ", message.sockets.size(), " sockets to pass, at most ", kMaxDescriptors));
  }
  std::string json = encode(message);
  if (json.size() > kMaxFrame) return absl::ResourceExhaustedError("handover: message longer than a frame");
  std::string frame(4, '\0');
  uint32_t n = static_cast<uint32_t>(json.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  frame += json;
  std::vector<char> control;
  if (!message.sockets.empty()) {
    control.resize(CMSG_SPACE(sizeof(int) * message.sockets.size()));
  }
  size_t sent = 0;
  while (sent < frame.size()) {
    iovec iov{frame.data() + sent, frame.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (sent == 0 && !control.empty()) {
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * message.sockets.size());
      auto* out = reinterpret_cast<int*>(CMSG_DATA(c));
      for (size_t i = 0; i < message.sockets.size(); ++i) out[i] = message.sockets[i].fd.get();
    }
    ssize_t r = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      sent += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitUntil(fd, POLLOUT, deadline)) {
        return absl::DeadlineExceededError(absl::StrCat("handover: the peer did not take the ", typeName(message.type),
                                                        " message in time"));
      }
      continue;
    }
    return absl::UnavailableError(absl::StrCat("handover: sending ", typeName(message.type), ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> FrameReader::fill(int fd) {
  for (;;) {
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptors)];
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (r < 0) return absl::UnavailableError(absl::StrCat("handover: receiving: ", std::strerror(errno)));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const auto* in = reinterpret_cast<const int*>(CMSG_DATA(c));
      for (size_t i = 0; i < count; ++i) fds_.emplace_back(in[i]);
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("handover: more descriptors in one message than the ", kMaxDescriptors, " accepted"));
    }
    if (r == 0) return false;
    buffer_.append(data, static_cast<size_t>(r));
    if (buffer_.size() > kMaxFrame + 4 + sizeof(data)) {
      return absl::ResourceExhaustedError("handover: the peer sends more than it may");
    }
  }
}

absl::StatusOr<std::optional<Message>> FrameReader::next() {
  if (buffer_.size() < 4) return std::nullopt;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<unsigned char>(buffer_[i]);
  if (n > kMaxFrame) return absl::InvalidArgumentError(absl::StrCat("handover: a frame of ", n, " bytes (at most ", kMaxFrame, ")"));
  if (buffer_.size() < 4 + n) return std::nullopt;
  std::string json = buffer_.substr(4, n);
  buffer_.erase(0, 4 + n);
  // The descriptors came with this frame's first byte: every one received so far is its own
  // (a peer sends the next frame only after this one).
  auto m = decode(json, std::move(fds_));
  fds_.clear();
  if (!m.ok()) return m.status();
  return std::optional<Message>(*std::move(m));
}

absl::StatusOr<Message> receiveMessage(int fd, FrameReader& reader, Clock::time_point deadline) {
  for (;;) {
    auto more = reader.fill(fd);
    if (!more.ok()) return more.status();
    auto m = reader.next();
    if (!m.ok()) return m.status();
    if (*m) return **std::move(m);
    if (!*more) return absl::UnavailableError("handover: the peer closed the link");
    if (!waitUntil(fd, POLLIN, deadline)) return absl::DeadlineExceededError("handover: no answer in time");
  }
}

absl::StatusOr<std::optional<TakeOver>> takeOver(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("handover.socket: path too long");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  common::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return absl::InternalError(absl::StrCat("handover: socket: ", std::strerror(errno)));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno == ENOENT) return std::nullopt;
    if (errno == ECONNREFUSED) {
      ::unlink(path.c_str());  // left by a ferryd that is gone
      return std::nullopt;
    }
    // EAGAIN: its backlog is full (a takeover already in progress).
    return absl::UnavailableError(absl::StrCat("handover: connecting to ", path, ": ", std::strerror(errno)));
  }
  auto deadline = Clock::now() + timeout;
  Message hello;
  hello.type = Message::Type::kHello;
  hello.pid = static_cast<int>(::getpid());
  hello.name = selfName();
  if (auto st = sendMessage(fd.get(), hello, deadline); !st.ok()) return st;
  TakeOver taken;
  auto offer = receiveMessage(fd.get(), taken.reader, deadline);
  if (!offer.ok()) {
    return absl::Status(offer.status().code(),
                        absl::StrCat("the ferryd on ", path, " did not hand over: ", offer.status().message()));
  }
  if (offer->type != Message::Type::kOffer) {
    return absl::InvalidArgumentError(absl::StrCat("the ferryd on ", path, " answered hello with ", typeName(offer->type)));
  }
  taken.old_pid = offer->pid;
  taken.old_name = offer->name;
  taken.sockets = std::move(offer->sockets);
  taken.link = std::move(fd);
  return std::optional<TakeOver>(std::move(taken));
}

}  // namespace ferry::server::handover
