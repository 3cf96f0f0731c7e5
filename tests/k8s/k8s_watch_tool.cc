// fy-k8s-watch: ferryd's Kubernetes client against a live API server, for the real-cluster
// lab (tests/k8s/record_wire.py --live-check runs it): lists and watches the four resources
// for N seconds, prints one line per delivery and the metrics, and exits 0 only if every
// resource synced.
//   fy-k8s-watch --kubeconfig PATH [--seconds N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <boost/asio/io_context.hpp>

#include "proxy/config/kubeconfig.h"
#include "proxy/k8s/client.h"
#include "proxy/telemetry/metrics.h"

namespace {
using namespace ferry;

std::string describe(const k8s::Pod& p) {
  std::string out = p.namespace_name + "/" + p.name + " node=" + p.node_name + " phase=" + p.phase + " ips=";
  for (const auto& ip : p.pod_ips) out += ip + ",";
  for (const auto& [k, v] : p.labels) out += " " + k + "=" + v;
  return out;
}
std::string describe(const k8s::Namespace& n) {
  std::string out = n.name;
  for (const auto& [k, v] : n.labels) out += " " + k + "=" + v;
  return out;
}
std::string describe(const k8s::Service& s) {
  std::string out = s.namespace_name + "/" + s.name + " ips=";
  for (const auto& ip : s.cluster_ips) out += ip + ",";
  for (const auto& p : s.ports) {
    out += " " + p.name + ":" + std::to_string(p.port) + "->" +
           (p.target_port_name.empty() ? std::to_string(p.target_port) : p.target_port_name);
  }
  return out;
}
std::string describe(const k8s::EndpointSlice& e) {
  std::string out = e.namespace_name + "/" + e.name + " service=" + e.service_name;
  for (const auto& ep : e.endpoints) {
    out += " [";
    for (const auto& a : ep.addresses) out += a + " ";
    out += "node=" + ep.node_name + " pod=" + ep.pod_name + (ep.ready ? " ready]" : " not-ready]");
  }
  return out;
}

template <class T>
class Printer : public k8s::Handler<T> {
 public:
  explicit Printer(const char* kind) : kind_(kind) {}
  void replace(std::vector<T> objects) override {
    std::printf("REPLACE %s %zu\n", kind_, objects.size());
    for (const auto& o : objects) std::printf("  %s\n", describe(o).c_str());
    std::fflush(stdout);
  }
  void apply(k8s::EventType type, T o) override {
    const char* t = type == k8s::EventType::kAdded ? "ADDED" : type == k8s::EventType::kModified ? "MODIFIED" : "DELETED";
    std::printf("%s %s %s\n", t, kind_, describe(o).c_str());
    std::fflush(stdout);
  }

 private:
  const char* kind_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string kubeconfig;
  int seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--kubeconfig") == 0) kubeconfig = argv[i + 1];
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atoi(argv[i + 1]);
  }
  if (kubeconfig.empty()) {
    std::fprintf(stderr, "usage: %s --kubeconfig PATH [--seconds N]\n", argv[0]);
    return 2;
  }
  auto kc = config::loadKubeconfig(kubeconfig);
  if (!kc.ok()) {
    std::fprintf(stderr, "%s\n", kc.status().ToString().c_str());
    return 1;
  }
  k8s::ClusterAccess access{kc->server,          kc->ca_file,       kc->ca_pem,
                            kc->client_cert_file, kc->client_cert_pem, kc->client_key_file,
                            kc->client_key_pem,  kc->token,         kc->token_file};
  boost::asio::io_context io;
  k8s::Options options;
  options.watch_timeout = std::chrono::seconds(5);  // see a few clean closes in a short run
  options.silence_deadline = std::chrono::seconds(30);
  auto client = k8s::ApiClient::create(io, access, options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  Printer<k8s::Pod> pods("pods");
  Printer<k8s::Namespace> namespaces("namespaces");
  Printer<k8s::Service> services("services");
  Printer<k8s::EndpointSlice> slices("endpointslices");
  k8s::Informer* all[] = {&(*client)->pods(pods), &(*client)->namespaces(namespaces), &(*client)->services(services),
                          &(*client)->endpointSlices(slices)};
  (*client)->start();
  io.run_for(std::chrono::seconds(seconds));
  std::printf("%s", telemetry::textOf(*(*client)).c_str());
  bool synced = true;
  for (auto* i : all) synced = synced && i->synced();
  std::printf("state age: %lld ms; all synced: %s\n", static_cast<long long>((*client)->stateAge().count()),
              synced ? "yes" : "no");
  return synced ? 0 : 1;
}
