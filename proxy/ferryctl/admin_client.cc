#include "proxy/ferryctl/admin_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/common/file.h"
#include "proxy/common/strings.h"

namespace ferry::ferryctl {
namespace {

// ferryd answers admin requests from memory on its control thread; a few seconds is plenty,
// and bounds the wait on an endpoint that accepts and never answers (ferryd's own limit for
// a request is 5 s, proxy/server/http_server.cc).
constexpr int kTimeoutMs = 5000;
// /policies with tens of thousands of objects is a few MB; anything far larger is not ferryd.
constexpr size_t kMaxAnswerBytes = 64u << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on `fd` until the deadline; false on timeout (errno ETIMEDOUT).
bool waitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// "HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\n...\r\n\r\n<body>": the status, and
// the body once it is complete (Content-Length, else the end of the stream).
struct Parsed {
  int status = 0;
  size_t body_start = 0;
  std::optional<size_t> content_length;
};
absl::StatusOr<Parsed> parseHead(absl::string_view response) {
  Parsed out;
  size_t end = response.find("\r\n\r\n");
  std::vector<absl::string_view> lines = absl::StrSplit(response.substr(0, end), "\r\n");
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &out.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP answer: '", absl::CHexEscape(lines[0].substr(0, 80)), "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    auto colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "content-length") {
      size_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) return absl::DataLossError(absl::StrCat("bad Content-Length '", value, "'"));
      out.content_length = n;
    } else if (name == "transfer-encoding" && !absl::EqualsIgnoreCase(value, "identity")) {
      return absl::UnimplementedError(absl::StrCat("Transfer-Encoding ", value, " (ferryd's admin endpoint sends "
                                                   "Content-Length)"));
    }
  }
  out.body_start = end + 4;
  return out;
}

}  // namespace

absl::StatusOr<common::HostPort> parseAdminAddress(absl::string_view text) {
  if (absl::StartsWith(text, "localhost:")) {
    return parseAdminAddress(absl::StrCat("127.0.0.1", text.substr(text.find(':'))));
  }
  auto hp = common::parseHostPort(common::toStd(text));
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--admin '", text, "': ", hp.status().message(), " (expected HOST:PORT, e.g. 127.0.0.1:15000)"));
  }
  return hp;
}

absl::StatusOr<AdminAnswer> adminCall(const common::HostPort& admin, absl::string_view method,
                                      const std::string& target) {
  const std::string at = common::formatHostPort(admin);
  const std::string where = absl::StrCat("ferryd's admin endpoint at ", at);
  auto failed = [&](const std::string& what, int err) {
    if (err == ECONNREFUSED) {
      return absl::UnavailableError(absl::StrCat("ferryd is not running at ", at,
                                                 " (connection refused); if its listen.admin is elsewhere, "
                                                 "pass --admin HOST:PORT or set FERRY_ADMIN"));
    }
    return absl::UnavailableError(absl::StrCat("ferryd at ", at, " is not reachable: ", what, ": ",
                                               common::errnoText(err),
                                               " (is ferryd running on this node? is its listen.admin elsewhere? "
                                               "pass --admin HOST:PORT)"));
  };
  boost::asio::ip::tcp::endpoint endpoint(admin.ip, admin.port);
  Fd fd(::socket(endpoint.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return failed("socket", errno);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
  if (::connect(fd.get(), endpoint.data(), endpoint.size()) != 0) {
    if (errno != EINPROGRESS) return failed("connect", errno);
    if (!waitFor(fd.get(), POLLOUT, deadline)) return failed("connect", errno);
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return failed("connect", err);
  }

  // Ferry-Admin: what a web page cannot send without a preflight; the endpoint's POSTs need
  // it (docs/operations.md).
  std::string request = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: ", at,
                                     "\r\nUser-Agent: ferryctl\r\nFerry-Admin: 1\r\n"
                                     "Content-Length: 0\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return failed("send", errno);
    } else if (!waitFor(fd.get(), POLLOUT, deadline)) {
      return failed("send", errno);
    }
  }

  std::string response;
  std::optional<Parsed> head;
  char buf[16384];
  for (;;) {
    if (!head && response.find("\r\n\r\n") != std::string::npos) {
      auto parsed = parseHead(response);
      if (!parsed.ok()) return absl::DataLossError(absl::StrCat(where, " answered ", parsed.status().message()));
      head = *parsed;
    }
    if (head && head->content_length && response.size() >= head->body_start + *head->content_length) break;
    if (response.size() > kMaxAnswerBytes) {
      return absl::ResourceExhaustedError(absl::StrCat(where, " answered more than ", kMaxAnswerBytes, " bytes"));
    }
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      return failed("receive", errno);
    } else if (!waitFor(fd.get(), POLLIN, deadline)) {
      return failed("no answer in time", errno);
    }
  }
  if (!head) return absl::DataLossError(absl::StrCat(where, " closed the connection before a whole HTTP answer"));
  AdminAnswer answer;
  answer.status = head->status;
  answer.body = response.substr(head->body_start, head->content_length.value_or(std::string::npos));
  if (head->content_length && answer.body.size() < *head->content_length) {
    return absl::DataLossError(absl::StrCat(where, " closed the connection mid-answer"));
  }
  return answer;
}

}  // namespace ferry::ferryctl
