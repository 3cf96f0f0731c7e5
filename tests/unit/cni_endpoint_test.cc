// ferryd's enrolment endpoint (proxy/server/cni_endpoint.h) on a real unix socket in a temp
// folder, with a fake enrolment behind it: the answers, the records a restart reads back,
// malformed requests, an ADD that waits and one a DEL overtakes. The peer must be root
// (SO_PEERCRED), so the test needs root; tests/e2e/cni_e2e.sh case 6 shows a non-root
// client refused.
#include "proxy/server/cni_endpoint.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "proxy/common/file.h"
#include "proxy/telemetry/metrics.h"
#include "tests/support/temp_dir.h"

namespace ferry::server {
namespace {

// Answers ADD after `pending_adds` attempts (each one "not yet"), or never when negative.
class FakeEnrolment : public CniEnrolment {
 public:
  std::atomic<int> pending_adds{0};
  std::atomic<int> adds{0}, dels{0};
  std::optional<cni::Answer> add(const cni::Request& r, std::string* pending) override {
    ++adds;
    if (pending_adds != 0) {
      if (pending_adds > 0) --pending_adds;
      *pending = "the pod's object has not arrived";
      return std::nullopt;
    }
    return cni::Answer{cni::Verdict::kEnrolled, "", "veth-" + r.pod_name};
  }
  cni::Answer del(const cni::Request&) override {
    ++dels;
    return cni::Answer{cni::Verdict::kReleased, "", ""};
  }
  cni::Answer check(const cni::Request&) override { return cni::Answer{cni::Verdict::kEnrolled, "", "veth"}; }
};

class CniEndpointTest : public testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the endpoint answers root only (SO_PEERCRED)";
    ASSERT_TRUE(dir_.ok());
    config_.enabled = true;
    config_.socket = dir_.file("cni.sock");
    config_.state_dir = dir_.file("records");
    config_.pod_wait = std::chrono::milliseconds(200);
  }
  void TearDown() override {
    stop();
  }
  void start() {
    endpoint_ = std::make_unique<CniEndpoint>(io_, config_, fake_);
    ASSERT_TRUE(endpoint_->start().ok());
    thread_ = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io_);
      io_.run();
    });
  }
  void stop() {
    if (!thread_.joinable()) return;
    boost::asio::post(io_, [this] { endpoint_->stop(); });
    io_.stop();
    thread_.join();
  }
  // One exchange of raw bytes; the answer's JSON, or "" when the connection closed first.
  std::string exchange(const std::string& raw) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, config_.socket.c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
    (void)::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
    std::string in;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) in.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return in.size() > 4 ? in.substr(4) : "";
  }
  std::optional<cni::Answer> ask(const cni::Request& r) {
    std::string body = cni::encodeRequest(r);
    std::string error;
    std::string out = exchange(cni::frameHeader(static_cast<uint32_t>(body.size())) + body);
    return cni::decodeAnswer(out, &error);
  }
  static cni::Request request(cni::Verb verb, const std::string& id, const std::string& name = "web-0") {
    cni::Request r;
    r.verb = verb;
    r.container_id = id;
    r.pod_namespace = "shop";
    r.pod_name = name;
    r.ips = {"10.244.0.9"};
    r.host_interfaces = {"veth1"};
    return r;
  }
  bool recorded(const std::string& id) { return std::filesystem::exists(config_.state_dir + "/" + id + ".json"); }

  ferry::test_support::TempDir dir_{"cni-endpoint"};
  config::Cni config_;
  boost::asio::io_context io_;
  FakeEnrolment fake_;
  std::unique_ptr<CniEndpoint> endpoint_;
  std::thread thread_;
};

TEST_F(CniEndpointTest, AnAddIsAnsweredOnceEnrolledAndRecordedUntilItsDel) {
  fake_.pending_adds = 3;
  start();
  EXPECT_EQ(std::filesystem::status(config_.socket).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
      << "0600 from its creation";
  auto a = ask(request(cni::Verb::kAdd, "c1"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verdict, cni::Verdict::kEnrolled);
  EXPECT_EQ(a->device, "veth-web-0");
  EXPECT_EQ(fake_.adds, 4) << "asked again while it could not tell";
  EXPECT_TRUE(recorded("c1"));
  a = ask(request(cni::Verb::kDel, "c1"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verdict, cni::Verdict::kReleased);
  EXPECT_FALSE(recorded("c1"));
}

TEST_F(CniEndpointTest, AnAddFerrydCannotDecideWithinPodWaitIsAnsweredRetryWithTheReason) {
  fake_.pending_adds = -1;
  start();
  auto a = ask(request(cni::Verb::kAdd, "c2"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verdict, cni::Verdict::kRetry);
  EXPECT_EQ(a->reason, "the pod's object has not arrived");
  EXPECT_FALSE(recorded("c2"));
}

TEST_F(CniEndpointTest, ADelOvertakingAWaitingAddCancelsIt) {
  fake_.pending_adds = -1;
  config_.pod_wait = std::chrono::milliseconds(5'000);
  start();
  std::optional<cni::Answer> add;
  std::thread adder([&] { add = ask(request(cni::Verb::kAdd, "c3")); });
  while (fake_.adds == 0) std::this_thread::yield();
  auto del = ask(request(cni::Verb::kDel, "c3"));
  adder.join();
  ASSERT_TRUE(del && add);
  EXPECT_EQ(del->verdict, cni::Verdict::kReleased);
  EXPECT_EQ(add->verdict, cni::Verdict::kError);
  EXPECT_NE(add->reason.find("deleted"), std::string::npos) << add->reason;
  EXPECT_FALSE(recorded("c3"));
}

TEST_F(CniEndpointTest, MalformedRequestsGetAnErrorAndTheEndpointKeepsServing) {
  start();
  std::string error;
  auto answer = [&](const std::string& raw) { return cni::decodeAnswer(exchange(raw), &error); };
  auto a = answer(cni::frameHeader(0));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verdict, cni::Verdict::kError);
  a = answer(cni::frameHeader(1 << 20) + "x");
  ASSERT_TRUE(a);
  EXPECT_NE(a->reason.find("at most"), std::string::npos) << a->reason;
  a = answer(cni::frameHeader(5) + "{nope");
  ASSERT_TRUE(a);
  EXPECT_NE(a->reason.find("not JSON"), std::string::npos) << a->reason;
  std::string v2 = R"({"version":2,"verb":"ADD"})";
  a = answer(cni::frameHeader(static_cast<uint32_t>(v2.size())) + v2);
  ASSERT_TRUE(a);
  EXPECT_NE(a->reason.find("version 2"), std::string::npos) << a->reason;
  cni::Request escape = request(cni::Verb::kAdd, "../../etc/x");
  auto e = ask(escape);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->verdict, cni::Verdict::kError) << "a container id is never a path";
  EXPECT_EQ(fake_.adds, 0);
  // A DEL's id names the record it removes: one climbing out of the state folder removes
  // nothing there (the file beside the folder is still there).
  std::string outside = (std::filesystem::path(config_.state_dir).parent_path() / "victim.json").string();
  std::ofstream(outside) << "{}";
  auto d = ask(request(cni::Verb::kDel, "../victim"));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->verdict, cni::Verdict::kError);
  EXPECT_EQ(d->reason, "ferryd does not understand the request: containerId is not a container id");
  EXPECT_TRUE(std::filesystem::exists(outside));
  std::filesystem::remove(outside);
  auto ok = ask(request(cni::Verb::kAdd, "c4"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->verdict, cni::Verdict::kEnrolled);
}

TEST_F(CniEndpointTest, RestoreAddsTheRecordsWhoseSandboxStillExistsAndDropsTheRest) {
  std::filesystem::create_directories(config_.state_dir);
  ASSERT_TRUE(common::writeFileAtomic(config_.state_dir + "/alive.json",
                                      cni::encodeRequest(request(cni::Verb::kAdd, "alive", "a")), 0600)
                  .ok());
  ASSERT_TRUE(common::writeFileAtomic(config_.state_dir + "/gone.json",
                                      cni::encodeRequest(request(cni::Verb::kAdd, "gone", "g")), 0600)
                  .ok());
  ASSERT_TRUE(common::writeFileAtomic(config_.state_dir + "/broken.json", "{", 0600).ok());
  CniEndpoint endpoint(io_, config_, fake_);
  endpoint.restore([](const cni::Request& r) { return r.container_id == "alive"; });
  EXPECT_EQ(fake_.adds, 1);
  EXPECT_TRUE(recorded("alive"));
  EXPECT_FALSE(recorded("gone"));
  EXPECT_FALSE(recorded("broken"));
  std::string metrics = telemetry::textOf(endpoint);
  EXPECT_NE(metrics.find("ferry_cni_restored_sandboxes_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ferry_cni_dropped_records_total 2\n"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace ferry::server
