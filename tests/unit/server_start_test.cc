// Server::start's refusals that need no socket: a Kubernetes source with nothing to reach.
#include "proxy/server/server.h"

#include <gmock/gmock.h>
#include <stdlib.h>
#include <gtest/gtest.h>

namespace ferry::server {
namespace {

// Outside a cluster and without a kubeconfig there is no API server to follow: ferryd
// refuses to start rather than serve an empty registry, and says what to set.
TEST(ServerStartTest, TheKubernetesSourceWithoutCredentialsRefusesToStartAndSaysWhy) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  auto config = config::parseConfig(
      "trust_domain: cluster.local\ncert_dir: /nonexistent/fy-certs\nworkload_source: kubernetes\n", "ferry.yaml", "",
      "fy-node-1");
  ASSERT_TRUE(config.ok()) << config.status();
  Server server(*std::move(config));
  absl::Status status = server.start();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr("kubernetes: in-cluster credentials"));
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr("set kubernetes.kubeconfig"));
  EXPECT_FALSE(server.ready());
}

TEST(ServerStartTest, AKubeconfigThatCannotBeReadIsNamedInTheError) {
  auto config = config::parseConfig(
      "trust_domain: cluster.local\ncert_dir: /nonexistent/fy-certs\nworkload_source: kubernetes\n"
      "kubernetes:\n  kubeconfig: /nonexistent/fy-kubeconfig\n",
      "ferry.yaml", "", "fy-node-1");
  ASSERT_TRUE(config.ok()) << config.status();
  Server server(*std::move(config));
  absl::Status status = server.start();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr("kubernetes.kubeconfig: "));
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr("/nonexistent/fy-kubeconfig"));
}

}  // namespace
}  // namespace ferry::server
