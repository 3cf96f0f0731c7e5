// Server::start's refusals that need no socket: a workload source this ferryd does not have.
#include "proxy/server/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ferry::server {
namespace {

TEST(ServerStartTest, RefusesTheKubernetesSourceUntilItIsBuiltIn) {
  auto config = config::parseConfig(
      "trust_domain: cluster.local\ncert_dir: /nonexistent/fy-certs\nworkload_source: kubernetes\n", "ferry.yaml", "",
      "fy-node-1");
  ASSERT_TRUE(config.ok()) << config.status();
  Server server(*std::move(config));
  absl::Status status = server.start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()), testing::HasSubstr("workload_source: kubernetes is not available"));
  EXPECT_FALSE(server.ready());
}

}  // namespace
}  // namespace ferry::server
