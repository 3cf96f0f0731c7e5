#include "proxy/k8s/decode.h"

#include <arpa/inet.h>

#include <algorithm>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::k8s::internal {
namespace json = boost::json;

namespace {

// Reads fields of one object, remembering the first one that has the wrong type. Absent and
// null fields read as empty: the API omits empty values.
class Reader {
 public:
  const json::object* object(const json::object* parent, std::string_view key) {
    const json::value* v = find(parent, key);
    if (v == nullptr) return nullptr;
    if (!v->is_object()) return fail(key, "an object"), nullptr;
    return &v->get_object();
  }
  const json::array* array(const json::object* parent, std::string_view key) {
    const json::value* v = find(parent, key);
    if (v == nullptr) return nullptr;
    if (!v->is_array()) return fail(key, "an array"), nullptr;
    return &v->get_array();
  }
  // Calls f for each element of the array `key`, which must all be objects.
  template <class F>
  void objects(const json::object* parent, std::string_view key, F&& f) {
    const json::array* a = array(parent, key);
    if (a == nullptr) return;
    for (const json::value& e : *a) {
      if (!e.is_object()) return fail(key, "a list of objects");
      f(e.get_object());
    }
  }
  std::string string(const json::object* parent, std::string_view key) {
    const json::value* v = find(parent, key);
    if (v == nullptr) return {};
    if (!v->is_string()) return fail(key, "a string"), std::string();
    return std::string(v->get_string());
  }
  bool boolean(const json::object* parent, std::string_view key) {
    const json::value* v = find(parent, key);
    if (v == nullptr) return false;
    if (!v->is_bool()) return fail(key, "a boolean"), false;
    return v->get_bool();
  }
  int32_t port(const json::object* parent, std::string_view key) {
    const json::value* v = find(parent, key);
    if (v == nullptr) return 0;
    if (!v->is_int64() || v->get_int64() < 0 || v->get_int64() > 65535) return fail(key, "a port number"), 0;
    return static_cast<int32_t>(v->get_int64());
  }
  // An address that must be an IP literal of either family.
  std::string ip(const json::value& v, std::string_view what) {
    if (!v.is_string()) return fail(what, "a string"), std::string();
    std::string s(v.get_string());
    unsigned char buf[16];
    if (inet_pton(AF_INET, s.c_str(), buf) != 1 && inet_pton(AF_INET6, s.c_str(), buf) != 1) {
      fail(what, "an IP address");
      return {};
    }
    return s;
  }
  Labels labels(const json::object* metadata) {
    Labels out;
    const json::object* labels = object(metadata, "labels");
    if (labels == nullptr) return out;
    for (const auto& [k, v] : *labels) {
      if (!v.is_string()) {
        fail(absl::StrCat("labels.", std::string(k)), "a string");
        return {};
      }
      out.emplace_back(std::string(k), std::string(v.get_string()));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void fail(std::string_view key, std::string_view expected) {
    if (error_.empty()) error_ = absl::StrCat("'", std::string(key), "' is not ", std::string(expected));
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  static const json::value* find(const json::object* parent, std::string_view key) {
    if (parent == nullptr) return nullptr;
    const json::value* v = parent->if_contains(key);
    return (v == nullptr || v->is_null()) ? nullptr : v;
  }
  std::string error_;
};

// The object, its metadata, and the namespace/name every object of ferry's has.
struct Head {
  const json::object* root = nullptr;
  const json::object* metadata = nullptr;
  std::string namespace_name;
  std::string name;
};

absl::StatusOr<Head> head(const json::value& v, Reader& r, const char* kind, bool namespaced) {
  Head h;
  if (!v.is_object()) return absl::InvalidArgumentError(absl::StrCat(kind, ": not a JSON object"));
  h.root = &v.get_object();
  h.metadata = r.object(h.root, "metadata");
  h.name = r.string(h.metadata, "name");
  if (namespaced) h.namespace_name = r.string(h.metadata, "namespace");
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat(kind, ": ", r.error()));
  if (h.name.empty() || (namespaced && h.namespace_name.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(kind, ": metadata.name", namespaced ? "/namespace" : "", " missing"));
  }
  return h;
}

absl::Status finish(const Reader& r, const char* kind, const Head& h) {
  if (r.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(kind, " ", h.namespace_name, h.namespace_name.empty() ? "" : "/", h.name, ": ", r.error()));
}

}  // namespace

absl::StatusOr<Pod> decodePod(const json::value& v) {
  Reader r;
  auto h = head(v, r, "Pod", true);
  if (!h.ok()) return h.status();
  Pod pod;
  pod.namespace_name = h->namespace_name;
  pod.name = h->name;
  pod.uid = r.string(h->metadata, "uid");
  pod.labels = r.labels(h->metadata);
  pod.generated_name = !r.string(h->metadata, "generateName").empty();
  r.objects(h->metadata, "ownerReferences", [&](const json::object& ref) {
    if (!pod.controller_kind.empty() || !r.boolean(&ref, "controller")) return;
    pod.controller_kind = r.string(&ref, "kind");
    pod.controller_name = r.string(&ref, "name");
  });
  pod.deleting = !r.string(h->metadata, "deletionTimestamp").empty();
  const json::object* annotations = r.object(h->metadata, "annotations");
  pod.mirror = annotations != nullptr && annotations->contains("kubernetes.io/config.mirror");
  const json::object* spec = r.object(h->root, "spec");
  pod.node_name = r.string(spec, "nodeName");
  pod.service_account = r.string(spec, "serviceAccountName");
  if (pod.service_account.empty()) pod.service_account = r.string(spec, "serviceAccount");
  if (pod.service_account.empty()) pod.service_account = "default";
  pod.host_network = r.boolean(spec, "hostNetwork");
  const json::object* status = r.object(h->root, "status");
  pod.phase = r.string(status, "phase");
  // podIPs lists every family (dual stack); podIP is its first entry, kept for servers that
  // predate podIPs. A pod that has no address yet has neither.
  r.objects(status, "podIPs", [&](const json::object& entry) {
    const json::value* ip = entry.if_contains("ip");
    if (ip == nullptr) return;
    std::string s = r.ip(*ip, "status.podIPs[].ip");
    if (!s.empty()) pod.pod_ips.push_back(std::move(s));
  });
  if (pod.pod_ips.empty()) {
    if (const json::value* ip = status ? status->if_contains("podIP") : nullptr; ip && !ip->is_null()) {
      std::string s = r.ip(*ip, "status.podIP");
      if (!s.empty()) pod.pod_ips.push_back(std::move(s));
    }
  }
  if (auto st = finish(r, "Pod", *h); !st.ok()) return st;
  return pod;
}

absl::StatusOr<Namespace> decodeNamespace(const json::value& v) {
  Reader r;
  auto h = head(v, r, "Namespace", false);
  if (!h.ok()) return h.status();
  Namespace ns;
  ns.name = h->name;
  ns.labels = r.labels(h->metadata);
  if (auto st = finish(r, "Namespace", *h); !st.ok()) return st;
  return ns;
}

absl::StatusOr<Service> decodeService(const json::value& v) {
  Reader r;
  auto h = head(v, r, "Service", true);
  if (!h.ok()) return h.status();
  Service svc;
  svc.namespace_name = h->namespace_name;
  svc.name = h->name;
  const json::object* spec = r.object(h->root, "spec");
  // clusterIPs (1.20+, dual stack) or clusterIP; "None" marks a headless Service.
  if (const json::array* ips = r.array(spec, "clusterIPs")) {
    for (const json::value& ip : *ips) {
      if (ip.is_string() && ip.get_string() == "None") continue;
      std::string s = r.ip(ip, "spec.clusterIPs[]");
      if (!s.empty()) svc.cluster_ips.push_back(std::move(s));
    }
  }
  if (svc.cluster_ips.empty()) {
    std::string ip = r.string(spec, "clusterIP");
    if (!ip.empty() && ip != "None") {
      std::string s = r.ip(json::value(ip), "spec.clusterIP");
      if (!s.empty()) svc.cluster_ips.push_back(std::move(s));
    }
  }
  r.objects(spec, "ports", [&](const json::object& p) {
      const json::object* po = &p;
      ServicePort sp;
      sp.name = r.string(po, "name");
      sp.port = r.port(po, "port");
      sp.protocol = r.string(po, "protocol");
      if (sp.protocol.empty()) sp.protocol = "TCP";
      // targetPort: a number, a container port's name, or absent (then equal to port).
      const json::value* tp = po->if_contains("targetPort");
      if (tp == nullptr || tp->is_null()) {
        sp.target_port = sp.port;
      } else if (tp->is_string()) {
        sp.target_port_name = std::string(tp->get_string());
      } else {
        sp.target_port = r.port(po, "targetPort");
      }
      svc.ports.push_back(std::move(sp));
  });
  if (auto st = finish(r, "Service", *h); !st.ok()) return st;
  return svc;
}

absl::StatusOr<DaemonSet> decodeDaemonSet(const json::value& v) {
  Reader r;
  auto h = head(v, r, "DaemonSet", true);
  if (!h.ok()) return h.status();
  DaemonSet ds{h->namespace_name, h->name, !r.string(h->metadata, "deletionTimestamp").empty()};
  if (auto st = finish(r, "DaemonSet", *h); !st.ok()) return st;
  return ds;
}

absl::StatusOr<CustomObject> decodeCustomObject(const json::value& v) {
  Reader r;
  // The object's own kind names it in errors ("AuthorizationPolicy: metadata.name/namespace missing").
  std::string kind = "object";
  if (const json::value* k = v.is_object() ? v.get_object().if_contains("kind") : nullptr; k && k->is_string()) {
    kind = std::string(k->get_string());
  }
  auto h = head(v, r, kind.c_str(), true);
  if (!h.ok()) return h.status();
  return CustomObject{h->namespace_name, h->name, json::serialize(v)};
}

absl::StatusOr<EndpointSlice> decodeEndpointSlice(const json::value& v) {
  Reader r;
  auto h = head(v, r, "EndpointSlice", true);
  if (!h.ok()) return h.status();
  EndpointSlice es;
  es.namespace_name = h->namespace_name;
  es.name = h->name;
  for (const auto& [k, val] : r.labels(h->metadata)) {
    if (k == "kubernetes.io/service-name") es.service_name = val;
  }
  es.address_type = r.string(h->root, "addressType");
  bool ip_type = es.address_type == "IPv4" || es.address_type == "IPv6";
  r.objects(h->root, "endpoints", [&](const json::object& e) {
      const json::object* eo = &e;
      Endpoint ep;
      if (const json::array* addrs = r.array(eo, "addresses")) {
        for (const json::value& a : *addrs) {
          std::string s = ip_type ? r.ip(a, "endpoints[].addresses[]") : (a.is_string() ? std::string(a.get_string()) : "");
          if (!s.empty()) ep.addresses.push_back(std::move(s));
        }
      }
      if (const json::object* cond = r.object(eo, "conditions")) {
        const json::value* ready = cond->if_contains("ready");
        if (ready != nullptr && !ready->is_null()) ep.ready = r.boolean(cond, "ready");
      }
      ep.node_name = r.string(eo, "nodeName");
      if (ep.node_name.empty()) {
        const json::object* topology = r.object(eo, "topology");  // v1beta1
        ep.node_name = r.string(topology, "kubernetes.io/hostname");
      }
      if (const json::object* ref = r.object(eo, "targetRef"); ref && r.string(ref, "kind") == "Pod") {
        ep.pod_name = r.string(ref, "name");
      }
      es.endpoints.push_back(std::move(ep));
  });
  r.objects(h->root, "ports", [&](const json::object& p) {
    EndpointPort port;
    port.name = r.string(&p, "name");
    port.port = r.port(&p, "port");
    port.protocol = r.string(&p, "protocol");
    if (port.protocol.empty()) port.protocol = "TCP";
    es.ports.push_back(std::move(port));
  });
  if (auto st = finish(r, "EndpointSlice", *h); !st.ok()) return st;
  return es;
}

std::string resourceVersionOf(const json::value& v) {
  if (!v.is_object()) return {};
  const json::value* md = v.get_object().if_contains("metadata");
  if (md == nullptr || !md->is_object()) return {};
  const json::value* rv = md->get_object().if_contains("resourceVersion");
  return (rv != nullptr && rv->is_string()) ? std::string(rv->get_string()) : std::string();
}

absl::StatusOr<TokenReviewStatus> decodeTokenReview(const json::value& v) {
  constexpr const char* kKind = "TokenReview";
  if (!v.is_object()) return absl::InvalidArgumentError("TokenReview: not a JSON object");
  Reader r;
  const json::object* root = &v.get_object();
  if (std::string kind = r.string(root, "kind"); r.ok() && kind != kKind) {
    return absl::InvalidArgumentError(absl::StrCat("TokenReview: the answer is of kind '", kind, "'"));
  }
  // extra's values are lists of strings; only the pod's name and UID are read.
  auto strings = [&r](const json::object* parent, std::string_view key) {
    std::vector<std::string> out;
    const json::array* a = r.array(parent, key);
    if (a == nullptr) return out;
    for (const json::value& e : *a) {
      if (!e.is_string()) {
        r.fail(key, "a list of strings");
        return std::vector<std::string>{};
      }
      out.emplace_back(e.get_string());
    }
    return out;
  };
  const json::object* status = r.object(root, "status");
  const json::object* user = r.object(status, "user");
  const json::object* extra = r.object(user, "extra");
  TokenReviewStatus out;
  out.authenticated = r.boolean(status, "authenticated");
  out.error = r.string(status, "error");
  out.audiences = strings(status, "audiences");
  out.username = r.string(user, "username");
  out.uid = r.string(user, "uid");
  out.pod_names = strings(extra, "authentication.kubernetes.io/pod-name");
  out.pod_uids = strings(extra, "authentication.kubernetes.io/pod-uid");
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("TokenReview: ", r.error()));
  return out;
}

ApiStatus decodeStatus(const json::value& v) {
  ApiStatus s;
  if (!v.is_object()) return s;
  const json::object& o = v.get_object();
  if (const json::value* c = o.if_contains("code"); c && c->is_int64()) s.code = static_cast<int>(c->get_int64());
  if (const json::value* r = o.if_contains("reason"); r && r->is_string()) s.reason = std::string(r->get_string());
  if (const json::value* m = o.if_contains("message"); m && m->is_string()) s.message = std::string(m->get_string());
  return s;
}

}  // namespace ferry::k8s::internal

namespace ferry::k8s {

const std::string* findLabel(const Labels& labels, const std::string& key) {
  auto it = std::lower_bound(labels.begin(), labels.end(), key,
                             [](const auto& kv, const std::string& k) { return kv.first < k; });
  return (it != labels.end() && it->first == key) ? &it->second : nullptr;
}

}  // namespace ferry::k8s
