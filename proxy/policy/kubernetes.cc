#include "proxy/policy/kubernetes.h"

#include "absl/strings/str_cat.h"
#include "proxy/common/log.h"

namespace ferry::policy {
namespace {

// Istio 1.22 and later serve both versions; older releases only v1beta1.
std::vector<std::string> pathsOf(const std::string& resource) {
  return {absl::StrCat("/apis/security.istio.io/v1/", resource), absl::StrCat("/apis/security.istio.io/v1beta1/", resource)};
}

}  // namespace

KubernetesPolicies::KubernetesPolicies(Store& store)
    : store_(store),
      authorization_(*this, Kind::kAuthorizationPolicy, "authorizationpolicies"),
      peer_(*this, Kind::kPeerAuthentication, "peerauthentications") {}

void KubernetesPolicies::attach(k8s::ApiClient& client) {
  for (KindHandler* h : {&authorization_, &peer_}) {
    client.customObjects(h->resource(), pathsOf(h->resource()), *h, /*optional=*/true);
  }
}

KubernetesPolicies::KindHandler::KindHandler(KubernetesPolicies& owner, Kind kind, std::string resource)
    : owner_(owner), store_(owner.store_), kind_(kind), resource_(std::move(resource)) {}

Decoded KubernetesPolicies::KindHandler::decode(const k8s::CustomObject& object) const {
  // The objects come one per JSON text, so the decoder's "line 1" says nothing: the source
  // names the API server's resource instead.
  Decoded decoded = decodeJsonObject(object.json, absl::StrCat("kubernetes ", resource_), kOrigin);
  // The informer's own key, even when the object broke before its name was read: a refusal
  // then still names it, and keeps its previous version.
  if (decoded.key.empty()) decoded.key = absl::StrCat(object.namespace_name, "/", object.name);
  if (decoded.kind.empty()) decoded.kind = kindName(kind_);
  return decoded;
}

void KubernetesPolicies::KindHandler::replace(std::vector<k8s::CustomObject> objects) {
  std::vector<Decoded> decoded;
  decoded.reserve(objects.size());
  for (const auto& o : objects) decoded.push_back(decode(o));
  auto result = store_.replace(kOrigin, std::move(decoded), kind_);
  FERRY_LOG(kInfo, "policy: kubernetes %s: %u objects, %u changed, %u refused", resource_,
            static_cast<unsigned>(objects.size()), static_cast<unsigned>(result.changed),
            static_cast<unsigned>(result.refused.size()));
  if (listed_) return;
  listed_ = true;
  if (owner_.synced() && owner_.on_synced_) owner_.on_synced_();
}

void KubernetesPolicies::KindHandler::apply(k8s::EventType type, k8s::CustomObject object) {
  std::string key = absl::StrCat(object.namespace_name, "/", object.name);
  // Policy changes are rare and each one matters to an operator; a refusal is logged by the
  // Store with its reason.
  if (type == k8s::EventType::kDeleted) {
    Store::Result result = store_.remove(kOrigin, kind_, key);
    FERRY_LOG(kInfo, "policy: kubernetes %s %s deleted: %s", kindName(kind_), key,
              result.changed > 0 ? "removed" : "was not applied");
    return;
  }
  Store::Result result = store_.upsert(kOrigin, decode(object));
  FERRY_LOG(kInfo, "policy: kubernetes %s %s %s: %s", kindName(kind_), key,
            type == k8s::EventType::kAdded ? "added" : "modified",
            !result.refused.empty() ? "refused" : result.changed > 0 ? "applied" : "unchanged");
}

}  // namespace ferry::policy
