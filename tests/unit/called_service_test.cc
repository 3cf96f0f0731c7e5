// destination_service at the destination reporter (docs/operations.md, "Istio TCP
// metrics"): the client says which Service it called in `forwarded: ...;host=` (as ztunnel
// does), the destination's ferryd counts the connection under it only when that Service
// lists the endpoint, else under the first Service that does; the reverse index of the
// Service table that decides it follows every change without touching older snapshots.
#include <gtest/gtest.h>

#include "proxy/hbone/connect_request.h"
#include "proxy/session/connect_target.h"
#include "proxy/workloads/registry.h"

namespace ferry::session {
namespace {

using workloads::intern;

common::IpAddress ip(const char* text) { return common::canonicalIp(*common::parseIp(text)); }
common::HostPort hp(const char* text, uint16_t port) { return {ip(text), port}; }

std::string forwarded(const std::vector<hbone::Header>& headers) {
  for (const auto& h : headers) {
    if (h.name == "forwarded") return h.value;
  }
  return "<absent>";
}

TEST(CalledServiceTest, TheClientNamesTheServiceInForwardedHostAsZtunnelDoes) {
  auto with = hbone::buildConnectHeaders(
      {hp("10.0.2.10", 8080), hp("10.0.1.10", 40000), "shop", "web", "cart.shop.svc.cluster.local"});
  EXPECT_EQ(forwarded(with), "for=\"10.0.1.10:40000\";host=cart.shop.svc.cluster.local");
  EXPECT_EQ(hbone::forwardedHost(with), "cart.shop.svc.cluster.local");
  auto without = hbone::buildConnectHeaders({hp("10.0.2.10", 8080), hp("10.0.1.10", 40000), "shop", "web", {}});
  EXPECT_EQ(forwarded(without), "for=\"10.0.1.10:40000\"");
  EXPECT_EQ(hbone::forwardedHost(without), "");
  // RFC 7239 forms: quoted, another case, among other pairs; only the first hop is read.
  EXPECT_EQ(hbone::forwardedHost({{"forwarded", "for=\"a\"; Host=\"x.y.svc.td\";proto=http"}}), "x.y.svc.td");
  EXPECT_EQ(hbone::forwardedHost({{"forwarded", "for=a, for=b;host=x.y.svc.td"}}), "");
  EXPECT_EQ(hbone::forwardedHost({{"forwarded", "host="}}), "");
  EXPECT_EQ(hbone::forwardedHost({}), "");
}

class ServiceIndexTest : public ::testing::Test {
 protected:
  static workloads::ServiceUpdate service(const char* vip, uint16_t port, const char* name,
                                          std::vector<workloads::ServicePort> endpoints) {
    return {{ip(vip), port}, workloads::ServiceBackends{intern(name), std::move(endpoints)}};
  }
  static std::vector<std::string> names(const workloads::ServiceTable& t, const workloads::ServicePort& endpoint) {
    std::vector<std::string> out;
    for (const auto& n : t.servicesOf(endpoint)) out.push_back(n.str());
    std::sort(out.begin(), out.end());
    return out;
  }
  workloads::Store store_{"n2"};
  const workloads::ServicePort pod_a_{ip("10.0.2.10"), 8080};
  const workloads::ServicePort pod_b_{ip("10.0.2.11"), 8080};
};

TEST_F(ServiceIndexTest, TheReverseIndexFollowsAddsChangesAndRemovalsAndKeepsOldSnapshots) {
  store_.applyServices({service("10.96.0.1", 80, "shop/cart", {pod_a_, pod_b_}),
                        service("10.96.0.1", 8080, "shop/cart", {pod_a_}),
                        service("10.96.0.2", 80, "shop/cart-canary", {pod_a_})});
  auto first = store_.services();
  EXPECT_EQ(names(*first, pod_a_), (std::vector<std::string>{"shop/cart", "shop/cart", "shop/cart-canary"}))
      << "once per port that reaches it";
  EXPECT_EQ(names(*first, pod_b_), (std::vector<std::string>{"shop/cart"}));
  // cart's port 80 loses pod a; the canary goes.
  store_.applyServices({service("10.96.0.1", 80, "shop/cart", {pod_b_}), {{ip("10.96.0.2"), 80}, std::nullopt}});
  auto second = store_.services();
  EXPECT_EQ(names(*second, pod_a_), (std::vector<std::string>{"shop/cart"})) << "still through port 8080";
  EXPECT_EQ(names(*second, pod_b_), (std::vector<std::string>{"shop/cart"}));
  store_.applyServices({{{ip("10.96.0.1"), 80}, std::nullopt}, {{ip("10.96.0.1"), 8080}, std::nullopt}});
  EXPECT_TRUE(store_.services()->servicesOf(pod_a_).empty());
  EXPECT_TRUE(store_.services()->servicesOf(pod_b_).empty());
  EXPECT_EQ(names(*first, pod_a_).size(), 3u) << "a snapshot never changes";
}

TEST_F(ServiceIndexTest, OnlyAServiceThatListsTheEndpointIsCounted) {
  store_.applyServices({service("10.96.0.1", 80, "shop/cart", {pod_a_}),
                        service("10.96.0.2", 80, "shop/basket", {pod_a_}),
                        service("10.96.0.3", 80, "shop/other", {pod_b_})});
  auto table = store_.services();
  EXPECT_EQ(calledService("cart.shop.svc.cluster.local", "cluster.local", *table, pod_a_).str(), "shop/cart");
  EXPECT_EQ(calledService("basket.shop.svc.cluster.local", "cluster.local", *table, pod_a_).str(), "shop/basket");
  // A Service that does not list the endpoint, a made-up one, another domain, none at all:
  // the first by name of those that do, as ztunnel guesses; never the claimed name.
  for (const char* claim : {"other.shop.svc.cluster.local", "fy-made-up.shop.svc.cluster.local",
                            "cart.shop.svc.other.domain", "cart.shop", "", "..svc.cluster.local"}) {
    EXPECT_EQ(calledService(claim, "cluster.local", *table, pod_a_).str(), "shop/basket") << claim;
  }
  EXPECT_EQ(calledService("cart.shop.svc.cluster.local", "cluster.local", *table, {ip("10.0.2.99"), 8080}).str(), "")
      << "an endpoint no Service lists";
}

}  // namespace
}  // namespace ferry::session
