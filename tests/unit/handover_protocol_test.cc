// The wire between two generations of ferryd (proxy/server/handover.h): messages and their
// descriptors across a real unix socket pair, bad input refused with a reason and nothing
// leaked, and takeOver() against no ferryd, a stale socket file and a running one.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "proxy/server/handover.h"
#include "tests/support/temp_dir.h"

namespace ferry::server::handover {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

size_t openDescriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// A raw frame: the 4-byte length and `json`.
std::string frame(const std::string& json) {
  std::string out(4, '\0');
  uint32_t n = static_cast<uint32_t>(json.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  return out + json;
}

TEST(HandoverProtocolTest, AnOfferCarriesEverySocketWithItsRoleAndAddress) {
  Pair link;
  int pipes[2][2];
  ASSERT_EQ(::pipe2(pipes[0], O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(pipes[1], O_CLOEXEC), 0);
  Message offer;
  offer.type = Message::Type::kOffer;
  offer.pid = 4242;
  offer.sockets.push_back({Role::kHbone, "127.0.0.1:15008", common::UniqueFd(::dup(pipes[0][1]))});
  offer.sockets.push_back({Role::kHandover, "/run/ferry/handover.sock", common::UniqueFd(::dup(pipes[1][1]))});
  ASSERT_TRUE(sendMessage(link.a, offer, Clock::now() + std::chrono::seconds(1)).ok());
  FrameReader reader;
  auto got = receiveMessage(link.b, reader, Clock::now() + std::chrono::seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->type, Message::Type::kOffer);
  EXPECT_EQ(got->pid, 4242);
  ASSERT_EQ(got->sockets.size(), 2u);
  EXPECT_EQ(got->sockets[0].role, Role::kHbone);
  EXPECT_EQ(got->sockets[0].address, "127.0.0.1:15008");
  EXPECT_EQ(got->sockets[1].role, Role::kHandover);
  // The descriptors are the same files: what goes in the received one comes out of the pipe.
  for (int i = 0; i < 2; ++i) {
    char c = static_cast<char>('a' + i), back = 0;
    ASSERT_EQ(::write(got->sockets[i].fd.get(), &c, 1), 1);
    ASSERT_EQ(::read(pipes[i][0], &back, 1), 1);
    EXPECT_EQ(back, c);
    EXPECT_EQ(::fcntl(got->sockets[i].fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    ::close(pipes[i][0]);
    ::close(pipes[i][1]);
  }
}

TEST(HandoverProtocolTest, StatusAndReadyRoundTripAndFramesSplitAnywhereAreJoined) {
  Pair link;
  Message status;
  status.type = Message::Type::kStatus;
  status.pid = 7;
  status.name = "ferry-7xk2p";  // a pod's name: its pid (1) says little in a container
  status.live = 200;
  status.deadline_ms = 14'400'000;
  std::string bytes = frame(encode(status));
  Message ready;
  ready.type = Message::Type::kReady;
  ready.pid = 8;
  bytes += frame(encode(ready));
  FrameReader reader;
  // One byte at a time: no frame before its last byte, both after.
  for (size_t i = 0; i < bytes.size(); ++i) {
    ASSERT_EQ(::send(link.a, &bytes[i], 1, 0), 1);
    ASSERT_TRUE(reader.fill(link.b).ok());
    auto m = reader.next();
    ASSERT_TRUE(m.ok()) << m.status();
    bool end_of_first = i + 1 == bytes.size() - frame(encode(ready)).size();
    EXPECT_EQ(m->has_value(), end_of_first || i + 1 == bytes.size()) << "after byte " << i;
    if (*m && end_of_first) {
      EXPECT_EQ((*m)->type, Message::Type::kStatus);
      EXPECT_EQ((*m)->live, 200);
      EXPECT_EQ((*m)->name, "ferry-7xk2p");
      EXPECT_EQ((*m)->deadline_ms, 14'400'000);
    } else if (*m) {
      EXPECT_EQ((*m)->type, Message::Type::kReady);
      EXPECT_EQ((*m)->pid, 8);
      EXPECT_EQ((*m)->name, "") << "a name is optional (a plain host has none)";
    }
  }
}

TEST(HandoverProtocolTest, AGenerationIsNamedByItsPidAndItsPodWhenItHasOne) {
  EXPECT_EQ(describe(4242, ""), "ferryd pid 4242");
  EXPECT_EQ(describe(1, "ferry-7xk2p"), "ferryd pid 1 (pod ferry-7xk2p)");
}

TEST(HandoverProtocolTest, BadMessagesAreRefusedWithAReasonAndTheirDescriptorsClosed) {
  struct Case {
    std::string json;
    std::string why;
  } cases[] = {
      {"not json", "not JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"version":1,"pid":3})", "no \"type\""},
      {R"({"type":"explode","version":1,"pid":3})", "unknown type"},
      {R"({"type":"hello","version":2,"pid":3})", "version 2"},
      {R"({"type":"hello","version":1,"pid":-3})", "pid"},
      {R"({"type":"hello","version":1,"pid":3,"name":7})", "\"name\" must be a string"},
      {R"({"type":"hello","version":1,"pid":3,"name":"a\u001b[2Jb"})", "printable"},
      {R"({"type":"status","version":1,"pid":3,"live":1})", "deadline_ms"},
      {R"({"type":"offer","version":1,"pid":3})", "no \"sockets\""},
      {R"({"type":"offer","version":1,"pid":3,"sockets":[{"role":"hbone","address":"a"},{"role":"hbone","address":"b"}]})",
       "2 sockets named, 1 descriptors"},
      {R"({"type":"offer","version":1,"pid":3,"sockets":[{"role":"teleport","address":"a"}]})", "unknown role"},
      {R"({"type":"offer","version":1,"pid":3,"sockets":[{"address":"a"}]})", "needs a \"role\""},
      {R"({"type":"hello","version":1,"pid":3})", "only an offer carries"},
  };
  size_t before = openDescriptors();
  for (const auto& c : cases) {
    std::vector<common::UniqueFd> fds;
    if (c.json.find("offer") != std::string::npos || c.why == "only an offer carries") {
      fds.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    }
    auto m = decode(c.json, std::move(fds));
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_NE(std::string(m.status().message()).find(c.why), std::string::npos) << m.status();
  }
  EXPECT_EQ(openDescriptors(), before);
}

TEST(HandoverProtocolTest, AFrameLongerThanTheLimitAndAPeerThatClosesMidFrameAreErrors) {
  {
    Pair link;
    std::string header = frame(std::string(kMaxFrame + 1, ' ')).substr(0, 4);
    ASSERT_EQ(::send(link.a, header.data(), 4, 0), 4);
    FrameReader reader;
    ASSERT_TRUE(reader.fill(link.b).ok());
    auto m = reader.next();
    ASSERT_FALSE(m.ok());
    EXPECT_NE(std::string(m.status().message()).find("at most"), std::string::npos) << m.status();
  }
  {
    Pair link;
    std::string half = frame(R"({"type":"ready","version":1,"pid":9})").substr(0, 10);
    ASSERT_EQ(::send(link.a, half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
    ::close(link.a);
    link.a = -1;
    FrameReader reader;
    auto m = receiveMessage(link.b, reader, Clock::now() + std::chrono::seconds(1));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable) << m.status();
  }
  {
    Pair link;  // nobody answers
    FrameReader reader;
    auto m = receiveMessage(link.b, reader, Clock::now() + std::chrono::milliseconds(50));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded) << m.status();
  }
}

TEST(HandoverProtocolTest, MoreSocketsThanAFrameMayCarryAreRefusedBeforeAnythingIsSent) {
  Pair link;
  Message offer;
  offer.type = Message::Type::kOffer;
  offer.pid = 1;
  for (size_t i = 0; i <= kMaxDescriptors; ++i) {
    offer.sockets.push_back({Role::kOutbound, "x", common::UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC))});
  }
  auto st = sendMessage(link.a, offer, Clock::now() + std::chrono::seconds(1));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  char c;
  EXPECT_EQ(::recv(link.b, &c, 1, MSG_DONTWAIT), -1);
}

class TakeOverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    path_ = dir_.file("handover.sock");
  }
  int listenAt(const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd, 4), 0);
    return fd;
  }
  ferry::test_support::TempDir dir_{"handover"};
  std::string path_;
};

TEST_F(TakeOverTest, NoSocketFileMeansNoFerrydToTakeOverFrom) {
  auto taken = takeOver(path_, std::chrono::seconds(1));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_FALSE(taken->has_value());
}

TEST_F(TakeOverTest, AStaleSocketFileIsRemovedAndMeansNoFerryd) {
  ::close(listenAt(path_));  // the file stays, nobody accepts
  ASSERT_TRUE(std::filesystem::exists(path_));
  auto taken = takeOver(path_, std::chrono::seconds(1));
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_FALSE(taken->has_value());
  EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(TakeOverTest, ARunningFerrydsOfferIsTakenAndAnAnswerOtherThanAnOfferIsAnError) {
  int listener = listenAt(path_);
  for (bool offers : {true, false}) {
    std::thread old([&] {
      int link = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      ASSERT_GE(link, 0);
      FrameReader reader;
      auto hello = receiveMessage(link, reader, Clock::now() + std::chrono::seconds(2));
      ASSERT_TRUE(hello.ok()) << hello.status();
      EXPECT_EQ(hello->type, Message::Type::kHello);
      EXPECT_EQ(hello->pid, static_cast<int>(::getpid()));
      Message answer;
      answer.type = offers ? Message::Type::kOffer : Message::Type::kStatus;
      answer.pid = 99;
      if (offers) answer.sockets.push_back({Role::kAdmin, "127.0.0.1:15000", common::UniqueFd(::dup(listener))});
      EXPECT_TRUE(sendMessage(link, answer, Clock::now() + std::chrono::seconds(2)).ok());
      ::close(link);
    });
    auto taken = takeOver(path_, std::chrono::seconds(2));
    old.join();
    if (offers) {
      ASSERT_TRUE(taken.ok()) << taken.status();
      ASSERT_TRUE(taken->has_value());
      EXPECT_EQ((*taken)->old_pid, 99);
      ASSERT_EQ((*taken)->sockets.size(), 1u);
      EXPECT_EQ((*taken)->sockets[0].role, Role::kAdmin);
      EXPECT_TRUE((*taken)->link);
    } else {
      ASSERT_FALSE(taken.ok());
      EXPECT_NE(std::string(taken.status().message()).find("answered hello with status"), std::string::npos)
          << taken.status();
    }
  }
  ::close(listener);
}

}  // namespace
}  // namespace ferry::server::handover
