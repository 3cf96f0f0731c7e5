#include "proxy/server/server.h"

#include <chrono>
#include <string>

namespace ferry::server {

// Every part's metrics, in the order /metrics has always listed them. The parts created in
// start() are read through their pointers at scrape time (absent ones state nothing).
void Server::registerMetrics() {
  auto add = [this](telemetry::Registry::Collector collect) {
    metric_parts_.push_back(metrics_registry_.add(std::move(collect)));
  };
  add([this](telemetry::Exposition& out) { data_plane_->stats().collect(out); });
  add([this](telemetry::Exposition& out) { data_plane_->collectIstio(out); });
  add([this](telemetry::Exposition& out) { data_plane_->collectAdmission(out); });
  add([this](telemetry::Exposition& out) { data_plane_->collectResources(out); });
  add([this](telemetry::Exposition& out) { collectAdminRefusals(out); });
  add([this](telemetry::Exposition& out) { workloads_->collectSource(out); });
  add([this](telemetry::Exposition& out) { workloads_->collectRegistry(out); });
  add([this](telemetry::Exposition& out) { workloads_->collectNode(out); });
  add([this](telemetry::Exposition& out) {
    if (identity_) identity_->collect(out);
  });
  add([this](telemetry::Exposition& out) { policy_.collect(out); });
  add([this](telemetry::Exposition& out) { reloads_.collect(out); });
  add([this](telemetry::Exposition& out) { handover_->collect(out); });
  add([this](telemetry::Exposition& out) { collectProcessMetrics(out); });
}

void Server::collectAdminRefusals(telemetry::Exposition& out) {
  auto family = out.counter("ferry_admin_requests_refused_total",
                             "Admin requests answered 403 before their route: a browser's POST, a POST a page "
                             "could send without a preflight (simple_post), a Host that is not an address");
  for (size_t i = 0; i < HttpServer::kRefusals; ++i) {
    auto r = static_cast<HttpServer::Refusal>(i);
    family.add(static_cast<double>(admin_.refused(r)), {{"reason", HttpServer::refusalName(r)}});
  }
}

// Readiness, workers and their load, buffer blocks, uptime.
void Server::collectProcessMetrics(telemetry::Exposition& out) {
  out.gauge("ferry_ready", "1 when ferryd accepts connections", ready() ? 1 : 0);
  data_plane_->collectWorkers(out);
  auto up = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_at_);
  out.gauge("ferry_uptime_seconds", "Seconds since start", static_cast<double>(up.count()));
}

}  // namespace ferry::server
