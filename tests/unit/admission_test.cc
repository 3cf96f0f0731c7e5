// Admission limits without sockets: which limit refuses, that a ticket gives its place
// back, and that a finished handshake frees only the pending place.
#include "proxy/session/admission.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ferry::session {
namespace {

common::IpAddress ip(const char* text) { return boost::asio::ip::make_address(text); }

config::Limits smallLimits() {
  config::Limits limits;
  limits.hbone = {/*max_connections=*/4, /*per_source=*/3, /*pending=*/3, /*pending_per_source=*/2};
  return limits;
}

TEST(AdmissionLimitsTest, RefusesTheExcessOfOneSourceAndNamesThePendingLimit) {
  Admission admission(smallLimits());
  Refusal why{};
  auto a = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
  auto b = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
  EXPECT_EQ(why, Refusal::kPendingPerSource);
  EXPECT_EQ(admission.refused(Listener::kHbone, Refusal::kPendingPerSource), 1u);
  // Another source still gets in; the global pending limit is next.
  EXPECT_NE(admission.admit(Listener::kHbone, ip("10.0.0.2"), why), nullptr);
}

TEST(AdmissionLimitsTest, AFinishedHandshakeFreesOnlyThePendingPlace) {
  Admission admission(smallLimits());
  Refusal why{};
  auto a = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
  auto b = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
  a->handshakeDone();
  a->handshakeDone();  // idempotent
  EXPECT_EQ(admission.pending(Listener::kHbone), 1);
  auto c = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
  ASSERT_NE(c, nullptr);
  c->handshakeDone();
  b->handshakeDone();
  // Three established from one source: the connection limit per source, not pending.
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
  EXPECT_EQ(why, Refusal::kConnectionsPerSource);
  EXPECT_EQ(admission.connections(Listener::kHbone), 3);
}

TEST(AdmissionLimitsTest, ReleasingATicketGivesItsPlaceBack) {
  Admission admission(smallLimits());
  Refusal why{};
  std::vector<Admitted> held;
  for (const char* source : {"10.0.0.1", "10.0.0.2", "10.0.0.3"}) {
    held.push_back(admission.admit(Listener::kHbone, ip(source), why));
    held.back()->handshakeDone();
  }
  held.push_back(admission.admit(Listener::kHbone, ip("10.0.0.4"), why));
  ASSERT_NE(held.back(), nullptr);
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.5"), why), nullptr);
  EXPECT_EQ(why, Refusal::kConnections);
  held.erase(held.begin());
  EXPECT_EQ(admission.released(), 1u);
  EXPECT_NE(admission.admit(Listener::kHbone, ip("10.0.0.5"), why), nullptr);
  // A pending ticket released without a handshake frees its pending place too.
  held.clear();
  EXPECT_EQ(admission.connections(Listener::kHbone), 0);
  EXPECT_EQ(admission.pending(Listener::kHbone), 0);
}

// At max_pending_handshakes: a new client from a source holding fewer pending handshakes
// takes the place of the oldest pending one of a heavier source, once that has waited
// Admission::kEvictAfter (docs/security.md, "Admission limits").
class AdmissionEvictionTest : public ::testing::Test {
 protected:
  static config::Limits limits() {
    config::Limits l;
    l.hbone = {/*max_connections=*/10, /*per_source=*/3, /*pending=*/3, /*pending_per_source=*/3};
    return l;
  }
  Admitted admit(const char* source, bool evictable = true, SourceKind kind = SourceKind::kUnknown) {
    Refusal why{};
    auto t = admission_.admit(Listener::kHbone, ip(source), why, DescriptorUse::kWithinCap, kind);
    last_refusal_ = why;
    if (t && evictable) t->setEvictor([this, source] { evicted_.push_back(source); });
    return t;
  }
  std::chrono::steady_clock::time_point now_{};
  Admission admission_{limits(), [this] { return now_; }};
  std::vector<std::string> evicted_;
  Refusal last_refusal_{};
};

TEST_F(AdmissionEvictionTest, ASourceHoldingSeveralMakesRoomAtOnceTheOldestFirst) {
  auto a1 = admit("10.0.0.1");
  auto a2 = admit("10.0.0.1");
  auto b1 = admit("10.0.0.2");
  // Full. A holds two: its oldest goes for a newcomer that holds none, without waiting.
  auto c1 = admit("10.0.0.3");
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(evicted_, std::vector<std::string>{"10.0.0.1"});
  EXPECT_EQ(admission_.evicted(Listener::kHbone), 1u);
  // The evicted connection still counts until it has gone, but not against the limit.
  EXPECT_EQ(admission_.pending(Listener::kHbone), 4);
  a1.reset();
  EXPECT_EQ(admission_.pending(Listener::kHbone), 3);
}

TEST_F(AdmissionEvictionTest, ASourcesOnlyHandshakeIsSparedForEvictAfter) {
  auto a1 = admit("10.0.0.1");
  now_ += std::chrono::milliseconds(10);
  auto b1 = admit("10.0.0.2");
  auto c1 = admit("10.0.0.3");
  // One each, all young: a newcomer is refused as before.
  EXPECT_EQ(admit("10.0.0.4"), nullptr);
  EXPECT_EQ(last_refusal_, Refusal::kPending);
  EXPECT_TRUE(evicted_.empty());
  now_ += Admission::kEvictAfter - std::chrono::milliseconds(5);
  // a1 has waited long enough; b1 and c1 not yet.
  auto d1 = admit("10.0.0.4");
  ASSERT_NE(d1, nullptr);
  EXPECT_EQ(evicted_, std::vector<std::string>{"10.0.0.1"});
  EXPECT_EQ(admit("10.0.0.5"), nullptr) << "b1 and c1 are still young";
}

TEST_F(AdmissionEvictionTest, ASourceNeverTakesThePlaceOfOneHoldingNoMoreThanItself) {
  auto a1 = admit("10.0.0.1");
  auto b1 = admit("10.0.0.2");
  auto b2 = admit("10.0.0.2");
  now_ += Admission::kEvictAfter;
  // B holds two: neither A's one nor its own are taken for a third of B's.
  EXPECT_EQ(admit("10.0.0.2"), nullptr);
  EXPECT_EQ(last_refusal_, Refusal::kPending);
  EXPECT_TRUE(evicted_.empty());
}

TEST_F(AdmissionEvictionTest, DoneOrUnendableConnectionsAreNeverEvicted) {
  auto a1 = admit("10.0.0.1", /*evictable=*/false);
  auto a2 = admit("10.0.0.1");
  auto a3 = admit("10.0.0.1");
  a2->handshakeDone();  // an established tunnel: not pending, never evicted
  auto b1 = admit("10.0.0.2");
  now_ += Admission::kEvictAfter;
  auto c1 = admit("10.0.0.3");
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(evicted_, std::vector<std::string>{"10.0.0.1"}) << "a3, A's first with an evictor";
  a3->handshakeDone();  // the eviction raced a finished handshake: counts stay right
  a3.reset();
  EXPECT_EQ(admission_.pending(Listener::kHbone), 3);  // a1, b1, the newcomer
}

// Issue 34: however many addresses a flood comes from (each holding one young pending
// handshake, so that no rule above makes room), a mesh workload's new tunnel gets a place at
// once; an unknown address never takes a workload's.
TEST_F(AdmissionEvictionTest, AWorkloadTakesAnUnknownAddresssPlaceAtOnceWhateverTheSpread) {
  auto a1 = admit("10.0.0.1");
  auto b1 = admit("10.0.0.2");
  auto c1 = admit("10.0.0.3");
  // One each, all young: an unknown newcomer is refused, a workload is not.
  EXPECT_EQ(admit("10.0.0.4"), nullptr);
  auto w1 = admit("10.1.0.1", true, SourceKind::kWorkload);
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(evicted_, std::vector<std::string>{"10.0.0.1"}) << "the oldest unknown one";
  auto w2 = admit("10.1.0.2", true, SourceKind::kWorkload);
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(evicted_, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  // Now old and alone at their sources: still never taken for an unknown address.
  now_ += Admission::kEvictAfter * 10;
  auto d1 = admit("10.0.0.4");
  ASSERT_NE(d1, nullptr) << "c1, unknown and old, makes room";
  EXPECT_EQ(evicted_, (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "10.0.0.3"}));
  EXPECT_EQ(admit("10.0.0.5"), nullptr) << "d1 is young, w1 and w2 are workloads'";
  EXPECT_EQ(last_refusal_, Refusal::kPending);
  // A workload takes an unknown address's place before another workload's, even a younger
  // one: d1 goes, not w1 (past kEvictAfter).
  auto w3 = admit("10.1.0.3", true, SourceKind::kWorkload);
  ASSERT_NE(w3, nullptr);
  EXPECT_EQ(evicted_.back(), "10.0.0.4");
  // Between workloads the rules above hold: the old ones alone at their sources make room,
  // the young ones are spared.
  auto w4 = admit("10.1.0.4", true, SourceKind::kWorkload);
  auto w5 = admit("10.1.0.5", true, SourceKind::kWorkload);
  ASSERT_NE(w4, nullptr);
  ASSERT_NE(w5, nullptr);
  EXPECT_EQ(evicted_, (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.1.0.1",
                                                "10.1.0.2"}));
  EXPECT_EQ(admit("10.1.0.6", true, SourceKind::kWorkload), nullptr) << "w3, w4 and w5 are young";
  EXPECT_EQ(admission_.evicted(Listener::kHbone), 6u);
}

// max_new_connections_per_source_per_second: a source may open max(rate, per-source cap)
// at once, then `rate` a second, whether or not it keeps them; another source is not
// slowed; closing does not give tokens back.
TEST(AdmissionLimitsTest, TheDescriptorCapCountsDescriptorsNotTheirNumbers) {
  // A stretch of the table of our own: 600 to 607 taken, `cap` at 608 (the numbers above
  // are free, and those below are not looked at).
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null, 0);
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) fds.push_back(::fcntl(null, F_DUPFD_CLOEXEC, 600));
  ::close(null);
  const int first = fds.front();
  const int cap = first + 8;
  ASSERT_EQ(fds.back(), cap - 1);
  Admission admission(config::Limits{});
  EXPECT_EQ(admission.descriptorUse(cap, cap), DescriptorUse::kInSlack);
  EXPECT_EQ(admission.descriptorUse(cap - 1, cap), DescriptorUse::kWithinCap) << "nothing is open above the cap";

  // A source flooding with pending connections, each of which can be ended.
  Refusal why{};
  int ended = 0;
  std::vector<Admitted> flood;
  for (int i = 0; i < 3; ++i) {
    flood.push_back(admission.admit(Listener::kHbone, ip("10.0.0.1"), why));
    ASSERT_NE(flood.back(), nullptr);
    flood.back()->setEvictor([&] { ++ended; });
  }
  // A new client admitted above the cap (its connection in the slack) ends one of them.
  auto newcomer = admission.admit(Listener::kHbone, ip("10.0.0.9"), why, DescriptorUse::kInSlack);
  ASSERT_NE(newcomer, nullptr);
  EXPECT_EQ(ended, 1);
  // A socket accepted into the hole it left (fds[3]), no other hole below the cap: with it
  // the data plane holds cap descriptors.
  const int hole = fds[3];
  EXPECT_EQ(admission.descriptorUse(hole, cap), DescriptorUse::kAtCap);
  // Another hole: a socket in one of the two leaves the data plane within its cap.
  const int hole2 = fds[5];
  ::close(hole2);
  fds[5] = -1;
  EXPECT_EQ(admission.descriptorUse(hole, cap), DescriptorUse::kWithinCap);
  EXPECT_EQ(::fcntl(hole2, F_GETFD), -1) << "the probe gave back what it took";

  // At the cap the flooding source cannot take back the hole; another new client can, by
  // ending one more of the flood's.
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.1"), why, DescriptorUse::kAtCap), nullptr);
  EXPECT_EQ(why, Refusal::kDescriptors);
  EXPECT_NE(admission.admit(Listener::kHbone, ip("10.0.0.2"), why, DescriptorUse::kAtCap), nullptr);
  EXPECT_EQ(ended, 2);

  // One hole again while the newcomer is open above the cap: at it. Once it closes, the
  // hole is within the cap.
  fds[5] = ::fcntl(first, F_DUPFD_CLOEXEC, hole2);
  ASSERT_EQ(fds[5], hole2);
  EXPECT_EQ(admission.descriptorUse(hole, cap), DescriptorUse::kAtCap);
  newcomer.reset();
  EXPECT_EQ(admission.descriptorUse(hole, cap), DescriptorUse::kWithinCap);
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
}

TEST(AdmissionLimitsTest, NewConnectionsPerSourceAreRateLimited) {
  std::chrono::steady_clock::time_point now{};
  config::Limits limits;
  limits.hbone = {/*max_connections=*/100, /*per_source=*/8, /*pending=*/100, /*pending_per_source=*/8, /*rate=*/4};
  Admission admission(limits, [&] { return now; });
  Refusal why{};
  for (int i = 0; i < 8; ++i) {
    auto t = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
    ASSERT_NE(t, nullptr) << i;  // closed at once: a reconnecting client
  }
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
  EXPECT_EQ(why, Refusal::kRatePerSource);
  EXPECT_EQ(admission.refused(Listener::kHbone, Refusal::kRatePerSource), 1u);
  EXPECT_NE(admission.admit(Listener::kHbone, ip("10.0.0.2"), why), nullptr) << "another source is not slowed";
  EXPECT_NE(admission.admit(Listener::kHbone, ip("::ffff:10.0.0.3"), why), nullptr);
  // A quarter of a second later: one more (4 a second).
  now += std::chrono::milliseconds(250);
  EXPECT_NE(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
  // Ten seconds of a client retrying every 10 ms: 40 admitted, the rest refused.
  int admitted = 0, refused = 0;
  for (int i = 0; i < 1000; ++i) {
    now += std::chrono::milliseconds(10);
    (admission.admit(Listener::kHbone, ip("10.0.0.1"), why) ? admitted : refused)++;
  }
  EXPECT_EQ(admitted, 40);
  EXPECT_EQ(refused, 960);
  // Other listeners have no rate by default; a reload that sets it to 0 lifts it.
  limits.hbone.max_new_per_source_per_second = 0;
  admission.setLimits(limits);
  for (int i = 0; i < 20; ++i) EXPECT_NE(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
}

TEST(AdmissionLimitsTest, ListenersAreCountedApart) {
  Admission admission(smallLimits());
  Refusal why{};
  std::vector<Admitted> hbone;
  for (int i = 0; i < 2; ++i) hbone.push_back(admission.admit(Listener::kHbone, ip("10.0.0.1"), why));
  // The outbound listener has its own (default) limits.
  EXPECT_NE(admission.admit(Listener::kOutbound, ip("10.0.0.1"), why), nullptr);
}

TEST(AdmissionLimitsTest, IPv4AndItsMappedFormAreOneSource) {
  Admission admission(smallLimits());
  Refusal why{};
  auto a = admission.admit(Listener::kHbone, ip("10.0.0.1"), why);
  auto b = admission.admit(Listener::kHbone, ip("::ffff:10.0.0.1"), why);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(admission.admit(Listener::kHbone, ip("10.0.0.1"), why), nullptr);
  EXPECT_EQ(why, Refusal::kPendingPerSource);
}

TEST(AdmissionLimitsTest, DescriptorCapIsTheLimitMinusTheReserve) {
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < 1024) GTEST_SKIP() << "needs a finite RLIMIT_NOFILE >= 1024";
  auto cap = dataPlaneDescriptorCap(256);
  ASSERT_TRUE(cap.ok()) << cap.status();
  EXPECT_EQ(*cap, static_cast<int>(rl.rlim_cur) - 256);
  // A reserve that leaves the data plane almost nothing is a start-up error.
  EXPECT_FALSE(dataPlaneDescriptorCap(static_cast<uint32_t>(rl.rlim_cur) - 10).ok());
}

TEST(AdmissionLimitsTest, AcceptErrorsAreClassifiedForTheOperator) {
  auto sys = [](int e) { return boost::system::error_code(e, boost::system::system_category()); };
  EXPECT_EQ(classifyAcceptError(sys(EMFILE)), AcceptError::kDescriptors);
  EXPECT_EQ(classifyAcceptError(sys(ENFILE)), AcceptError::kDescriptors);
  EXPECT_EQ(classifyAcceptError(sys(ENOBUFS)), AcceptError::kMemory);
  EXPECT_EQ(classifyAcceptError(sys(ECONNABORTED)), AcceptError::kOther);
}

}  // namespace
}  // namespace ferry::session
