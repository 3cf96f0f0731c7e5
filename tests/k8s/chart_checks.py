#!/usr/bin/env python3
"""What the chart promises about a node's security, checked on `helm template` output.

  chart_checks.py check RENDERED.yaml CHART_DIR [VALUES.yaml] --json OUT.json
      asserts the promises below, then writes the rendered objects as a JSON list (with the
      template each came from) for chart_validate.mjs. Exit 1 with one line per broken
      promise.
  chart_checks.py mutate IN.json CASE OUT.json
      breaks one rendered object on purpose (the negative cases of chart_offline.sh).

The promises (docs/install.md): ferryd is never privileged, drops every capability and adds
exactly the ones the chart justifies in a comment; it shares only the host's network
namespace; it mounts only the host paths it needs; no container runs a shell; its RBAC only
reads (get/list/watch) the kinds its informers watch. The configuration it renders agrees with
the mounts: ferry-cni's bin and configuration folders are the node's the values name, and
its socket is at the same path on the node (where the plugin dials it) as in the container.
Its CustomResourceDefinitions (crds/, rendered with --include-crds) are Istio's two policy
kinds exactly as Istio names and serves them, keeping every field, and the ClusterRole reads
them when policy.kubernetes says ferryd watches them (and only then).
"""
import copy
import json
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
# Keys ferryd's configuration may have (docs/configuration.md); the chart renders these.
CONFIG_KEYS = {"trust_domain", "log_level", "workers", "workload_source", "kubernetes", "policy",
               "cert_dir", "identity", "timeouts", "datapath", "cni", "pool", "hbone", "limits"}
# ferry-cni's endpoint folder: the plugin runs on the node and dials the path the chain entry
# names, so ferryd must see the node's folder at the node's own path.
CNI_RUN = "/var/run/ferry"
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
        allowed_host_paths = {v["hostPaths"]["bpffs"]}
        if v["identity"]["source"] == "files":
            allowed_host_paths.add(v["identity"]["files"]["hostPath"])
        if v["cni"]["enabled"]:
            allowed_host_paths |= {v["cni"]["binDir"], v["cni"]["confDir"], CNI_RUN, NETNS_DIR}
        for vol in spec.get("volumes", []):
            if "hostPath" in vol:
                self.expect(vol["hostPath"]["path"] in allowed_host_paths,
                            f"{name}: hostPath {vol['hostPath']['path']} is not one the chart needs")
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            self.container(name, c)

    def container(self, owner, c):
        name = f"{owner} container {c['name']}"
        sc = c.get("securityContext", {})
        self.expect(sc.get("privileged") is False, f"{name}: privileged must be false")
        self.expect(sc.get("readOnlyRootFilesystem") is True, f"{name}: readOnlyRootFilesystem must be true")
        caps = sc.get("capabilities", {})
        self.expect(caps.get("drop") == ["ALL"], f"{name}: capabilities.drop must be [ALL], is {caps.get('drop')}")
        added = set(caps.get("add", []))
        self.expect(added == EXPECTED_CAPS,
                    f"{name}: capabilities.add must be exactly {sorted(EXPECTED_CAPS)}, is {sorted(added)}")
        self.expect(len(caps.get("add", [])) == len(added), f"{name}: a capability is added twice")
        template = open(f"{self.chart_dir}/templates/daemonset.yaml").read()
        for cap in sorted(added):
            self.expect(re.search(rf"^\s*# {cap}:\s*$\n(\s*# .*\n)+\s*- {cap}\s*$", template, flags=re.M),
                        f"{name}: capability {cap} has no justification comment above it in templates/daemonset.yaml")
        for field in ("command", "args"):
            argv = c.get(field) or []
            self.expect(not any(SHELLS.search(str(a)) for a in argv[:1]) and "-c" not in argv,
                        f"{name}: {field} runs a shell ({argv})")
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe, {})
            port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
            self.expect(port == 15021, f"{name}: {probe} must use port 15021, uses {port}")
        self.expect(c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/healthz/ready",
                    f"{name}: readinessProbe must GET /healthz/ready")
        env = {e["name"]: e for e in c.get("env", [])}
        self.expect(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
                    f"{name}: NODE_NAME must come from spec.nodeName")
        self.expect(c.get("imagePullPolicy") == self.values["image"]["pullPolicy"],
                    f"{name}: imagePullPolicy {c.get('imagePullPolicy')} is not the values' {self.values['image']['pullPolicy']}")

    def daemonset(self, obj):
        name = f"DaemonSet/{obj['metadata']['name']}"
        strategy = obj["spec"].get("updateStrategy", {})
        self.expect(strategy.get("type") == "RollingUpdate", f"{name}: updateStrategy must be RollingUpdate")
        self.expect(strategy.get("rollingUpdate", {}).get("maxUnavailable") == self.values["updateStrategy"]["maxUnavailable"],
                    f"{name}: maxUnavailable is not the values'")
        spec = obj["spec"]["template"]["spec"]
        self.expect(spec.get("priorityClassName") == (self.values["priorityClassName"] or None),
                    f"{name}: priorityClassName is not the values'")
        self.expect(spec.get("tolerations") == (self.values["tolerations"] or None), f"{name}: tolerations are not the values'")
        self.pod_spec(obj)

    def rbac(self, obj):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        readable = READ_RESOURCES | (POLICY_RESOURCES if self.values["policy"]["kubernetes"] else set())
        granted = set()
        for rule in obj.get("rules", []):
            verbs = set(rule.get("verbs", []))
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
        self.expect(cfg.get("trust_domain") == v["trustDomain"], "ConfigMap: trust_domain is not the values'")
        self.expect(cfg.get("kubernetes", {}).get("daemonset") == "/".join(self.own_ds),
                    "ConfigMap: kubernetes.daemonset is not this release's DaemonSet")
        pol = cfg.get("policy", {})
        self.expect(pol == {"kubernetes": v["policy"]["kubernetes"], "root_namespace": v["policy"]["rootNamespace"]},
                    f"ConfigMap: policy {pol} is not the values' policy.kubernetes and policy.rootNamespace")
        self.cni_config(cfg.get("cni", {}))

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
        for d in docs:
            obj = d["object"]
            kind = obj.get("kind")
            if kind == "DaemonSet":
                self.daemonset(obj)
            elif kind in ("Deployment", "StatefulSet", "Job", "Pod"):
                self.errors.append(f"{kind}: the chart runs ferryd as a DaemonSet only")
            elif kind in ("ClusterRole", "Role"):
                self.rbac(obj)
            elif kind == "ConfigMap" and not obj["metadata"]["name"].endswith("-dashboards"):
                self.config(obj)
            elif kind == "CustomResourceDefinition":
                self.crd(obj)
            elif kind == "Secret":
                self.errors.append("Secret: the chart never renders key material")
        return self.errors


def mutate(docs, case):
    """One deliberate break per negative case; returns the changed list."""
    def first(kind):
        return next(d["object"] for d in docs if d["object"].get("kind") == kind)
    ds = first("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    if case == "unknown-field":          # a misspelt field: only the TypeScript check sees it
        c["securityContex"] = {"privileged": True}
    elif case == "unknown-nested-field":
        c["readinessProbe"]["httpGet"]["paht"] = "/healthz/ready"
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
    elif case == "rbac-write":
        first("ClusterRole")["rules"][0]["verbs"].append("patch")
    elif case == "rbac-secrets":
        first("ClusterRole")["rules"][0]["resources"].append("secrets")
    elif case == "cni-socket-not-on-node":  # the plugin would dial a path only ferryd sees
        cm = first("ConfigMap")
        cfg = yaml.safe_load(cm["data"]["ferry.yaml"])
        cfg["cni"]["socket"] = "/run/ferry-private/cni.sock"
        cm["data"]["ferry.yaml"] = yaml.safe_dump(cfg)
    elif case == "cni-conf-dir-not-mounted":
        pod["volumes"] = [vol for vol in pod["volumes"] if vol["name"] != "cni-conf"]
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
    else:
        raise SystemExit(f"unknown case {case}")
    return docs


def main(argv):
    if len(argv) >= 2 and argv[1] == "check":
        rest = [a for a in argv[2:] if a != "--json"]
        out = argv[argv.index("--json") + 1]
        rest.remove(out)
        rendered, chart_dir = rest[0], rest[1]
        values = yaml.safe_load(open(f"{chart_dir}/values.yaml"))
        if len(rest) > 2:
            values = merge(values, yaml.safe_load(open(rest[2])))
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
    if len(argv) == 5 and argv[1] == "recheck":
        # chart_checks.py recheck DOCS.json CHART_DIR VALUES|-: the assertions on a JSON list.
        values = yaml.safe_load(open(f"{argv[3]}/values.yaml"))
        if argv[4] != "-":
            values = merge(values, yaml.safe_load(open(argv[4])))
        errors = Checker(values, argv[3]).run(json.load(open(argv[2])))
        for e in errors:
            print(f"chart_checks: {e}")
        return 1 if errors else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
