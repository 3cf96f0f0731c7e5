#!/usr/bin/env python3
"""What the chart promises about a node's security, checked on `helm template` output.

  chart_checks.py check RENDERED.yaml CHART_DIR [VALUES.yaml...] --json OUT.json
      asserts the promises below, then writes the rendered objects as a JSON list (with the
      template each came from) for chart_validate.mjs. Exit 1 with one line per broken
      promise.
  chart_checks.py mutate IN.json CASE OUT.json
      breaks one rendered object on purpose (the negative cases of chart_offline.sh).

The promises (docs/install.md, docs/operations.md): ferryd is never privileged, drops every capability and adds
exactly the ones the chart justifies in a comment; it shares only the host's network
namespace; it mounts only the host paths it needs; no container runs a shell; its RBAC only
reads (get/list/watch) the kinds its informers watch. The configuration it renders agrees with
the mounts: ferry-cni's bin and configuration folders are the node's the values name, and
its socket is at the same path on the node (where the plugin dials it) as in the container.
Upgrades hand over (handover.enabled): the handover socket is in the node's /var/run/ferry, at the
same path, so that the next generation finds the running one; the pod declares no port (with
hostNetwork a declared port is a host port, which would keep the next generation's pod off the
node); both probes read the container's own readiness file, in an emptyDir and not on the
node, because both generations share the node's :15021; the grace period outlasts the
handover deadline; and from Kubernetes 1.22 the rollout starts the new pod beside the old one
(maxSurge, maxUnavailable 0).
Its CustomResourceDefinitions (crds/, rendered with --include-crds) are Istio's two policy
kinds exactly as Istio names and serves them, keeping every field, and the ClusterRole reads
them when policy.kubernetes says ferryd watches them (and only then).

With identity.source cluster-ca (docs/ferry-ca.md) the chart adds ferry-ca, checked by its own
rules: one Deployment, <fullname>-ca, not root, no privilege, no capability at all, no host
namespace or path, probes on 15014; the only pod that mounts the CA Secret (items mapped to
the names its flags give, not world-readable, read-only). Its ClusterRole, bound to its own
ServiceAccount only, may create TokenReviews and read pods, nothing else. ferryd then mounts
no Secret at all (a node's kubelet may read every Secret its pods mount): its trust bundle
comes from a ConfigMap and its token for ferry-ca is projected with ferry-ca's audience.
"""
import copy
import json
import os
import re
import sys

import yaml

# The capabilities the chart adds, each justified in templates/daemonset.yaml by the
# syscall that needs it; adding one here without the chart (or the reverse) fails.
EXPECTED_CAPS = {"NET_ADMIN", "SYS_ADMIN"}
READ_VERBS = {"get", "list", "watch"}
# (apiGroup, resource) ferryd's informers read.
READ_RESOURCES = {("", "pods"), ("", "namespaces"), ("", "services"),
                  ("discovery.k8s.io", "endpointslices")}
# Istio's policy kinds, read with policy.kubernetes (proxy/policy/kubernetes.cc): the CRDs of
# crds/, by name, with what Istio's own definitions say (so that either can stand in for the other).
POLICY_GROUP = "security.istio.io"
POLICY_CRDS = {
    "authorizationpolicies": {"kind": "AuthorizationPolicy", "singular": "authorizationpolicy", "shortNames": ["ap"]},
    "peerauthentications": {"kind": "PeerAuthentication", "singular": "peerauthentication", "shortNames": ["pa"]},
}
POLICY_RESOURCES = {(POLICY_GROUP, r) for r in POLICY_CRDS}
# Read by name only, in the release namespace (a Role with resourceNames): ferryd's own.
OWN_RESOURCES = {("apps", "daemonsets")}
# ferry-cni's own ServiceAccount (<fullname>-cni, cni.apiCredentials): get, exactly these
# (docs/install.md, "When ferryd is down"); ferryd may create a token of it and of nothing else.
CNI_GRANTS = {("", "pods"): {"get"}, ("", "namespaces"): {"get"}}
CNI_TOKEN = ("", "serviceaccounts/token")
# ferry-ca's grants, exactly: (apiGroup, resource) -> verbs (docs/ferry-ca.md, Node authorization).
CA_GRANTS = {("authentication.k8s.io", "tokenreviews"): {"create"}, ("", "pods"): {"get", "list", "watch"}}
# With clusterCa.manageBundleConfigMap, one Role in the release's namespace: create any
# ConfigMap (a name cannot limit create), get and update only the bundle ConfigMap.
CA_BINARY = "/usr/local/bin/ferry-ca"
CA_MOUNT = "/etc/ferry-ca"
# ferry-ca's HTTPS and its monitoring (/metrics, /healthz/ready) ports.
CA_PORTS = {"https": 15012, "monitoring": 15014}
# Keys ferryd's configuration may have (docs/configuration.md); the chart renders these.
CONFIG_KEYS = {"trust_domain", "log_level", "workers", "workload_source", "kubernetes", "policy",
               "cert_dir", "identity", "timeouts", "datapath", "cni", "pool", "hbone", "limits",
               "access_log", "handover"}
# ferry-cni's endpoint folder and the handover socket: the plugin runs on the node and dials
# the path the chain entry names, and the next generation of ferryd (another pod) finds the
# running one there, so ferryd must see the node's folder at the node's own path.
CNI_RUN = "/var/run/ferry"
HANDOVER_SOCKET = "/var/run/ferry/handover.sock"
# ferryd's probes: `ferryctl probe` of the file ferryd keeps (handover.readiness_file).
FERRYCTL = "/usr/local/bin/ferryctl"
# The Kubernetes version the chart is rendered for (chart_offline.sh: helm --kube-version).
KUBE_VERSION = tuple(int(x) for x in os.environ.get("FERRY_KUBE_VERSION", "1.20.2").split(".")[:2])
# The pods' netns files (/var/run/netns/cni-* in CNI_NETNS: /run/netns on the node), read-only.
NETNS_DIR = "/run/netns"
SHELLS = re.compile(r"(^|/)(ba|da|a|z|k)?sh$")


def merge(base, override):
    """Helm's coalescing of values: maps merge, null deletes, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_rendered(path):
    docs = []
    source = None
    for chunk in re.split(r"^---\s*$", open(path).read(), flags=re.M):
        m = re.search(r"^# Source: (.+)$", chunk, flags=re.M)
        if m:
            source = m.group(1)
        obj = yaml.safe_load(chunk)
        if obj is not None:
            docs.append({"source": source, "object": obj})
    return docs


class Checker:
    def __init__(self, values, chart_dir):
        self.values = values
        self.chart_dir = chart_dir
        self.errors = []
        self.own_ds = ("", "")  # namespace, name of the rendered DaemonSet (run() sets it)
        self.pod = {}  # its pod spec
        self.cluster_ca = values["identity"]["source"] == "cluster-ca"
        self.ca_name = ""  # <fullname>-ca (run() sets it)
        self.ca_pod_labels = {}  # ferry-ca's pod labels (run() sets them)
        self.daemonset_obj = None
        self.bindings = []

    def ferryd_sa(self):
        return self.pod.get("serviceAccountName") or "default"

    def ferryd_volume(self, name):
        """ferryd's volume `name` and where its container mounts it (None, None: absent)."""
        vol = next((v for v in self.pod.get("volumes", []) if v["name"] == name), None)
        mount = next((m for m in self.pod.get("containers", [{}])[0].get("volumeMounts", []) if m["name"] == name), None)
        return vol, mount

    def expect(self, ok, message):
        if not ok:
            self.errors.append(message)

    def pod_spec(self, obj):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        spec = obj["spec"]["template"]["spec"]
        v = self.values
        self.expect(spec.get("hostNetwork") is True, f"{name}: hostNetwork must be true")
        for field in ("hostPID", "hostIPC"):
            self.expect(not spec.get(field), f"{name}: {field} must not be set")
        self.expect(not spec.get("initContainers"), f"{name}: no init containers (ferryd owns the datapath)")
        self.expect(len(spec.get("containers", [])) == 1, f"{name}: exactly one container (ferryd)")
        allowed_host_paths = {v["hostPaths"]["bpffs"], CNI_RUN}
        if v["identity"]["source"] == "files":
            allowed_host_paths.add(v["identity"]["files"]["hostPath"])
        if v["cni"]["enabled"]:
            allowed_host_paths |= {v["cni"]["binDir"], v["cni"]["confDir"], NETNS_DIR}
        for vol in spec.get("volumes", []):
            if "hostPath" in vol:
                self.expect(vol["hostPath"]["path"] in allowed_host_paths,
                            f"{name}: hostPath {vol['hostPath']['path']} is not one the chart needs")
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            self.container(name, c)

    def confined(self, name, c, probe_port):
        """What every container of the chart promises: no privilege, a read-only root, every
        capability dropped, no shell, probes on its own monitoring port."""
        sc = c.get("securityContext", {})
        self.expect(sc.get("privileged") is False, f"{name}: privileged must be false")
        self.expect(sc.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem must be true")
        caps = sc.get("capabilities", {})
        self.expect(caps.get("drop") == ["ALL"], f"{name}: capabilities.drop must be [ALL], is {caps.get('drop')}")
        self.expect(sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{name}: seccompProfile must be RuntimeDefault")
        for field in ("command", "args"):
            argv = c.get(field) or []
            self.expect(not any(SHELLS.search(str(a)) for a in argv[:1]) and "-c" not in argv,
                        f"{name}: {field} runs a shell ({argv})")
        if probe_port is None:  # ferryd: probes of its readiness file (ferryd_probes)
            return sc, caps
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe, {})
            port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
            self.expect(port == probe_port, f"{name}: {probe} must use port {probe_port}, uses {port}")
        self.expect(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/healthz/ready",
                    f"{name}: readinessProbe must GET /healthz/ready")
        return sc, caps

    def readiness_file(self):
        """The file ferryd's readiness probe reads (None: not a `ferryctl probe --file`)."""
        cmd = self.pod.get("containers", [{}])[0].get("readinessProbe", {}).get("exec", {}).get("command", [])
        return cmd[3] if len(cmd) == 4 and cmd[:3] == [FERRYCTL, "probe", "--file"] else None

    def ferryd_probes(self, name, c):
        """Both probes ask about this container's ferryd: its own readiness file, not :15021
        (which answers for whichever generation holds it), in a folder of its own."""
        path = self.readiness_file()
        self.expect(path is not None, f"{name}: readinessProbe must be exec [{FERRYCTL}, probe, --file, FILE], is "
                    f"{c.get('readinessProbe')}")
        live = c.get("livenessProbe", {}).get("exec", {}).get("command")
        self.expect(live == [FERRYCTL, "probe", "--file", path, "--live"],
                    f"{name}: livenessProbe must be exec [{FERRYCTL}, probe, --file, {path}, --live], is {c.get('livenessProbe')}")
        if path is None:
            return
        volumes = {vol["name"]: vol for vol in self.pod.get("volumes", [])}
        mounts = [m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
        vol = volumes.get(mounts[-1]["name"], {}) if mounts else {}
        self.expect("emptyDir" in vol, f"{name}: the readiness file {path} must be in an emptyDir of the pod's own, "
                    f"is in {vol or 'the image'} (two generations on a node would read each other's)")

    def container(self, owner, c):
        name = f"{owner} container {c['name']}"
        sc, caps = self.confined(name, c, None)
        self.ferryd_probes(name, c)
        self.expect(not c.get("ports"), f"{name}: declares ports {[p.get('containerPort') for p in c.get('ports', [])]}: "
                    "with hostNetwork they are host ports, and the next generation's pod could not start beside this one")
        added = set(caps.get("add", []))
        self.expect(added == EXPECTED_CAPS,
                    f"{name}: capabilities.add must be exactly {sorted(EXPECTED_CAPS)}, is {sorted(added)}")
        self.expect(len(caps.get("add", [])) == len(added), f"{name}: a capability is added twice")
        template = open(f"{self.chart_dir}/templates/daemonset.yaml").read()
        for cap in sorted(added):
            self.expect(re.search(rf"^\s*# {cap}:\s*$\n(\s*# .*\n)+\s*- {cap}\s*$", template, flags=re.M),
                        f"{name}: capability {cap} has no justification comment above it in templates/daemonset.yaml")
        env = {e["name"]: e for e in c.get("env", [])}
        self.expect(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
                    f"{name}: NODE_NAME must come from spec.nodeName")
        self.expect(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
                    f"{name}: POD_NAME must come from metadata.name (it names the generations of an upgrade)")
        self.expect(c.get("imagePullPolicy") == self.values["image"]["pullPolicy"],
                    f"{name}: imagePullPolicy {c.get('imagePullPolicy')} is not the values' {self.values['image']['pullPolicy']}")
        self.expect(c.get("image") == self.image_ref(),
                    f"{name}: image {c.get('image')} is not {self.image_ref()} (a digest in the values must pin it)")

    def daemonset(self, obj):
        name = f"DaemonSet/{obj['metadata']['name']}"
        strategy = obj["spec"].get("updateStrategy", {})
        v = self.values
        kind = v["updateStrategy"].get("type", "RollingUpdate")
        self.expect(strategy.get("type") == kind, f"{name}: updateStrategy must be the values' {kind}")
        surge = v["updateStrategy"]["maxSurge"]
        if kind == "OnDelete":
            want = None  # the controller replaces nothing by itself
        elif v["handover"]["enabled"] and KUBE_VERSION >= (1, 22) and surge not in (0, "0%"):
            want = {"maxSurge": surge, "maxUnavailable": 0}
        else:
            want = {"maxUnavailable": v["updateStrategy"]["maxUnavailable"]}
        self.expect(strategy.get("rollingUpdate") == want,
                    f"{name}: rollingUpdate on Kubernetes {'.'.join(map(str, KUBE_VERSION))} must be {want}, is "
                    f"{strategy.get('rollingUpdate')}")
        spec = obj["spec"]["template"]["spec"]
        grace = v["terminationGracePeriodSeconds"] + (v["handover"]["deadlineSeconds"] if v["handover"]["enabled"] else 0)
        self.expect(spec.get("terminationGracePeriodSeconds") == grace,
                    f"{name}: terminationGracePeriodSeconds must be {grace} (handover.deadlineSeconds plus "
                    f"terminationGracePeriodSeconds): the kubelet must not kill a ferryd that carries connections "
                    f"after a handover; is {spec.get('terminationGracePeriodSeconds')}")
        self.expect(spec.get("priorityClassName") == (self.values["priorityClassName"] or None),
                    f"{name}: priorityClassName is not the values'")
        self.expect(spec.get("tolerations") == (self.values["tolerations"] or None), f"{name}: tolerations are not the values'")
        self.pod_spec(obj)
        if self.cluster_ca:
            self.ferryd_cluster_ca(name, spec)

    def ferryd_cluster_ca(self, name, spec):
        """ferryd with identity.source cluster-ca: no Secret; bundle from a ConfigMap; a token for ferry-ca."""
        ca = self.values["identity"]["clusterCa"]
        for vol in spec.get("volumes", []):
            secrets = [vol["secret"].get("secretName")] if "secret" in vol else []
            secrets += [src["secret"].get("name") for src in vol.get("projected", {}).get("sources", []) if "secret" in src]
            for secret in secrets:
                self.errors.append(f"{name}: mounts Secret {secret} although identity.source is cluster-ca: "
                                   "a node's kubelet may read every Secret its pods mount (the CA key stays in ferry-ca)")
        vol, mount = self.ferryd_volume("identity")
        self.expect(vol is not None and vol.get("configMap", {}).get("name") == ca["bundleConfigMap"]
                    and vol["configMap"].get("items") == [{"key": ca["bundleConfigMapKey"], "path": "bundle.pem"}],
                    f"{name}: the identity volume must be ConfigMap {ca['bundleConfigMap']} "
                    f"({ca['bundleConfigMapKey']} as bundle.pem), is {vol}")
        vol, mount = self.ferryd_volume("ca-token")
        sources = (vol or {}).get("projected", {}).get("sources", [])
        token = sources[0].get("serviceAccountToken", {}) if len(sources) == 1 else {}
        self.expect(token.get("audience") == ca["tokenAudience"] and token.get("expirationSeconds") == ca["tokenExpirationSeconds"],
                    f"{name}: the ca-token volume must project one service-account token with audience "
                    f"{ca['tokenAudience']!r} and expirationSeconds {ca['tokenExpirationSeconds']}, is {sources}")
        self.expect(mount is not None and mount.get("readOnly") is True, f"{name}: the ca-token volume must be mounted read-only")
        self.expect(spec.get("dnsPolicy") == "ClusterFirstWithHostNet",
                    f"{name}: dnsPolicy must be ClusterFirstWithHostNet (ferryd resolves ferry-ca's Service name)")

    def rbac(self, obj):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        readable = READ_RESOURCES | (POLICY_RESOURCES if self.values["policy"]["kubernetes"] else set())
        granted = set()
        for rule in obj.get("rules", []):
            verbs = set(rule.get("verbs", []))
            if [(g, r) for g in rule.get("apiGroups", []) for r in rule.get("resources", [])] == [CNI_TOKEN]:
                # ferryd's one write: a token of ferry-cni's ServiceAccount, by name, in a Role.
                self.expect(obj["kind"] == "Role" and verbs == {"create"} and rule.get("resourceNames") == [self.cni_name]
                            and self.values["cni"]["enabled"] and self.values["cni"].get("apiCredentials"),
                            f"{name}: serviceaccounts/token only create, only of {self.cni_name}, in a Role, with cni.apiCredentials")
                continue
            self.expect(verbs and verbs <= READ_VERBS, f"{name}: verbs {sorted(verbs)} go beyond get/list/watch")
            self.expect(not rule.get("nonResourceURLs"), f"{name}: grants non-resource URLs")
            for group in rule.get("apiGroups", []):
                for res in rule.get("resources", []):
                    if (group, res) in OWN_RESOURCES:
                        self.expect(obj["kind"] == "Role" and rule.get("resourceNames") == [self.own_ds[1]],
                                    f"{name}: {group}/{res} only by ferry's own name, in a Role")
                        continue
                    self.expect((group, res) in readable, f"{name}: grants {group or 'core'}/{res}, which ferryd does not read")
                    granted.add((group, res))
        if obj["kind"] == "ClusterRole":
            for group, res in sorted(readable - granted):
                self.errors.append(f"{name}: grants no get/list/watch on {group or 'core'}/{res}, which ferryd reads")

    def crd(self, obj):
        """One of crds/: an Istio policy kind as Istio defines it, keeping every field."""
        meta_name = obj["metadata"]["name"]
        name = f"CustomResourceDefinition/{meta_name}"
        spec = obj.get("spec", {})
        plural, _, group = meta_name.partition(".")
        want = POLICY_CRDS.get(plural)
        self.expect(want is not None and group == POLICY_GROUP, f"{name}: not one of Istio's policy kinds ferryd reads")
        if want is None:
            return
        self.expect(spec.get("group") == POLICY_GROUP, f"{name}: group must be {POLICY_GROUP}")
        self.expect(spec.get("scope") == "Namespaced", f"{name}: scope must be Namespaced")
        names = spec.get("names", {})
        for key, value in dict(want, plural=plural, listKind=want["kind"] + "List").items():
            self.expect(names.get(key) == value, f"{name}: names.{key} must be {value!r} (Istio's), is {names.get(key)!r}")
        versions = {v.get("name"): v for v in spec.get("versions", [])}
        self.expect(set(versions) == {"v1", "v1beta1"}, f"{name}: versions must be v1 and v1beta1, are {sorted(versions)}")
        self.expect(versions.get("v1", {}).get("storage") is True and versions.get("v1beta1", {}).get("storage") is False,
                    f"{name}: v1 must be the storage version")
        for vname, v in versions.items():
            self.expect(v.get("served") is True, f"{name}: {vname} must be served")
            schema = v.get("schema", {}).get("openAPIV3Schema", {})
            props = schema.get("properties", {})
            for field in ("spec", "status"):
                self.expect(props.get(field, {}).get("x-kubernetes-preserve-unknown-fields") is True,
                            f"{name}: {vname} {field} must keep unknown fields (ferryd validates the spec itself)")

    def config(self, obj):
        text = obj.get("data", {}).get("ferry.yaml")
        self.expect(text is not None, "ConfigMap: no ferry.yaml")
        if text is None:
            return
        cfg = yaml.safe_load(text)
        v = self.values
        self.expect(set(cfg) <= CONFIG_KEYS, f"ConfigMap: keys {sorted(set(cfg) - CONFIG_KEYS)} are no ferryd keys")
        self.expect("node" not in cfg, "ConfigMap: node must come from NODE_NAME, not the file")
        self.expect(cfg.get("workload_source") == "kubernetes", "ConfigMap: workload_source must be kubernetes")
        dp = cfg.get("datapath", {})
        self.expect(dp.get("enabled") is True and dp.get("proxy_netns") == "auto",
                    "ConfigMap: datapath must be enabled with proxy_netns: auto")
        self.expect(dp.get("bpffs", "").startswith(v["hostPaths"]["bpffs"].rstrip("/") + "/"),
                    "ConfigMap: datapath.bpffs is not below the mounted bpffs")
        self.expect(cfg.get("identity", {}).get("source") == v["identity"]["source"], "ConfigMap: identity.source is not the values'")
        al = cfg.get("access_log", {})
        self.expect(al.get("format") == v["accessLog"]["format"] and al.get("enabled") == v["accessLog"]["enabled"],
                    "ConfigMap: access_log is not the values' accessLog")
        self.expect(cfg.get("trust_domain") == v["trustDomain"], "ConfigMap: trust_domain is not the values'")
        self.expect(cfg.get("kubernetes", {}).get("daemonset") == "/".join(self.own_ds),
                    "ConfigMap: kubernetes.daemonset is not this release's DaemonSet")
        pol = cfg.get("policy", {})
        self.expect(pol == {"kubernetes": v["policy"]["kubernetes"], "root_namespace": v["policy"]["rootNamespace"]},
                    f"ConfigMap: policy {pol} is not the values' policy.kubernetes and policy.rootNamespace")
        self.cni_config(cfg.get("cni", {}))
        self.handover_config(cfg.get("handover", {}))
        if self.cluster_ca:
            self.cluster_ca_config(cfg)

    def handover_config(self, ho):
        v = self.values["handover"]
        want = ({"socket": HANDOVER_SOCKET, "deadline": f"{v['deadlineSeconds']}s", "wait_for_signal": True}
                if v["enabled"] else {"socket": ""})
        want["readiness_file"] = self.readiness_file()
        self.expect(ho == want, f"ConfigMap: handover is {ho}, must be {want}")
        if v["enabled"]:
            path = ho.get("socket", "")
            self.expect(self.mounted_host_path(path) == path,
                        f"ConfigMap: handover.socket {path} is not the same path on the node (the next generation, "
                        "in another pod, finds the running one there)")

    def cluster_ca_config(self, cfg):
        """ferry.yaml's identity.cluster_ca names what the chart runs and mounts."""
        ca = self.values["identity"]["clusterCa"]
        ident = cfg.get("identity", {})
        self.expect(set(ident) == {"source", "poll_interval", "cluster_ca"}, f"ConfigMap: identity has {sorted(ident)}; "
                    "with cluster-ca only source, poll_interval and cluster_ca (no CA key on the node)")
        client = ident.get("cluster_ca", {})
        service = f"{self.ca_name}.{self.own_ds[0]}.svc"
        want = {"address": ca["address"] or f"{service}:{CA_PORTS['https']}", "server_name": ca["serverName"] or service,
                "request_timeout": ca["requestTimeout"]}
        vol, mount = self.ferryd_volume("ca-token")
        paths = [s.get("serviceAccountToken", {}).get("path") for s in (vol or {}).get("projected", {}).get("sources", [])]
        if mount and paths:
            want["token_file"] = f"{mount['mountPath'].rstrip('/')}/{paths[0]}"
        for key, value in want.items():
            self.expect(client.get(key) == value, f"ConfigMap: identity.cluster_ca.{key} is {client.get(key)!r}, must be {value!r}")
        self.expect(set(client) == {"address", "server_name", "token_file", "request_timeout"},
                    f"ConfigMap: identity.cluster_ca has {sorted(client)}")
        vol, mount = self.ferryd_volume("identity")
        self.expect(mount is not None and cfg.get("cert_dir") == mount["mountPath"],
                    f"ConfigMap: cert_dir {cfg.get('cert_dir')} is not where the bundle ConfigMap is mounted")

    def mounted_host_path(self, container_path):
        """The node path ferryd's container sees at `container_path` (None: not a host path)."""
        volumes = {vol["name"]: vol for vol in self.pod.get("volumes", [])}
        best = None
        for m in self.pod.get("containers", [{}])[0].get("volumeMounts", []):
            mount = m["mountPath"].rstrip("/")
            vol = volumes.get(m["name"], {})
            if "hostPath" in vol and (container_path == mount or container_path.startswith(mount + "/")):
                if best is None or len(mount) > len(best[0]):
                    best = (mount, vol["hostPath"]["path"].rstrip("/"))
        return None if best is None else best[1] + container_path[len(best[0]):]

    def cni_config(self, cni):
        v = self.values["cni"]
        self.expect(cni.get("enabled") is v["enabled"], "ConfigMap: cni.enabled is not the values'")
        if not v["enabled"]:
            self.expect(set(cni) == {"enabled"}, f"ConfigMap: cni has {sorted(set(cni) - {'enabled'})} although disabled")
            return
        self.expect(cni.get("install") is True, "ConfigMap: cni.install must be true (ferryd keeps the chain)")
        self.expect(cni.get("failure_policy") == v["failurePolicy"], "ConfigMap: cni.failure_policy is not the values'")
        self.expect(cni.get("exclude_namespaces") == v["excludeNamespaces"],
                    "ConfigMap: cni.exclude_namespaces is not the values'")
        for key, want in (("bin_dir", v["binDir"]), ("conf_dir", v["confDir"])):
            got = self.mounted_host_path(cni.get(key, ""))
            self.expect(got == want.rstrip("/"), f"ConfigMap: cni.{key} {cni.get(key)} is the node's {got}, not cni.{key[:-4]}Dir {want}")
        for key in ("socket", "state_dir"):
            path = cni.get(key, "")
            self.expect(self.mounted_host_path(path) == path,
                        f"ConfigMap: cni.{key} {path} is not the same path on the node (the plugin dials it there)")
        self.expect(cni.get("node_conf_dir") == v["confDir"], f"ConfigMap: cni.node_conf_dir {cni.get('node_conf_dir')} "
                    f"is not cni.confDir {v['confDir']} (the chain entry names the plugin's kubeconfig there)")
        want_sa = f"{self.own_ds[0]}/{self.cni_name}" if v.get("apiCredentials") else None
        self.expect(cni.get("service_account") == want_sa,
                    f"ConfigMap: cni.service_account is {cni.get('service_account')!r}, must be {want_sa!r}")

    def run(self, docs):
        kinds = [d["object"].get("kind") for d in docs]
        crds = sorted(d["object"]["metadata"]["name"] for d in docs if d["object"].get("kind") == "CustomResourceDefinition")
        self.expect(crds == sorted(f"{r}.{POLICY_GROUP}" for r in POLICY_CRDS),
                    f"CustomResourceDefinitions rendered: {crds}; expected Istio's two policy kinds (crds/)")
        for required in ("DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"):
            self.expect(required in kinds, f"no {required} rendered")
        self.expect(("PodMonitor" in kinds) == bool(self.values["monitoring"]["podMonitor"]["enabled"]),
                    "PodMonitor rendered although disabled, or missing although enabled")
        dashboards = [d["object"] for d in docs if d["object"].get("kind") == "ConfigMap"
                      and d["object"]["metadata"]["name"].endswith("-dashboards")]
        self.expect(bool(dashboards) == bool(self.values["monitoring"]["grafanaDashboard"]["enabled"]),
                    "dashboard ConfigMap rendered although disabled, or missing although enabled")
        for cm in dashboards:
            for name, text in cm.get("data", {}).items():
                try:
                    exprs = [p["expr"] for panel in json.loads(text)["panels"] for p in panel.get("targets", [])]
                except (ValueError, KeyError, TypeError) as e:
                    self.expect(False, f"dashboard ConfigMap: {name} is not a Grafana dashboard: {e}")
                    continue
                self.expect(len(exprs) > 0, f"dashboard ConfigMap: {name} has no queries")
        for d in docs:
            if d["object"].get("kind") == "DaemonSet":
                meta = d["object"]["metadata"]
                self.own_ds = (meta.get("namespace", ""), meta["name"])
                self.pod = d["object"]["spec"]["template"]["spec"]
                self.daemonset_obj = d["object"]
                # templates/_helpers.tpl ferry.caName: printf "%s-ca" | trunc 63 | trimSuffix "-"
                self.ca_name = (meta["name"] + "-ca")[:63]
                self.ca_name = self.ca_name[:-1] if self.ca_name.endswith("-") else self.ca_name
                self.cni_name = (meta["name"] + "-cni")[:63].rstrip("-")
        self.ca_objects(docs)
        self.cni_objects(docs)
        for d in docs:
            obj = d["object"]
            kind = obj.get("kind")
            if kind == "DaemonSet":
                self.daemonset(obj)
            elif kind == "Deployment" and self.cluster_ca and obj["metadata"]["name"] == self.ca_name:
                self.ca_deployment(obj)
            elif kind in ("Deployment", "StatefulSet", "Job", "Pod"):
                self.errors.append(f"{kind}/{obj['metadata']['name']}: the chart runs ferryd as a DaemonSet only "
                                   "(and ferry-ca as the Deployment <fullname>-ca with identity.source cluster-ca)")
            elif kind in ("ClusterRole", "Role") and self.bound_to_ca(obj):
                self.ca_rbac(obj)
            elif kind in ("ClusterRole", "Role") and self.bound_to_cni(obj):
                self.cni_rbac(obj)
            elif kind in ("ClusterRole", "Role"):
                self.rbac(obj)
            elif kind in ("ClusterRoleBinding", "RoleBinding"):
                self.binding(obj)
            elif kind == "Service":
                self.ca_service(obj)
            elif kind == "PodDisruptionBudget":
                self.ca_pdb(obj)
            elif kind == "ConfigMap" and not obj["metadata"]["name"].endswith("-dashboards"):
                self.config(obj)
            elif kind == "CustomResourceDefinition":
                self.crd(obj)
            elif kind == "Secret":
                self.errors.append("Secret: the chart never renders key material")
        return self.errors

    # ferry-ca (identity.source: cluster-ca).

    def ca_subject(self):
        return {"kind": "ServiceAccount", "name": self.ca_name, "namespace": self.own_ds[0]}

    def ca_objects(self, docs):
        """ferry-ca's objects are rendered with cluster-ca, and only then."""
        self.bindings = [d["object"] for d in docs if d["object"].get("kind") in ("ClusterRoleBinding", "RoleBinding")]
        named = {(d["object"].get("kind"), d["object"]["metadata"]["name"]): d["object"] for d in docs}
        replicas = self.values["identity"]["clusterCa"]["replicas"]
        for kind in ("Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "PodDisruptionBudget"):
            want = self.cluster_ca and (kind != "PodDisruptionBudget" or replicas > 1)
            self.expect(((kind, self.ca_name) in named) == want,
                        f"{kind}/{self.ca_name} rendered although identity.source is not cluster-ca (or replicas is 1), "
                        "or missing although it is")
        dep = named.get(("Deployment", self.ca_name))
        if dep:
            self.ca_pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})

    def cni_subject(self):
        return {"kind": "ServiceAccount", "name": self.cni_name, "namespace": self.own_ds[0]}

    def cni_objects(self, docs):
        """ferry-cni's identity is rendered with cni.enabled and cni.apiCredentials, and only then."""
        named = {(d["object"].get("kind"), d["object"]["metadata"]["name"]) for d in docs}
        want = bool(self.values["cni"]["enabled"] and self.values["cni"].get("apiCredentials"))
        for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            self.expect(((kind, self.cni_name) in named) == want,
                        f"{kind}/{self.cni_name} rendered without cni.apiCredentials, or missing with it")

    def bound_to_cni(self, role):
        return any(b["roleRef"]["kind"] == role["kind"] and b["roleRef"]["name"] == role["metadata"]["name"]
                   and self.cni_subject() in b.get("subjects", []) for b in self.bindings)

    def cni_rbac(self, obj):
        """ferry-cni's ClusterRole: get on pods and namespaces, nothing else."""
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        self.expect(obj["kind"] == "ClusterRole" and obj["metadata"]["name"] == self.cni_name,
                    f"{name}: ferry-cni's ServiceAccount is bound to something other than its own ClusterRole")
        granted = {}
        for rule in obj.get("rules", []):
            self.expect(not rule.get("nonResourceURLs") and not rule.get("resourceNames"),
                        f"{name}: a rule other than get on pods and namespaces")
            for group in rule.get("apiGroups", []):
                for res in rule.get("resources", []):
                    granted.setdefault((group, res), set()).update(rule.get("verbs", []))
        self.expect(granted == CNI_GRANTS, f"{name}: grants {sorted((g, r, sorted(v)) for (g, r), v in granted.items())}, "
                    "must be exactly get on core pods and namespaces")

    def bound_to_ca(self, role):
        return any(b["roleRef"]["kind"] == role["kind"] and b["roleRef"]["name"] == role["metadata"]["name"]
                   and self.ca_subject() in b.get("subjects", []) for b in self.bindings)

    def binding(self, obj):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        subjects = obj.get("subjects", [])
        if self.cni_subject() in subjects:
            self.expect(obj["kind"] == "ClusterRoleBinding" and obj["roleRef"]["name"] == self.cni_name
                        and subjects == [self.cni_subject()],
                        f"{name}: ferry-cni's ServiceAccount is bound to {obj['roleRef']['name']} or with other subjects")
        if self.ca_subject() in subjects:
            own_role = obj["kind"] == "RoleBinding" and obj["roleRef"]["kind"] == "Role" and self.manages_bundle()
            self.expect((obj["kind"] == "ClusterRoleBinding" or own_role) and obj["roleRef"]["name"] == self.ca_name,
                        f"{name}: ferry-ca's ServiceAccount is bound to {obj['roleRef']['name']}, not to its own ClusterRole"
                        " (or, keeping the bundle ConfigMap, its own Role)")
            for sub in subjects:
                self.expect(sub == self.ca_subject(),
                            f"{name}: binds ferry-ca's ClusterRole to {sub.get('kind')} {sub.get('namespace')}/{sub.get('name')} too")

    def manages_bundle(self):
        return self.cluster_ca and self.values["identity"]["clusterCa"].get("manageBundleConfigMap") is True

    def ca_bundle_role(self, obj):
        """The Role that lets ferry-ca keep the bundle ConfigMap: nothing more."""
        name = f"Role/{obj['metadata']['name']}"
        bundle = self.values["identity"]["clusterCa"]["bundleConfigMap"]
        self.expect(self.manages_bundle(), f"{name}: ferry-ca has a Role although clusterCa.manageBundleConfigMap is off")
        self.expect(obj["metadata"].get("namespace") in (None, "ferry-system"), f"{name}: not in the release's namespace")
        granted = set()
        for rule in obj.get("rules", []):
            self.expect(not rule.get("nonResourceURLs"), f"{name}: grants non-resource URLs")
            self.expect(rule.get("apiGroups") == [""] and rule.get("resources") == ["configmaps"],
                        f"{name}: grants {rule.get('apiGroups')}/{rule.get('resources')}; only core/configmaps")
            verbs = set(rule.get("verbs", []))
            names = rule.get("resourceNames")
            if names is None:
                self.expect(verbs == {"create"}, f"{name}: grants {sorted(verbs)} on every ConfigMap; only create")
            else:
                self.expect(names == [bundle] and verbs <= {"get", "update"},
                            f"{name}: grants {sorted(verbs)} on ConfigMaps {names}; only get/update on {bundle}")
            granted |= verbs
        self.expect(granted == {"create", "get", "update"}, f"{name}: grants {sorted(granted)}, needs create, get, update")

    def ca_rbac(self, obj):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "Role":
            self.ca_bundle_role(obj)
            return
        self.expect(obj["kind"] == "ClusterRole", f"{name}: ferry-ca's grants are one ClusterRole")
        granted = {}
        for rule in obj.get("rules", []):
            self.expect(not rule.get("nonResourceURLs"), f"{name}: grants non-resource URLs")
            verbs = set(rule.get("verbs", []))
            for group in rule.get("apiGroups", []):
                for res in rule.get("resources", []):
                    extra = verbs - CA_GRANTS.get((group, res), set())
                    self.expect(not extra, f"{name}: grants {sorted(extra)} on {group or 'core'}/{res}; "
                                "ferry-ca may only create tokenreviews and get/list/watch pods")
                    granted.setdefault((group, res), set()).update(verbs)
        for (group, res), verbs in sorted(CA_GRANTS.items()):
            missing = verbs - granted.get((group, res), set())
            self.expect(not missing, f"{name}: grants no {sorted(missing)} on {group or 'core'}/{res}, which ferry-ca needs")

    def image_ref(self):
        """REPOSITORY:TAG[@DIGEST] as the values give it (the tag defaults to appVersion)."""
        img = self.values["image"]
        app_version = yaml.safe_load(open(f"{self.chart_dir}/Chart.yaml"))["appVersion"]
        ref = f"{img['repository']}:{img.get('tag') or app_version}"
        return f"{ref}@{img['digest']}" if img.get("digest") else ref

    def ca_placement(self, name, spec, ca):
        """Off workload nodes by default: control-plane nodes preferred, their taints tolerated."""
        if ca.get("affinity"):
            self.expect(spec.get("affinity") == ca["affinity"], f"{name}: affinity is not the values' clusterCa.affinity")
            return
        preferred = spec.get("affinity", {}).get("nodeAffinity", {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution", [])
        keys = {e.get("key") for p in preferred for e in p.get("preference", {}).get("matchExpressions", [])
                if e.get("operator") == "Exists"}
        self.expect({"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"} <= keys,
                    f"{name}: does not prefer control-plane nodes (the node that runs ferry-ca holds the CA key)")
        self.expect(spec.get("tolerations") == (ca["tolerations"] or None), f"{name}: tolerations are not the values'")

    def ca_deployment(self, obj):
        name = f"Deployment/{obj['metadata']['name']}"
        ca = self.values["identity"]["clusterCa"]
        self.ca_placement(name, obj["spec"]["template"]["spec"], ca)
        self.expect(obj["spec"].get("replicas") == ca["replicas"], f"{name}: replicas is not the values' clusterCa.replicas")
        spec = obj["spec"]["template"]["spec"]
        selector = self.pod_selector()
        self.expect(not selector or not selector.items() <= self.ca_pod_labels.items(),
                    f"{name}: its pods carry the DaemonSet's selector labels {selector}")
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            self.expect(not spec.get(field), f"{name}: {field} must not be set")
        self.expect(not spec.get("initContainers"), f"{name}: no init containers")
        self.expect(len(spec.get("containers", [])) == 1, f"{name}: exactly one container (ferry-ca)")
        self.expect(spec.get("serviceAccountName") == self.ca_name and self.ca_name != self.ferryd_sa(),
                    f"{name}: must run as its own ServiceAccount {self.ca_name}, not {spec.get('serviceAccountName')}")
        self.expect(spec.get("automountServiceAccountToken") is not False, f"{name}: needs its API token (TokenReviews, pods)")
        psc = spec.get("securityContext", {})
        self.expect(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0,
                    f"{name}: the pod must not run as root (runAsNonRoot, runAsUser {psc.get('runAsUser')})")
        self.expect(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{name}: seccompProfile must be RuntimeDefault")
        volumes = spec.get("volumes", [])
        for vol in volumes:
            self.expect("hostPath" not in vol, f"{name}: hostPath {vol.get('hostPath', {}).get('path')} (ferry-ca needs none)")
        secret_vols = [v for v in volumes if "secret" in v or any("secret" in s for s in v.get("projected", {}).get("sources", []))]
        self.expect(len(secret_vols) == 1 and secret_vols[0].get("secret", {}).get("secretName") == ca["secretName"],
                    f"{name}: must mount exactly the Secret {ca['secretName']}, mounts {secret_vols}")
        if secret_vols and "secret" in secret_vols[0]:
            sec = secret_vols[0]["secret"]
            want = sorted([{"key": ca["certKey"], "path": "ca.pem"}, {"key": ca["keyKey"], "path": "ca.key"},
                           {"key": ca["bundleKey"], "path": "bundle.pem"}], key=lambda i: i["path"])
            got = sorted(sec.get("items", []), key=lambda i: i.get("path", ""))
            self.expect(got == want, f"{name}: the Secret's items must map certKey, keyKey, bundleKey to "
                        f"ca.pem, ca.key, bundle.pem, are {got}")
            mode = sec.get("defaultMode", 0o644)
            self.expect(mode & 0o227 == 0, f"{name}: the Secret's defaultMode {mode:04o} lets others than its owner "
                        "and group read the CA key, or anyone write it")
            for item in sec.get("items", []):
                self.expect("mode" not in item, f"{name}: the Secret's item {item.get('key')} overrides defaultMode")
        for c in spec.get("containers", []):
            self.ca_container(name, c, secret_vols[0]["name"] if secret_vols else None)

    def ca_container(self, owner, c, secret_volume):
        name = f"{owner} container {c['name']}"
        ca = self.values["identity"]["clusterCa"]
        sc, caps = self.confined(name, c, CA_PORTS["monitoring"])
        self.expect(sc.get("allowPrivilegeEscalation") is False, f"{name}: allowPrivilegeEscalation must be false")
        self.expect(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0,
                    f"{name}: must not run as root (runAsNonRoot, runAsUser {sc.get('runAsUser')})")
        self.expect(not caps.get("add"), f"{name}: capabilities.add must be empty, is {sorted(caps.get('add') or [])}")
        ferryd = self.pod.get("containers", [{}])[0]
        self.expect(c.get("image") == ferryd.get("image") and c.get("imagePullPolicy") == ferryd.get("imagePullPolicy"),
                    f"{name}: image {c.get('image')} is not ferryd's {ferryd.get('image')} (ferry-ca ships beside ferryd)")
        self.expect(c.get("command") == [CA_BINARY], f"{name}: command must be [{CA_BINARY}], is {c.get('command')}")
        args = c.get("args") or []
        flags = dict(zip(args[::2], args[1::2])) if len(args) % 2 == 0 else {}
        self.expect(flags, f"{name}: args must be --flag value pairs, are {args}")
        vol, _ = self.ferryd_volume("ca-token")
        audiences = [s.get("serviceAccountToken", {}).get("audience") for s in (vol or {}).get("projected", {}).get("sources", [])]
        want = {
            "--trust-domain": self.values["trustDomain"],
            "--agent-namespace": self.own_ds[0],
            "--agent-service-account": self.ferryd_sa(),
            "--service-name": self.ca_name,
            "--audience": ca["tokenAudience"],
            "--ca-cert": f"{CA_MOUNT}/ca.pem",
            "--ca-key": f"{CA_MOUNT}/ca.key",
            "--bundle": f"{CA_MOUNT}/bundle.pem",
            "--max-validity": ca["maxValidity"],
            "--default-validity": self.values["identity"]["leafLifetime"],
        }
        for flag, value in want.items():
            self.expect(flags.get(flag) == value, f"{name}: {flag} is {flags.get(flag)!r}, must be {value!r}")
        self.expect(audiences == [flags.get("--audience")],
                    f"{name}: ferryd's token audience {audiences} is not ferry-ca's --audience {flags.get('--audience')!r}")
        mounts = [m for m in c.get("volumeMounts", []) if m["name"] == secret_volume]
        self.expect(len(mounts) == 1 and mounts[0]["mountPath"] == CA_MOUNT and mounts[0].get("readOnly") is True,
                    f"{name}: the CA Secret must be mounted read-only at {CA_MOUNT}, is {mounts}")
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        self.expect(ports == CA_PORTS, f"{name}: ports must be {CA_PORTS}, are {ports}")
        env = {e["name"]: e for e in c.get("env", [])}
        self.expect(env.get("POD_NAMESPACE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace",
                    f"{name}: POD_NAMESPACE must come from metadata.namespace")

    def pod_selector(self):
        ds = self.daemonset_obj or {}
        return ds.get("spec", {}).get("selector", {}).get("matchLabels", {})

    def ca_service(self, obj):
        name = f"Service/{obj['metadata']['name']}"
        self.expect(self.cluster_ca and obj["metadata"]["name"] == self.ca_name, f"{name}: the chart's only Service is ferry-ca's")
        spec = obj.get("spec", {})
        selector = spec.get("selector", {})
        self.expect(selector and selector.items() <= self.ca_pod_labels.items(),
                    f"{name}: selector {selector} does not select ferry-ca's pods")
        ports = {p.get("name"): (p.get("port"), p.get("targetPort")) for p in spec.get("ports", [])}
        self.expect(ports == {n: (port, n) for n, port in CA_PORTS.items()}, f"{name}: ports must be {CA_PORTS}, are {ports}")
        if self.cluster_ca:
            self.expect(spec.get("clusterIP") == (self.values["identity"]["clusterCa"]["clusterIP"] or None),
                        f"{name}: clusterIP is not the values' clusterCa.clusterIP")

    def ca_pdb(self, obj):
        name = f"PodDisruptionBudget/{obj['metadata']['name']}"
        spec = obj.get("spec", {})
        self.expect(spec.get("minAvailable") == 1 and "maxUnavailable" not in spec, f"{name}: minAvailable must be 1")
        labels = spec.get("selector", {}).get("matchLabels", {})
        self.expect(labels and labels.items() <= self.ca_pod_labels.items(), f"{name}: selector does not select ferry-ca's pods")


def mutate(docs, case):
    """One deliberate break per negative case; returns the changed list."""
    def first(kind):
        """ferryd's object of that kind (ferry-ca's carry the component label cluster-ca)."""
        return next(d["object"] for d in docs if d["object"].get("kind") == kind
                    and d["object"]["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "cluster-ca")
    ds = first("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    if case == "unknown-field":          # a misspelt field: only the TypeScript check sees it
        c["securityContex"] = {"privileged": True}
    elif case == "unknown-nested-field":
        c["readinessProbe"]["exec"]["comand"] = ["/bin/true"]
    elif case == "unknown-field-configmap":
        first("ConfigMap")["datas"] = {"x": "y"}
    elif case == "wrong-type":           # the ajv validators see these
        pod["terminationGracePeriodSeconds"] = "30"
    elif case == "missing-required":
        del c["name"]
    elif case == "unknown-kind":
        docs.append({"source": "injected", "object": {"apiVersion": "example.com/v1", "kind": "Gadget",
                                                        "metadata": {"name": "x"}}})
    elif case == "privileged":           # chart_checks.py sees these
        c["securityContext"]["privileged"] = True
    elif case == "extra-capability":
        c["securityContext"]["capabilities"]["add"].append("NET_RAW")
    elif case == "no-drop-all":
        c["securityContext"]["capabilities"]["drop"] = []
    elif case == "host-pid":
        pod["hostPID"] = True
    elif case == "host-root":
        pod["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    elif case == "shell-init":
        pod["initContainers"] = [dict(c, name="setup", command=["sh", "-c", "tc qdisc add dev eth0 clsact"])]
    elif case == "image-not-pinned":     # the values pin a digest the pod spec does not carry
        c["image"] = c["image"].split("@")[0]
    elif case == "rbac-write":
        first("ClusterRole")["rules"][0]["verbs"].append("patch")
    elif case == "rbac-secrets":
        first("ClusterRole")["rules"][0]["resources"].append("secrets")
    elif case == "cni-socket-not-on-node":  # the plugin would dial a path only ferryd sees
        cm = first("ConfigMap")
        cfg = yaml.safe_load(cm["data"]["ferry.yaml"])
        cfg["cni"]["socket"] = "/run/ferry-private/cni.sock"
        cm["data"]["ferry.yaml"] = yaml.safe_dump(cfg)
    elif case == "handover-socket-not-on-node":  # the next pod would not find the running ferryd
        cm = first("ConfigMap")
        cfg = yaml.safe_load(cm["data"]["ferry.yaml"])
        cfg["handover"]["socket"] = "/run/ferry-private/handover.sock"
        cm["data"]["ferry.yaml"] = yaml.safe_dump(cfg)
    elif case == "host-port":            # the surge pod would never be scheduled beside the old one
        c["ports"] = [{"name": "hbone", "containerPort": 15008, "protocol": "TCP"}]
    elif case == "probe-on-shared-port":  # answers for whichever generation holds :15021
        c["readinessProbe"] = {"httpGet": {"path": "/healthz/ready", "port": 15021}}
    elif case == "readiness-file-on-node":  # both generations would write one file
        probe = next(vol for vol in pod["volumes"] if vol["name"] == "probe")
        probe.pop("emptyDir")
        probe["hostPath"] = {"path": "/var/run/ferry", "type": "DirectoryOrCreate"}
    elif case == "grace-shorter-than-deadline":  # the kubelet would kill a ferryd still carrying connections
        pod["terminationGracePeriodSeconds"] = 30
    elif case == "cni-conf-dir-not-mounted":
        pod["volumes"] = [vol for vol in pod["volumes"] if vol["name"] != "cni-conf"]
    elif case == "cni-rbac-list":        # ferry-cni's token would list every pod of the cluster
        role = next(d["object"] for d in docs if d["object"].get("kind") == "ClusterRole"
                    and d["object"]["metadata"]["name"].endswith("-cni"))
        role["rules"][0]["verbs"].append("list")
    elif case == "token-any-serviceaccount":  # ferryd could mint a token of any ServiceAccount
        rule = next(r for r in first("Role")["rules"] if r.get("resources") == ["serviceaccounts/token"])
        del rule["resourceNames"]
    elif case == "rbac-any-daemonset":   # the Role must name ferry's own DaemonSet
        del first("Role")["rules"][0]["resourceNames"]
    elif case == "rbac-no-policies":     # ferryd watches them (policy.kubernetes), RBAC must say so
        rules = first("ClusterRole")["rules"]
        rules[:] = [r for r in rules if "security.istio.io" not in r.get("apiGroups", [])]
    elif case == "crd-storage-v1beta1":  # Istio 1.22+ stores v1; policies must survive either CRD
        for v in first("CustomResourceDefinition")["spec"]["versions"]:
            v["storage"] = v["name"] == "v1beta1"
    elif case == "crd-pruning-spec":     # a schema that prunes: misspelt fields would vanish, unrefused
        crd = first("CustomResourceDefinition")
        del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"]
    elif case == "crd-short-name":
        first("CustomResourceDefinition")["spec"]["names"]["shortNames"] = ["authz"]
    elif case.startswith("ca-"):         # rendered with identity.source cluster-ca
        mutate_ca(docs, case, first, pod, c)
    else:
        raise SystemExit(f"unknown case {case}")
    return docs


def mutate_ca(docs, case, first, ferryd_pod, ferryd):
    """The cluster-ca cases: ferry-ca's objects, or ferryd's side of them, broken on purpose."""
    dep = next(d["object"] for d in docs if d["object"].get("kind") == "Deployment")  # ferry-ca's, the only one
    ca_pod = dep["spec"]["template"]["spec"]
    ca = ca_pod["containers"][0]
    role = next(d["object"] for d in docs if d["object"].get("kind") == "ClusterRole"
                and d["object"]["metadata"]["name"] == dep["metadata"]["name"])
    binding = next(d["object"] for d in docs if d["object"].get("kind") == "ClusterRoleBinding"
                   and d["object"]["metadata"]["name"] == dep["metadata"]["name"])
    if case == "ca-secret-on-ferryd":    # the kubelet of every node could read the CA key
        ferryd_pod["volumes"].append({"name": "ca-key", "secret": {"secretName": "ferry-ca"}})
        ferryd["volumeMounts"].append({"name": "ca-key", "mountPath": "/etc/ferry/ca", "readOnly": True})
    elif case == "ca-rbac-extra":
        role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    elif case == "ca-rbac-write-pods":
        role["rules"][1]["verbs"].append("delete")
    elif case == "ca-role-to-ferryd":    # ferryd's ServiceAccount must not get ferry-ca's grants
        binding["subjects"].append({"kind": "ServiceAccount", "name": ferryd_pod["serviceAccountName"],
                                    "namespace": binding["subjects"][0]["namespace"]})
    elif case == "ca-capability":
        ca["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    elif case == "ca-root":
        ca_pod["securityContext"]["runAsUser"] = 0
    elif case == "ca-privilege-escalation":
        ca["securityContext"]["allowPrivilegeEscalation"] = True
    elif case == "ca-host-network":
        ca_pod["hostNetwork"] = True
    elif case == "ca-key-world-readable":
        next(v for v in ca_pod["volumes"] if "secret" in v)["secret"]["defaultMode"] = 0o444
    elif case == "ca-key-item":          # the key under another name than --ca-key reads
        next(v for v in ca_pod["volumes"] if "secret" in v)["secret"]["items"][1]["path"] = "tls.key"
    elif case == "ca-on-workload-nodes":  # the default placement lost its control-plane preference
        del ca_pod["affinity"]["nodeAffinity"]
    elif case == "ca-bundle-role-any-configmap":  # get/update on every ConfigMap of the namespace
        bundle_role = next(d["object"] for d in docs if d["object"].get("kind") == "Role"
                           and d["object"]["metadata"]["name"] == dep["metadata"]["name"])
        del bundle_role["rules"][1]["resourceNames"]
    elif case == "ca-probe-port":
        ca["readinessProbe"]["httpGet"]["port"] = 15012
    elif case == "ca-token-audience":    # ferryd's token would be refused as wrong_audience
        vol = next(v for v in ferryd_pod["volumes"] if v["name"] == "ca-token")
        vol["projected"]["sources"][0]["serviceAccountToken"]["audience"] = "kubernetes"
    elif case == "ca-token-file-not-mounted":  # the API token instead: ferry-ca would hold a credential for the API
        cm = next(d["object"] for d in docs if d["object"].get("kind") == "ConfigMap")
        cfg = yaml.safe_load(cm["data"]["ferry.yaml"])
        cfg["identity"]["cluster_ca"]["token_file"] = "/var/run/secrets/kubernetes.io/serviceaccount/token"
        cm["data"]["ferry.yaml"] = yaml.safe_dump(cfg)
    elif case == "ca-other-deployment":  # ferry-ca is the one Deployment, by name
        docs.append({"source": "injected", "object": dict(copy.deepcopy(dep), metadata={"name": "helper"})})
    else:
        raise SystemExit(f"unknown case {case}")


def main(argv):
    if len(argv) >= 2 and argv[1] == "check":
        rest = [a for a in argv[2:] if a != "--json"]
        out = argv[argv.index("--json") + 1]
        rest.remove(out)
        rendered, chart_dir = rest[0], rest[1]
        values = yaml.safe_load(open(f"{chart_dir}/values.yaml"))
        for extra in rest[2:]:  # values files in Helm's order: later ones win
            values = merge(values, yaml.safe_load(open(extra)))
        docs = load_rendered(rendered)
        errors = Checker(values, chart_dir).run(docs)
        json.dump(docs, open(out, "w"), indent=1)
        for e in errors:
            print(f"chart_checks: {e}")
        return 1 if errors else 0
    if len(argv) == 5 and argv[1] == "mutate":
        docs = json.load(open(argv[2]))
        json.dump(mutate(docs, argv[3]), open(argv[4], "w"), indent=1)
        return 0
    if len(argv) >= 5 and argv[1] == "recheck":
        # chart_checks.py recheck DOCS.json CHART_DIR VALUES...|-: the assertions on a JSON list.
        values = yaml.safe_load(open(f"{argv[3]}/values.yaml"))
        for extra in argv[4:]:
            if extra != "-":
                values = merge(values, yaml.safe_load(open(extra)))
        errors = Checker(values, argv[3]).run(json.load(open(argv[2])))
        for e in errors:
            print(f"chart_checks: {e}")
        return 1 if errors else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
