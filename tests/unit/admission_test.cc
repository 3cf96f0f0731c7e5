// Admission limits without sockets: which limit refuses, that a ticket gives its place
// back, and that a finished handshake frees only the pending place.
#include "proxy/session/admission.h"

#include <sys/resource.h>

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
