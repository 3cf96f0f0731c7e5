// What reaches ferry-cni and ferryd's enrolment endpoint (proxy/cni/): a network
// configuration on the plugin's stdin, a request on ferryd's socket, an answer on the
// plugin's, a node's CNI configuration file that ferryd chains into. The first byte picks
// the parser, the rest is its input. Checks beyond "does not crash": a decoded request or
// answer encodes and decodes back to itself; a file chained into holds ferry's entry once,
// last, and chaining out of it leaves no ferry entry; chaining twice changes nothing.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "proxy/cni/chain.h"
#include "proxy/cni/plugin.h"
#include "proxy/cni/protocol.h"
#include "proxy/cni/spec.h"

using namespace ferry::cni;

namespace {

bool sameRequest(const Request& a, const Request& b) {
  return a.verb == b.verb && a.container_id == b.container_id && a.netns == b.netns && a.ifname == b.ifname &&
         a.pod_namespace == b.pod_namespace && a.pod_name == b.pod_name && a.pod_uid == b.pod_uid && a.ips == b.ips &&
         a.host_interfaces == b.host_interfaces;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string error;
  switch (data[0] % 4) {
    case 0: {
      (void)parseNetworkConfig(text, true);
      auto config = parseNetworkConfig(text, false);
      (void)parsePluginOptions(text);
      if (ok(config) && std::get<NetworkConfig>(config).prev_result) {
        const PrevResult& r = *std::get<NetworkConfig>(config).prev_result;
        (void)r.podAddresses("eth0");
        (void)r.hostInterfaces();
      }
      break;
    }
    case 1: {
      auto req = decodeRequest(text, &error);
      if (req) {
        auto again = decodeRequest(encodeRequest(*req), &error);
        if (!again || !sameRequest(*req, *again)) std::abort();
      }
      break;
    }
    case 2: {
      auto answer = decodeAnswer(text, &error);
      if (answer) {
        auto again = decodeAnswer(encodeAnswer(*answer), &error);
        if (!again || again->verdict != answer->verdict || again->reason != answer->reason ||
            again->device != answer->device) {
          std::abort();
        }
      }
      break;
    }
    case 3: {
      ChainEntry entry{"/var/run/ferry/cni.sock", FailurePolicy::kClosed, {"kube-system"}, 5000};
      for (bool conflist : {true, false}) {
        ChainEdit in = chainIn(text, conflist, entry);
        if (!in.ok()) continue;
        std::string chained = in.changed ? in.text : std::string(text);
        ChainEdit twice = chainIn(chained, true, entry);
        if (!twice.ok() || twice.changed) std::abort();
        ChainEdit out = chainOut(chained);
        if (out.ok() && out.changed && out.text.find("\"ferry-cni\"") != std::string::npos &&
            std::string(text).find("\"ferry-cni\"") == std::string::npos) {
          std::abort();
        }
      }
      break;
    }
  }
  return 0;
}
