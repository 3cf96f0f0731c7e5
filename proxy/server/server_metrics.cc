#include "proxy/server/server.h"

#include <chrono>
#include <string>

#include "proxy/net/buffer_chain.h"
#include "proxy/workloads/kubernetes_source.h"

namespace ferry::server {

// Every part's metrics, in the order /metrics has always listed them. The parts created in
// start() are read through their pointers at scrape time (absent ones state nothing).
void Server::registerMetrics() {
  auto add = [this](telemetry::Registry::Collector collect) {
    metric_parts_.push_back(metrics_registry_.add(std::move(collect)));
  };
  add([this](telemetry::Exposition& out) { stats_.collect(out); });
  add([this](telemetry::Exposition& out) { collectIstioMetrics(out); });
  add([this](telemetry::Exposition& out) { admission_.collect(out); });
  add([this](telemetry::Exposition& out) { collectResourceMetrics(out); });
  add([this](telemetry::Exposition& out) { collectAdminRefusals(out); });
  add([this](telemetry::Exposition& out) {
    if (k8s_source_ != nullptr) k8s_source_->collect(out);
  });
  add([this](telemetry::Exposition& out) {
    auto reg = workloads_.current();
    out.gauge("ferry_workloads", "Workloads known, and those on this node")
        .add(static_cast<double>(reg->size()), {{"scope", "all"}})
        .add(static_cast<double>(reg->localCount()), {{"scope", "local"}});
  });
  add([this](telemetry::Exposition& out) {
    if (datapath_) datapath_->collect(out);
    if (cni_endpoint_) cni_endpoint_->collect(out);
    if (cni_installer_) cni_installer_->collect(out);
    if (cni_credentials_) cni_credentials_->collect(out);
  });
  add([this](telemetry::Exposition& out) {
    if (identity_) identity_->collect(out);
  });
  add([this](telemetry::Exposition& out) { policy_.collect(out); });
  add([this](telemetry::Exposition& out) { collectReloadMetrics(out); });
  add([this](telemetry::Exposition& out) { collectHandoverMetrics(out); });
  add([this](telemetry::Exposition& out) { collectProcessMetrics(out); });
}

std::string Server::renderMetrics() { return metrics_registry_.render(); }

// Istio's TCP metrics, and how many series they hold and dropped.
void Server::collectIstioMetrics(telemetry::Exposition& out) {
  if (!istio_) return;
  istio_->collect(out);
  out.gauge("ferry_istio_series", "Istio TCP metric series held (a pair on two workers counts twice)",
            static_cast<double>(istio_->size()));
  out.counter("ferry_istio_series_dropped_total",
              "Istio TCP metric series dropped after telemetry.series_expiry without a connection or a byte",
              static_cast<double>(istio_series_dropped_.load(std::memory_order_relaxed)));
}

// Descriptors, memory, the HBONE receive budget.
void Server::collectResourceMetrics(telemetry::Exposition& out) {
  out.gauge("ferry_descriptor_limit", "RLIMIT_NOFILE in force", static_cast<double>(descriptor_limit_));
  out.gauge("ferry_data_plane_descriptor_cap",
            "Descriptors the data plane may use (the limit minus limits.descriptor_reserve)",
            shared_ ? shared_->descriptor_cap : 0);
  out.counter("ferry_memory_trims_total", "Heap trims (malloc_trim) after bursts of closes",
              static_cast<double>(memory_trims_.load(std::memory_order_relaxed)));
  const auto& budget = config_.memory_budget;
  out.gauge("ferry_memory_limit_bytes", "The memory limit the admission limits are fitted to (0: none)",
            static_cast<double>(budget.limit));
  out.gauge("ferry_memory_admission_worst_case_bytes",
            "What the admission limits in force cost at worst (docs/configuration.md, \"Memory\")",
            static_cast<double>(budget.worst_case));
  if (!shared_) return;
  const auto& received = *shared_->receive_budget;
  out.gauge("ferry_hbone_receive_budget_bytes",
            "Bytes received over HBONE that may wait for the applications, all connections together "
            "(limits.receive_buffer; 0: no bound but the HTTP/2 windows)",
            static_cast<double>(received.limit()));
  out.gauge("ferry_hbone_received_unwritten_bytes",
            "Bytes received over HBONE and not yet written to the applications",
            static_cast<double>(received.held()));
  out.counter("ferry_hbone_read_pauses_total",
              "Times an HBONE connection stopped reading because the receive budget was exceeded while it "
              "held unwritten bytes",
              static_cast<double>(received.pauses()));
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
  out.gauge("ferry_workers", "Worker threads", static_cast<double>(workers_.size()));
  auto load = out.gauge("ferry_worker_load",
                        "Connections and inbound streams running on each worker (where new connections are placed)");
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::string worker = std::to_string(i);
    load.add(static_cast<double>(shared_->placement.load(i)), {{"worker", worker}});
  }
  auto blocks = net::BufferChain::blocks();
  auto buffers = out.gauge("ferry_buffer_blocks",
                           "64 KiB buffer blocks: holding queued bytes, or spare on the workers' free lists");
  buffers.add(static_cast<double>(blocks.in_use), {{"state", "in_use"}});
  buffers.add(static_cast<double>(blocks.spare), {{"state", "spare"}});
  auto up = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_at_);
  out.gauge("ferry_uptime_seconds", "Seconds since start", static_cast<double>(up.count()));
}

}  // namespace ferry::server
