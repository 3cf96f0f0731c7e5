#include "proxy/ca/bundle_publisher.h"

#include <algorithm>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/ca/cluster_ca_source.h"
#include "proxy/common/log.h"
#include "proxy/k8s/client.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::ca {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A bundle larger than this is refused: the API server stores at most 1 MiB per object, and
// even hundreds of roots are far below it (about 1 KiB each).
constexpr size_t kMaxBundleBytes = 512 * 1024;

std::string configMapPath(const BundlePublisherOptions& o) {
  return absl::StrCat("/api/v1/namespaces/", o.namespace_name, "/configmaps/", o.config_map);
}

}  // namespace

BundlePublisher::BundlePublisher(asio::io_context& io, k8s::ApiClient& client, BundlePublisherOptions options)
    : io_(io), client_(client), options_(std::move(options)), file_(options_.bundle_file, kMaxBundleBytes) {}

BundlePublisher::~BundlePublisher() { alive_ = std::make_shared<bool>(false); }

void BundlePublisher::poll() {
  auto result = file_.poll();
  if (result == common::WatchedFile::Result::kFailed) {
    std::string why(file_.error().message());
    if (why != file_error_) {
      FERRY_LOG(kWarn, "ferry-ca: bundle %s: %s; the ConfigMap %s/%s keeps what it has", options_.bundle_file, why,
                options_.namespace_name, options_.config_map);
      file_error_ = std::move(why);
    }
  } else if (result == common::WatchedFile::Result::kChanged) {
    // Only a bundle ferryd could load is published: PEM, every certificate a CA.
    if (auto parsed = parseBundle(file_.content(), options_.trust_domain); !parsed.ok()) {
      ++invalid_;
      file_error_ = std::string(parsed.status().message());
      FERRY_LOG(kWarn, "ferry-ca: bundle %s is not published: %s", options_.bundle_file, file_error_);
    } else {
      file_error_.clear();
      if (file_.content() != pem_) {
        pem_ = file_.content();
        in_sync_ = false;
        due_ = {};  // at once
        backoff_ = std::chrono::seconds(0);
      }
    }
  }
  if (pem_.empty() || in_flight_ || std::chrono::steady_clock::now() < due_) return;
  in_flight_ = true;
  asio::co_spawn(io_, publish(pem_), asio::detached);
}

asio::awaitable<void> BundlePublisher::publish(std::string pem) {
  std::weak_ptr<bool> alive = alive_;
  bool wrote = false;
  absl::Status st = co_await publishOnce(pem, wrote);
  if (alive.expired()) co_return;
  in_flight_ = false;
  auto now = std::chrono::steady_clock::now();
  if (pem != pem_) {  // the file changed meanwhile: publish the new one next
    due_ = {};
    co_return;
  }
  if (st.ok()) {
    if (wrote) {
      ++writes_;
      FERRY_LOG(kInfo, "ferry-ca: trust bundle published to ConfigMap %s/%s (key %s)", options_.namespace_name,
                options_.config_map, options_.key);
    }
    if (!in_sync_ && !wrote) {
      FERRY_LOG(kInfo, "ferry-ca: ConfigMap %s/%s already holds the trust bundle", options_.namespace_name,
                options_.config_map);
    }
    in_sync_ = true;
    backoff_ = std::chrono::seconds(0);
    due_ = now + options_.resync;
  } else if (absl::IsAborted(st)) {
    due_ = {};  // lost a race with another replica: compare again at once
  } else {
    ++failures_;
    in_sync_ = false;
    backoff_ = backoff_.count() == 0 ? kPublishRetryInitial : std::min(backoff_ * 2, kPublishRetryMax);
    due_ = now + backoff_;
    FERRY_LOG(kWarn, "ferry-ca: ConfigMap %s/%s: %s; trying again in %ds", options_.namespace_name,
              options_.config_map, st.message(), static_cast<int>(backoff_.count()));
  }
}

asio::awaitable<absl::Status> BundlePublisher::publishOnce(const std::string& pem, bool& wrote) {
  const std::string path = configMapPath(options_);
  auto got = co_await client_.call("GET", path, "");
  if (!got.ok()) co_return got.status();
  if (got->status == 404) {
    json::object object{{"apiVersion", "v1"}, {"kind", "ConfigMap"}};
    object["metadata"] = json::object{
        {"name", options_.config_map},
        {"namespace", options_.namespace_name},
        {"labels", json::object{{"app.kubernetes.io/managed-by", "ferry-ca"}}},
        {"annotations", json::object{{"ferry.io/source", "ferry-ca publishes its Secret's trust bundle here"}}}};
    object["data"] = json::object{{options_.key, pem}};
    auto made = co_await client_.call("POST", absl::StrCat("/api/v1/namespaces/", options_.namespace_name, "/configmaps"),
                                      json::serialize(object));
    if (!made.ok()) co_return made.status();
    if (made->status == 409) co_return absl::AbortedError("created by another replica meanwhile");
    if (made->status / 100 != 2) {
      co_return absl::UnavailableError(absl::StrCat("create: HTTP ", made->status, ": ", made->message));
    }
    wrote = true;
    co_return absl::OkStatus();
  }
  if (got->status / 100 != 2) co_return absl::UnavailableError(absl::StrCat("get: HTTP ", got->status, ": ", got->message));
  boost::system::error_code ec;
  json::value parsed = json::parse(got->body, ec);
  if (ec || !parsed.is_object()) co_return absl::UnavailableError("get: the answer is not a ConfigMap object");
  json::object& object = parsed.as_object();
  json::value* data = object.if_contains("data");
  if (data != nullptr && data->is_object()) {
    const json::value* current = data->as_object().if_contains(options_.key);
    if (current != nullptr && current->is_string() && current->as_string() == pem) co_return absl::OkStatus();
  }
  // Every other key and the metadata stay as they are; resourceVersion makes the update fail
  // (409) if someone changed the object since the GET.
  if (data == nullptr || !data->is_object()) object["data"] = json::object{};
  object["data"].as_object()[options_.key] = pem;
  auto put = co_await client_.call("PUT", path, json::serialize(object));
  if (!put.ok()) co_return put.status();
  if (put->status == 409) co_return absl::AbortedError("changed by someone else meanwhile");
  if (put->status / 100 != 2) co_return absl::UnavailableError(absl::StrCat("update: HTTP ", put->status, ": ", put->message));
  wrote = true;
  co_return absl::OkStatus();
}

void BundlePublisher::collect(telemetry::Exposition& out) const {
  out.gauge("ferry_ca_bundle_in_sync", "1 when the trust bundle ConfigMap held the current bundle when last compared",
            in_sync_ ? 1 : 0);
  out.counter("ferry_ca_bundle_writes_total", "Creates and updates of the trust bundle ConfigMap",
              static_cast<double>(writes_));
  out.counter("ferry_ca_bundle_publish_failures_total",
              "Publishes of the trust bundle ConfigMap that failed (retried with back-off)", static_cast<double>(failures_));
  out.counter("ferry_ca_bundle_invalid_total", "Bundle file contents refused for publishing (not PEM CA certificates)",
              static_cast<double>(invalid_));
}

}  // namespace ferry::ca
