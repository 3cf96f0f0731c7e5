// Policy objects (proxy/policy): what a file or the API server holds, in, decoded objects or
// refusals that name the object and the field out; byte 0 picks the form (0: a YAML file of
// several documents, 1: one object as the API server's JSON). Whatever decodes is loaded
// into a store and judged once: nothing a policy author or the API server writes may crash
// ferryd.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "proxy/common/net.h"
#include "proxy/policy/decode.h"
#include "proxy/policy/store.h"

namespace {

void judge(const ferry::policy::Store& store) {
  ferry::workloads::Workload w;
  w.name = "web-0";
  w.namespace_name = ferry::workloads::intern("shop");
  w.labels = ferry::workloads::LabelSet({{"app", "web"}, {"version", "v1"}});
  ferry::policy::Request r;
  r.source_ip = *ferry::common::parseIp("10.1.2.3");
  r.principal = "cluster.local/ns/shop/sa/frontend";
  r.destination_ip = *ferry::common::parseIp("10.1.9.9");
  r.destination_port = 8080;
  auto set = store.current();
  (void)set->authorize(w, r);
  (void)set->explain(w, r, ferry::policy::MtlsMode::kPermissive);
  r.principal.clear();
  (void)set->mtls(w, 8080, ferry::policy::MtlsMode::kPermissive);
  (void)set->capturesPlaintext(w, ferry::policy::MtlsMode::kPermissive);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  ferry::policy::Store store("istio-system");
  if (data[0] % 2 == 0) {
    auto docs = ferry::policy::decodeYamlFile(text, "fuzz.yaml", "file fuzz.yaml");
    if (!docs.ok()) {
      if (docs.status().message().substr(0, 9) != "fuzz.yaml") std::abort();
      return 0;
    }
    store.replace("file fuzz.yaml", *std::move(docs));
  } else {
    auto decoded = ferry::policy::decodeJsonObject(text, "api", "kubernetes");
    // A refusal names the object (or its kind) before the field.
    if (!decoded.object.ok() && decoded.object.status().message().empty()) std::abort();
    store.upsert("kubernetes", std::move(decoded));
  }
  judge(store);
  return 0;
}
