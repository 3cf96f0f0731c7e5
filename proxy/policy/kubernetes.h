#pragma once
// AuthorizationPolicy and PeerAuthentication from the API server (config `policy.kubernetes`,
// docs/kubernetes.md): one informer per kind on ferryd's k8s::ApiClient, each feeding the
// Store as origin "kubernetes". A LIST replaces what that kind held, a watch event adds,
// changes or removes one object; an object that does not decode is refused by the Store with
// its reason (an earlier valid version keeps applying). Both CRDs are optional: without
// them the informers deliver an empty state and look again (k8s::ApiClient::customObjects).
#include <functional>
#include <string>
#include <vector>

#include "proxy/k8s/client.h"
#include "proxy/policy/store.h"

namespace ferry::policy {

class KubernetesPolicies {
 public:
  static constexpr const char* kOrigin = "kubernetes";

  // `store` must outlive this, and this the client it is attached to.
  explicit KubernetesPolicies(Store& store);

  // Registers both informers on `client` (before its start(); they run on its io_context,
  // ferryd's control thread, as the Store's writers must).
  void attach(k8s::ApiClient& client);

  // Both kinds have delivered a first state (a list, or the empty one of an absent CRD):
  // until then the Store does not yet say what the cluster's policies are, and the server
  // refuses to judge by it (fail closed). Control thread.
  bool synced() const { return authorization_.listed() && peer_.listed(); }
  // Called once, on the control thread, when synced() becomes true.
  void onSynced(std::function<void()> callback) { on_synced_ = std::move(callback); }

  // What each informer delivers to (public: tests drive them with recorded objects).
  k8s::Handler<k8s::CustomObject>& authorizationPolicies() { return authorization_; }
  k8s::Handler<k8s::CustomObject>& peerAuthentications() { return peer_; }

 private:
  // One kind's informer handler (Handler<CustomObject> cannot be a base twice).
  class KindHandler : public k8s::Handler<k8s::CustomObject> {
   public:
    KindHandler(KubernetesPolicies& owner, Kind kind, std::string resource);
    const std::string& resource() const { return resource_; }
    bool listed() const { return listed_; }
    Kind kind() const { return kind_; }
    void replace(std::vector<k8s::CustomObject> objects) override;
    void apply(k8s::EventType type, k8s::CustomObject object) override;

   private:
    Decoded decode(const k8s::CustomObject& object) const;
    KubernetesPolicies& owner_;
    Store& store_;
    Kind kind_;
    std::string resource_;  // "authorizationpolicies"
    bool listed_ = false;
  };

  Store& store_;
  KindHandler authorization_;
  KindHandler peer_;
  std::function<void()> on_synced_;
};

}  // namespace ferry::policy
