// The admin endpoint's pages (docs/operations.md, "Endpoints"), on listen.admin, which
// is a loopback address (proxy/config/config.cc refuses any other): an operator on the node,
// or ferryctl. Text pages that scripts already grep keep their text, with a JSON form
// (?format=json) beside it; the pages added for ferryctl are JSON.

#include <algorithm>
#include <iterator>
#include <mutex>

#include <boost/asio/post.hpp>
#include <unistd.h>

#include <boost/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/config/config_dump.h"
#include "proxy/datapath/pod_sync.h"
#include "proxy/identity/openssl_util.h"
#include "proxy/identity/spiffe_id.h"
#include "proxy/identity/svid.h"
#include "proxy/server/admin_json.h"
#include "proxy/server/admin_pages.h"
#include "proxy/server/explain_admin.h"
#include "proxy/server/policy_admin.h"
#include "proxy/server/server.h"
#include "proxy/session/original_destination.h"

namespace ferry::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// /connections lists this many unless ?limit= says otherwise: enough for a person or a
// script, a few hundred KB of JSON, while a busy node may carry tens of thousands (the
// answer says how many were left out).
constexpr size_t kDefaultConnectionsLimit = 1000;
// The most ?limit= may ask for: every worker copies up to this many records in one pass of
// its loop, which must stay short.
constexpr size_t kMaxConnectionsLimit = 100000;

std::string ms(std::chrono::milliseconds d) { return common::formatDuration(d); }

json::array stringsJson(const std::vector<std::string>& items) {
  json::array out;
  for (const auto& item : items) out.emplace_back(item);
  return out;
}

json::object reloadJson(const ReloadStatus& r) {
  auto when = [](std::chrono::system_clock::time_point t) -> json::value {
    if (t == std::chrono::system_clock::time_point{}) return nullptr;
    return json::value(identity::formatTime(t));
  };
  return json::object{{"path", r.path},
                      {"generation", r.generation},
                      {"applied", r.applied},
                      {"rejected", r.rejected},
                      {"last_attempt", when(r.last_attempt)},
                      {"last_success", when(r.last_success)},
                      {"last_result", r.last_result.empty() ? json::value(nullptr) : json::value(r.last_result)},
                      {"error", r.error.empty() ? json::value(nullptr) : json::value(r.error)},
                      {"last_applied_keys", stringsJson(r.last_applied_keys)},
                      {"restart_required_keys", stringsJson(r.restart_required_keys)}};
}

json::object connectionJson(const session::ConnectionInfo& c) {
  return json::object{
      {"direction", session::directionLabel(c.direction)},
      {"source", c.src},
      {"destination", c.dst},
      {"peer_identity", c.peer_identity},
      {"age_ms", std::chrono::duration_cast<std::chrono::milliseconds>(c.age).count()},
      {"sent_bytes", c.sent},
      {"received_bytes", c.received},
      {"worker", c.worker},
  };
}

}  // namespace

void Server::routeAdmin() {
  // A page that DNS rebinding sent to 127.0.0.1 names itself in Host (docs/security.md).
  admin_.requireAddressHost();
  admin_.routeWithQuery("/certs", [this](const std::string& query) {
    return certsPage(*identity_, config_, readiness(), query);
  });
  admin_.routeWithQuery("/workloads", [this](const std::string& query) {
    return workloadsPage(*workloads_->store().current(), config_.trust_domain, query);
  });
  admin_.route("/policies", [this] { return policyDump(policy_.store()); });
  admin_.routeWithQuery("/policy/check", [this](const std::string& query) {
    return policyCheck(query, *workloads_->store().current(), *policy_.store().current(), config_.trust_domain,
                       config_.datapath.enabled && config_.datapath.exempt_node);
  });
  admin_.routeWithQuery("/datapath", [this](const std::string& query) { return datapathPage(workloads_->datapath(), query); });
  admin_.route("/status", [this] { return jsonResponse(200, statusJson()); });
  admin_.route("/config_dump", [this] { return jsonResponse(200, configDumpJson()); });
  admin_.routeAsync("/connections", [this](const HttpRequest& request, HttpServer::Reply reply) {
    serveConnections(request, std::move(reply));
  });
  admin_.routeAsync("/explain", [this](const HttpRequest& request, HttpServer::Reply reply) {
    serveExplain(request, std::move(reply));
  });
  admin_.routeRequest("/logging", {HttpMethod::kGet, HttpMethod::kPost}, loggingPage);
  admin_.routeRequest("/quitquitquit", {HttpMethod::kPost}, [this](const HttpRequest&) { return quitQuitQuit(); });
}

std::string Server::datapathMode() {
  const auto* dp = workloads_->datapath();
  return dp != nullptr ? std::string(datapath::injectionName(dp->injection().mode)) : std::string("disabled");
}

json::object Server::statusJson() {
  absl::Status ready = readiness();
  auto up = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_at_);
  json::object out{{"ready", ready.ok()},
                   {"draining", stopping_.load()},
                   {"version", FERRY_VERSION},
                   {"node", config_.node},
                   {"uptime_seconds", up.count()},
                   {"workers", workerCount()},
                   {"connections_active", liveConnections()},
                   {"log_level", std::string(common::logLevelName(common::logLevel()))},
                   {"datapath", datapathMode()},
                   {"pid", static_cast<int64_t>(::getpid())}};
  if (!ready.ok()) out["reason"] = std::string(ready.message());
  // Upgrades (docs/operations.md): this generation, and the one before it while it retires.
  HandoverStatus h = handoverStatus();
  json::object handover{{"state", h.state}, {"taken", h.taken}, {"given", h.given}, {"failed", h.failed}};
  if (h.previous_pid != 0) {
    json::object previous{{"pid", h.previous_pid},
                          {"connections_active", h.previous_live},
                          {"deadline_seconds", h.previous_deadline_ms / 1000}};
    if (!h.previous_name.empty()) previous["pod"] = h.previous_name;
    handover["previous"] = std::move(previous);
  }
  out["handover"] = std::move(handover);
  return out;
}

json::object Server::configDumpJson() {
  return json::object{
      {"config", json::parse(config::configDumpJson(config_))},
      {"runtime",
       {{"workers", workerCount()},
        {"log_level", std::string(common::logLevelName(common::logLevel()))},
        {"workload_source", workloads_->describeSource()}}},
      {"workloads", workloadsJson(*workloads_->store().current(), config_.trust_domain)},
      {"certificates", certsJson(*identity_, config_, readiness())},
      {"policies", policiesJson(policy_.store())},
      {"datapath", datapathJson(workloads_->datapath())},
      {"reload", reloadJson(reloadStatus())},
  };
}

HttpResponse Server::quitQuitQuit() {
  int64_t live = liveConnections();
  HttpResponse r = jsonResponse(200, json::object{{"draining", true},
                                                  {"connections_active", live},
                                                  {"drain_timeout", ms(config_.timeouts.drain)}});
  // Once the caller has its answer: the drain may stop the control loop at once.
  r.after_write = [this] {
    FERRY_LOG(kInfo, "admin: /quitquitquit: draining");
    beginDrain();
  };
  return r;
}

namespace {

// Runs `collect` on every worker's thread (what it returns is that worker's part) and then
// `done` on the control thread with the parts together: no worker state is read elsewhere.
template <class Part, class Collect, class Done>
void askEveryWorker(const std::vector<std::unique_ptr<session::Worker>>& workers, asio::io_context& control,
                    Collect collect, Done done) {
  struct Gather {
    std::mutex mu;
    std::vector<Part> parts;
    size_t waiting = 0;
  };
  auto gather = std::make_shared<Gather>();
  gather->waiting = workers.size();
  auto finish = [gather, done = std::move(done)]() mutable { done(std::move(gather->parts)); };
  if (workers.empty()) {
    finish();
    return;
  }
  for (const auto& w : workers) {
    asio::post(w->io(), [w = w.get(), gather, collect, finish, &control]() mutable {
      Part mine = collect(*w);
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(gather->mu);
        gather->parts.push_back(std::move(mine));
        last = --gather->waiting == 0;
      }
      if (last) asio::post(control, std::move(finish));
    });
  }
}

// The workers' recent closes as one list, the newest first.
std::vector<session::ClosedConnection> newestFirst(std::vector<std::vector<session::ClosedConnection>> parts) {
  std::vector<session::ClosedConnection> all;
  for (auto& part : parts) std::move(part.begin(), part.end(), std::back_inserter(all));
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.time > b.time; });
  return all;
}

}  // namespace

void Server::serveConnections(const HttpRequest& request, HttpServer::Reply reply) {
  auto params = parseQuery(request.query);
  size_t limit = kDefaultConnectionsLimit;
  if (auto it = params.find("limit"); it != params.end()) {
    if (!absl::SimpleAtoi(it->second, &limit) || limit < 1 || limit > kMaxConnectionsLimit) {
      reply(jsonError(400, absl::StrCat("limit: '", it->second, "' is not a number from 1 to ", kMaxConnectionsLimit)));
      return;
    }
  }
  const std::string state = params.count("state") != 0 ? params["state"] : "open";
  if (state == "closed") {
    // The last ones each worker closed (session/recent_closes.h), the newest first.
    askEveryWorker<std::vector<session::ClosedConnection>>(
        data_plane_->workers(), control_, [](session::Worker& w) { return w.recentCloses().snapshot(); },
        [limit, reply = std::move(reply)](std::vector<std::vector<session::ClosedConnection>> parts) {
          std::vector<session::ClosedConnection> all = newestFirst(std::move(parts));
          size_t total = all.size();
          if (all.size() > limit) all.resize(limit);
          json::array list;
          for (const auto& c : all) list.emplace_back(closedJson(c));
          reply(jsonResponse(200, json::object{{"state", "closed"},
                                               {"total", total},
                                               {"shown", all.size()},
                                               {"omitted", total - all.size()},
                                               {"per_worker", json::object{{"failures", session::RecentCloses::kFailures},
                                                                           {"successes", session::RecentCloses::kSuccesses}}},
                                               {"connections", std::move(list)}}));
        });
    return;
  }
  if (state != "open") {
    reply(jsonError(400, absl::StrCat("state: '", state, "' is not open or closed")));
    return;
  }
  struct Part {
    std::vector<session::ConnectionInfo> found;
    size_t total = 0;
  };
  // Each worker copies its own records on its own thread; the control thread sorts them.
  askEveryWorker<Part>(
      data_plane_->workers(), control_,
      [limit](session::Worker& w) {
        Part part;
        part.found = w.connections(limit, part.total);
        return part;
      },
      [limit, reply = std::move(reply)](std::vector<Part> parts) {
        std::vector<session::ConnectionInfo> found;
        size_t total = 0;
        for (auto& part : parts) {
          total += part.total;
          std::move(part.found.begin(), part.found.end(), std::back_inserter(found));
        }
        std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.age > b.age; });
        if (found.size() > limit) found.resize(limit);
        json::array list;
        for (const auto& c : found) list.emplace_back(connectionJson(c));
        reply(jsonResponse(200, json::object{{"state", "open"},
                                             {"total", total},
                                             {"shown", found.size()},
                                             {"omitted", total - found.size()},
                                             {"connections", std::move(list)}}));
      });
}

void Server::serveExplain(const HttpRequest& request, HttpServer::Reply reply) {
  auto query = parseExplainQuery(request.query);
  if (!query.ok()) {
    reply(jsonError(400, std::string(query.status().message())));
    return;
  }
  auto registry = workloads_->store().current();
  auto services = workloads_->store().services();
  auto policies = policy_.store().current();
  absl::Status ready = readiness();
  json::object node{{"node", config_.node},
                    {"ready", ready.ok()},
                    {"datapath", datapathMode()}};
  if (!ready.ok()) node["reason"] = std::string(ready.message());
  ExplainFacts facts{*registry, *services, *policies, config_.trust_domain,
                     config_.datapath.enabled && config_.datapath.exempt_node, {}, {}, {}};
  facts.node = std::move(node);
  std::vector<std::pair<std::string, std::string>> errors;  // identity, why
  auto now = std::chrono::system_clock::now();
  for (const auto& svid : identity_->held(&errors)) {
    auto not_after = identity::asn1TimeToTimePoint(X509_get0_notAfter(svid->leaf.get()));
    facts.certificates[svid->id.str()] = json::object{
        {"not_after", identity::formatTime(not_after)},
        {"expires_in_seconds", std::chrono::duration_cast<std::chrono::seconds>(not_after - now).count()}};
  }
  for (auto& [id, why] : errors) facts.certificates[id] = json::object{{"error", why}};
  if (const auto* dp = workloads_->datapath()) {
    facts.capture = [dp](const common::IpAddress& ip) {
      json::object out;
      if (!ip.is_v4()) return json::object{{"captured", false}, {"error", "IPv6 is not captured (docs/datapath.md, \"IPv6\")"}};
      uint32_t key = datapath::ipv4Key(ip);
      const std::string* device = dp->enrolledDevice(key);
      out["captured"] = device != nullptr;
      if (device != nullptr) out["device"] = *device;
      if (std::string why = dp->enrolmentFailure(key); !why.empty()) out["error"] = why;
      return out;
    };
  }
  json::object view = explainView(*query, facts);
  const workloads::ServiceBackends* backends = services->find({query->to.ip, query->to.port});
  std::optional<workloads::ServiceBackends> service;
  if (backends != nullptr) service = *backends;
  askEveryWorker<std::vector<session::ClosedConnection>>(
      data_plane_->workers(), control_,
      [q = *query, service](session::Worker& w) {
        std::vector<session::ClosedConnection> mine;
        for (auto& c : w.recentCloses().snapshot()) {
          if (concerns(c, q, service ? &*service : nullptr)) mine.push_back(std::move(c));
        }
        return mine;
      },
      [view = std::move(view), reply = std::move(reply)](std::vector<std::vector<session::ClosedConnection>> parts) mutable {
        std::vector<session::ClosedConnection> all = newestFirst(std::move(parts));
        json::array list;
        for (const auto& c : all) list.emplace_back(closedJson(c));
        view["closed"] = std::move(list);
        reply(jsonResponse(200, view));
      });
}

}  // namespace ferry::server
