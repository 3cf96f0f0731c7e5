#pragma once
// ferry-ca keeps the trust bundle ConfigMap that every ferryd mounts (identity.source:
// cluster-ca): the roots of ferry-ca's own Secret, published so that an install takes one
// Secret and nothing else by hand, and so that a root rotation is one Secret update
// (docs/ferry-ca.md, "The bundle ConfigMap"). Only public roots leave the Secret: the key
// and the signing certificate never do.
//
// Each replica publishes the same bytes; the API server's optimistic concurrency
// (resourceVersion on update, AlreadyExists on create) settles two of them racing, and the
// loser compares again at once. A bundle that does not parse as CA certificates of PEM is
// never published: the last good one stays.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>

#include "absl/status/status.h"
#include "proxy/common/file.h"

namespace ferry::k8s {
class ApiClient;
}
namespace ferry::telemetry {
class Exposition;
}

namespace ferry::ca {

struct BundlePublisherOptions {
  std::string namespace_name;  // ferry-ca's own
  std::string config_map;      // its name (the chart's identity.clusterCa.bundleConfigMap)
  std::string key = "bundle.pem";
  std::string bundle_file;     // the Secret's bundle as mounted
  std::string trust_domain;
  // An unchanged bundle is compared with the ConfigMap this often, so that a ConfigMap
  // deleted or edited by hand is put back.
  std::chrono::seconds resync{60};
};

// After a failed publish the next waits kPublishRetryInitial, doubling up to kPublishRetryMax.
inline constexpr std::chrono::seconds kPublishRetryInitial{1};
inline constexpr std::chrono::seconds kPublishRetryMax{30};

class BundlePublisher {
 public:
  BundlePublisher(boost::asio::io_context& io, k8s::ApiClient& client, BundlePublisherOptions options);
  ~BundlePublisher();
  BundlePublisher(const BundlePublisher&) = delete;
  BundlePublisher& operator=(const BundlePublisher&) = delete;

  // Called every second (ferry-ca's CA poll): reads the bundle when its file changed and
  // starts a publish when one is due and none is in flight.
  void poll();
  // ferry_ca_bundle_* (docs/ferry-ca.md, Metrics).
  void collect(telemetry::Exposition& out) const;

 private:
  boost::asio::awaitable<void> publish(std::string pem);
  // One comparison and, when needed, one create or update. OK: the ConfigMap holds `pem`.
  boost::asio::awaitable<absl::Status> publishOnce(const std::string& pem, bool& wrote);

  boost::asio::io_context& io_;
  k8s::ApiClient& client_;
  BundlePublisherOptions options_;
  common::WatchedFile file_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::string pem_;          // the bundle to publish (last valid content of the file)
  std::string file_error_;   // why the file's content is not published, "" when it is good
  bool in_flight_ = false;
  bool in_sync_ = false;     // the ConfigMap held pem_ when last compared
  std::chrono::steady_clock::time_point due_{};  // next publish; epoch: at once
  std::chrono::seconds backoff_{0};
  uint64_t writes_ = 0;       // creates and updates that succeeded
  uint64_t failures_ = 0;     // publishes that did not end in sync
  uint64_t invalid_ = 0;      // bundle contents refused
};

}  // namespace ferry::ca
