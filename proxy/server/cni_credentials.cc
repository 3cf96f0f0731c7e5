#include "proxy/server/cni_credentials.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <ctime>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "proxy/common/file.h"
#include "proxy/common/log.h"
#include "proxy/k8s/client.h"
#include "proxy/session/context.h"
#include "proxy/telemetry/metrics.h"

namespace ferry::server {
namespace json = boost::json;
namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kRetry{30'000};

// "2026-12-07T23:09:37Z" (the API server's metav1.Time) as Unix seconds; -1 when malformed.
int64_t parseRfc3339Utc(const std::string& text) {
  std::tm tm{};
  char z = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &z) != 7 ||
      z != 'Z') {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(::timegm(&tm));
}

}  // namespace

std::string pluginKubeconfig(const std::string& server, const std::string& ca_pem, const std::string& token) {
  json::object cluster{{"server", server}, {"certificate-authority-data", absl::Base64Escape(ca_pem)}};
  json::object user{{"token", token}};
  json::object o{
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"clusters", json::array{json::object{{"name", "ferry-cni"}, {"cluster", std::move(cluster)}}}},
      {"users", json::array{json::object{{"name", "ferry-cni"}, {"user", std::move(user)}}}},
      {"contexts", json::array{json::object{{"name", "ferry-cni"},
                                            {"context", json::object{{"cluster", "ferry-cni"}, {"user", "ferry-cni"}}}}}},
      {"current-context", "ferry-cni"},
  };
  return json::serialize(o) + "\n";
}

absl::StatusOr<IssuedToken> parseTokenRequest(const std::string& body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  const json::object* o = !ec ? v.if_object() : nullptr;
  const json::value* kind = o != nullptr ? o->if_contains("kind") : nullptr;
  if (kind == nullptr || !kind->is_string() || kind->get_string() != "TokenRequest") {
    return absl::InvalidArgumentError("the answer is not a TokenRequest");
  }
  const json::value* status = o->if_contains("status");
  const json::object* s = status != nullptr ? status->if_object() : nullptr;
  const json::value* token = s != nullptr ? s->if_contains("token") : nullptr;
  const json::value* expiry = s != nullptr ? s->if_contains("expirationTimestamp") : nullptr;
  if (token == nullptr || !token->is_string() || token->get_string().empty()) {
    return absl::InvalidArgumentError("the TokenRequest has no status.token");
  }
  IssuedToken t{std::string(token->get_string()), -1};
  if (expiry != nullptr && expiry->is_string()) t.expires_unix = parseRfc3339Utc(std::string(expiry->get_string()));
  if (t.expires_unix < 0) return absl::InvalidArgumentError("the TokenRequest has no RFC 3339 status.expirationTimestamp");
  return t;
}

CniCredentials::CniCredentials(asio::io_context& io, k8s::ApiClient& client, std::string server, std::string ca_pem,
                               std::string service_account, milliseconds lifetime, std::string path)
    : client_(client),
      server_(std::move(server)),
      ca_pem_(std::move(ca_pem)),
      namespace_(service_account.substr(0, service_account.find('/'))),
      name_(service_account.substr(service_account.find('/') + 1)),
      lifetime_(lifetime),
      path_(std::move(path)),
      timer_(io) {}

CniCredentials::~CniCredentials() { stop(); }

void CniCredentials::start() { asio::co_spawn(timer_.get_executor(), run(), session::logTaskError); }

void CniCredentials::stop() {
  stopped_ = true;
  timer_.cancel();
}

asio::awaitable<void> CniCredentials::run() {
  while (!stopped_) {
    milliseconds next = co_await renew();
    if (stopped_) co_return;
    timer_.expires_after(next);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<milliseconds> CniCredentials::renew() {
  json::object request{{"apiVersion", "authentication.k8s.io/v1"},
                       {"kind", "TokenRequest"},
                       {"spec", json::object{{"expirationSeconds",
                                              std::chrono::duration_cast<std::chrono::seconds>(lifetime_).count()}}}};
  std::string target = absl::StrCat("/api/v1/namespaces/", namespace_, "/serviceaccounts/", name_, "/token");
  auto answer = co_await client_.call("POST", target, json::serialize(request));
  // Stopped meanwhile (a drain; an uninstall removes the file): write nothing.
  if (stopped_) co_return milliseconds{0};
  std::string error;
  absl::StatusOr<IssuedToken> token = absl::UnknownError("");
  if (!answer.ok()) {
    error = std::string(answer.status().message());
  } else if (answer->status / 100 != 2) {
    error = absl::StrCat("the API server answered ", answer->status, ": ", answer->message);
  } else if (token = parseTokenRequest(answer->body); !token.ok()) {
    error = std::string(token.status().message());
  } else if (auto st = common::writeFileAtomic(path_, pluginKubeconfig(server_, ca_pem_, token->token), 0600); !st.ok()) {
    error = std::string(st.message());
  }
  if (!error.empty()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (error != last_error_) {
      FERRY_LOG(kWarn,
                "cni: no token for ferry-cni's ServiceAccount %s/%s (%s); tried again every 30 s. Meanwhile, with "
                "ferryd down, ferry-cni cannot tell mesh pods from others and every pod outside "
                "cni.exclude_namespaces waits under failurePolicy closed",
                namespace_, name_, error);
      last_error_ = error;
    }
    co_return kRetry;
  }
  if (!last_error_.empty() || expires_unix_.load() == 0) {
    FERRY_LOG(kInfo, "cni: ferry-cni's API credentials (ServiceAccount %s/%s) written to %s", namespace_, name_, path_);
  }
  last_error_.clear();
  expires_unix_.store(token->expires_unix, std::memory_order_relaxed);
  // Half of what is left (the API server may grant less than asked), at least the retry.
  int64_t left_s = token->expires_unix - static_cast<int64_t>(std::time(nullptr));
  co_return std::max(kRetry, milliseconds(left_s * 1000 / 2));
}

absl::StatusOr<std::string> pluginApiServerCa(const std::string& ca_pem, const std::string& ca_file,
                                              const std::string& where) {
  std::string pem = ca_pem;
  if (pem.empty() && !ca_file.empty()) {
    auto read = common::readFile(ca_file);
    if (read.ok()) pem = *std::move(read);
  }
  if (pem.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("cni.service_account: the API server's CA is not known (", where,
                                                      " names no certificate authority), and ferry-cni must verify the "
                                                      "API server"));
  }
  return pem;
}

void CniCredentials::collect(telemetry::Exposition& out) const {
  out.gauge("ferry_cni_api_token_expiry_timestamp_seconds",
            "When ferry-cni's API server token (its fallback while ferryd is down) expires, Unix seconds; 0 until "
            "one was written",
            static_cast<double>(expires_unix_.load(std::memory_order_relaxed)));
  out.counter("ferry_cni_api_token_errors_total", "Failed requests for ferry-cni's API server token",
              static_cast<double>(errors_.load(std::memory_order_relaxed)));
}

}  // namespace ferry::server
