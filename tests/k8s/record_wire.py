#!/usr/bin/env python3
"""Records raw HTTP/1.1 responses of a REAL Kubernetes API server for the replay tier.

Every byte a response carries is kept as it came out of the TLS connection: status line,
headers, chunk framing, chunk boundaries, and the size and time of every recv(). Nothing is
generated here: the objects are created on the live cluster (namespace fy-replay) with
kubectl, and the responses are the server's own. tests/k8s/replay/README.md lists the cases
and which ones the replay server derives from these recordings (a cut, 429, 500, slow
chunks: a server cannot be made to produce them on demand).

Usage (root, on a cluster from scripts/k8s-lab/cluster.sh up):
  tests/k8s/record_wire.py --kubeconfig /var/lib/fy-k8s/admin.kubeconfig \
      --out tests/k8s/replay/fixtures [--cases workloads|policies|all]
The cluster's etcd must be reachable with etcdctl (--etcd, for the compaction case). The
policies cases need a cluster without the security.istio.io CRDs: they record the 404s of
their absence, then install an old Istio's v1beta1-only definition and delete it under an
open watch, then install the chart's (charts/ferry/crds) and leave them installed.
"""
import argparse
import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import yaml

NS = "fy-replay"


def sh(*args, check=True, input=None):
    r = subprocess.run(args, capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        sys.exit(f"record_wire: {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


class Cluster:
    def __init__(self, kubeconfig, etcd):
        self.kubeconfig = kubeconfig
        self.etcd = etcd
        view = json.loads(sh("kubectl", "--kubeconfig", kubeconfig, "config", "view", "--raw", "--minify",
                             "-o", "json"))
        cluster = view["clusters"][0]["cluster"]
        user = view["users"][0]["user"]
        server = cluster["server"]
        assert server.startswith("https://")
        hostport = server[len("https://"):].rstrip("/")
        self.host, _, port = hostport.rpartition(":")
        self.port = int(port)
        self.tmp = tempfile.mkdtemp(prefix="fy-record-")

        def material(key, name):
            if key + "-data" in cluster or key + "-data" in user:
                data = base64.b64decode((cluster.get(key + "-data") or user.get(key + "-data")))
                path = os.path.join(self.tmp, name)
                with open(path, "wb") as f:
                    f.write(data)
                return path
            return cluster.get(key) or user.get(key)

        self.ca = material("certificate-authority", "ca.crt")
        self.cert = material("client-certificate", "client.crt")
        self.key = material("client-key", "client.key")

    def kubectl(self, *args, input=None, check=True):
        return sh("kubectl", "--kubeconfig", self.kubeconfig, *args, input=input, check=check)

    def tls(self, client_cert=True):
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.check_hostname = False  # the lab's certificate names its IP; verified by the CA
        if client_cert and self.cert:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def churn(self, path, n):
        """n merge-patches of one annotation on one keep-alive connection (fast, unrecorded)."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.tls())
        for i in range(n):
            body = json.dumps({"metadata": {"annotations": {"fy-churn": str(i)}}})
            conn.request("PATCH", path, body=body, headers={"Content-Type": "application/merge-patch+json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                sys.exit(f"record_wire: PATCH {path}: HTTP {r.status}")
        conn.close()

    def get(self, target, client_cert=True, bearer=None, on_open=None, max_seconds=60):
        """One GET on its own connection; returns the exchange with the raw bytes."""
        raw = socket.create_connection((self.host, self.port), timeout=max_seconds)
        conn = self.tls(client_cert).wrap_socket(raw, server_hostname=self.host)
        req = f"GET {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUser-Agent: ferry-record-wire\r\n" \
              "Accept: application/json\r\n"
        if bearer:
            req += f"Authorization: Bearer {bearer}\r\n"
        req += "\r\n"
        conn.sendall(req.encode())
        t0 = time.monotonic()
        data = bytearray()
        reads = []
        opened = False
        while True:
            try:
                piece = conn.recv(1 << 20)
            except (socket.timeout, ssl.SSLError, ConnectionError) as e:
                print(f"  {target}: recv ended: {e}", file=sys.stderr)
                break
            if not piece:
                break
            data += piece
            reads.append({"t_ms": round((time.monotonic() - t0) * 1000, 1), "bytes": len(piece)})
            if not opened and b"\r\n\r\n" in data:
                opened = True
                if on_open:
                    on_open()
            if response_complete(bytes(data)):
                break
        conn.close()
        return {"target": target, "auth": "client-cert" if client_cert else ("bearer" if bearer else "none"),
                "reads": reads, "raw": bytes(data)}


def response_complete(data):
    """True once a whole response (Content-Length or the last chunk) has arrived."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    headers = head.decode("latin-1").lower()
    if "transfer-encoding: chunked" in headers:
        return body.endswith(b"0\r\n\r\n") and chunked_complete(body)
    for line in headers.split("\r\n"):
        if line.startswith("content-length:"):
            return len(body) >= int(line.split(":", 1)[1])
    return False


def chunked_complete(body):
    pos = 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            return False
        size = int(body[pos:end].split(b";")[0], 16)
        pos = end + 2 + size + 2
        if size == 0:
            return pos <= len(body)
        if pos > len(body):
            return False


def body_json(exchange):
    """The decoded body of a non-watch response (for resourceVersion / continue)."""
    head, _, body = exchange["raw"].partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        out, pos = bytearray(), 0
        while True:
            end = body.find(b"\r\n", pos)
            size = int(body[pos:end].split(b";")[0], 16)
            if size == 0:
                break
            out += body[end + 2:end + 2 + size]
            pos = end + 2 + size + 2
        body = bytes(out)
    return json.loads(body)


def save(out_dir, case, exchanges, note):
    d = os.path.join(out_dir, case)
    os.makedirs(d, exist_ok=True)
    meta = {"case": case, "note": note, "server_version": SERVER_VERSION, "exchanges": []}
    for i, ex in enumerate(exchanges):
        name = f"{i:02d}.http"
        with open(os.path.join(d, name), "wb") as f:
            f.write(ex["raw"])
        meta["exchanges"].append({"file": name, "target": ex["target"], "auth": ex["auth"], "reads": ex["reads"]})
    with open(os.path.join(d, "exchanges.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"record_wire: {case}: {len(exchanges)} exchange(s), "
          f"{sum(len(e['raw']) for e in exchanges)} bytes", file=sys.stderr)


POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: fy-replay
  labels: {{app: fy-echo, ferry.io/dataplane: enabled}}
  annotations: {{ferry.io/padding: "{padding}"}}
spec:
  {node}
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: docker.io/ferry/busybox:dev
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    ports: [{{name: http, containerPort: 8080}}]
"""


def pod(name, node="", padding=0):
    return POD.format(name=name, node=f"nodeName: {node}" if node else "", padding="x" * padding)


def setup(c):
    c.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true")
    c.kubectl("create", "namespace", NS)
    c.kubectl("label", "namespace", NS, "ferry.io/dataplane=enabled")
    # Two pods that run (they get IPs) and one bound to a node that does not exist: it stays
    # Pending without an IP (the "pod without an IP" case, straight from the server).
    for name in ("fy-a", "fy-b"):
        c.kubectl("apply", "-f", "-", input=pod(name))
    c.kubectl("apply", "-f", "-", input=pod("fy-noip", node="fy-ghost-node"))
    c.kubectl("apply", "-f", "-", input="""apiVersion: v1
kind: Service
metadata: {name: fy-echo, namespace: fy-replay}
spec:
  selector: {app: fy-echo}
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: raw, port: 9000, targetPort: 9000}
""")
    c.kubectl("-n", NS, "wait", "--for=condition=Ready", "pod/fy-a", "pod/fy-b", "--timeout=120s")


def record(c, out):
    setup(c)

    # 1. A paged LIST of every pod (limit=2: several pages, continue tokens), then a WATCH
    # from its resourceVersion while pods are created, labelled and deleted; the watch ends
    # by its own timeoutSeconds (and 1.20 sends a BOOKMARK shortly before).
    pages, cont = [], ""
    while True:
        target = "/api/v1/pods?limit=2" + (f"&continue={cont}" if cont else "")
        ex = c.get(target)
        pages.append(ex)
        meta = body_json(ex)["metadata"]
        cont = meta.get("continue", "")
        if not cont:
            break
    rv = meta["resourceVersion"]

    def changes():
        time.sleep(1.0)
        # A large object: its event spans several TLS records and reads.
        c.kubectl("apply", "-f", "-", input=pod("fy-big", node="fy-ghost-node", padding=60000))
        c.kubectl("-n", NS, "label", "pod", "fy-a", "ferry.io/dataplane=disabled", "--overwrite")
        # Several events at once (they may share a read).
        c.kubectl("-n", NS, "delete", "pod", "fy-big", "--grace-period=0", "--force", "--wait=false",
                  check=False)
        c.kubectl("-n", NS, "label", "pod", "fy-b", "fy-step=1", "--overwrite")

    mover = threading.Thread(target=changes)
    watch = c.get(f"/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=8",
                  on_open=mover.start)
    mover.join()
    save(out, "pods-list-watch", pages + [watch],
         "paged LIST of all pods (limit=2), then a WATCH from its resourceVersion while fy-big (60 KB annotation) "
         "is created and deleted and fy-a/fy-b are relabelled; the watch ends by timeoutSeconds=8")

    # 2. A paged LIST whose continue token outlives an etcd compaction: 410 Expired.
    first = c.get(f"/api/v1/namespaces/{NS}/pods?limit=1")
    cont = body_json(first)["metadata"]["continue"]
    c.kubectl("-n", NS, "annotate", "pod", "fy-b", f"fy-compact={time.time()}", "--overwrite")
    rev = json.loads(c.kubectl("-n", NS, "get", "pod", "fy-b", "-o", "json"))["metadata"]["resourceVersion"]
    sh("etcdctl", "--endpoints", c.etcd, "compact", rev)
    second = c.get(f"/api/v1/namespaces/{NS}/pods?limit=1&continue={cont}")
    save(out, "pods-list-expired-continue", [first, second],
         f"LIST page 1 (limit=1), etcd compacted at revision {rev}, then the continue token: 410 Expired")

    # 3. A WATCH with nothing to report, ended by timeoutSeconds (the clean close).
    ns_list = c.get("/api/v1/namespaces?limit=500")
    nrv = body_json(ns_list)["metadata"]["resourceVersion"]
    ns_watch = c.get(f"/api/v1/namespaces?watch=1&allowWatchBookmarks=true&resourceVersion={nrv}&timeoutSeconds=3")
    save(out, "namespaces-list-quiet-watch", [ns_list, ns_watch],
         "LIST of namespaces, then a WATCH in which nothing changes, closed by timeoutSeconds=3")

    # 4. A bearer token the server does not know: 401 (the rotated-token case's first answer).
    save(out, "unauthorized", [c.get("/api/v1/pods?limit=500", client_cert=False, bearer="fy-expired-token")],
         "LIST with a bearer token the server does not accept (and no client certificate): 401")

    # 5. Services and EndpointSlices: 1.20 serves discovery.k8s.io/v1beta1 only, so the v1 path
    # is a real 404.
    svc = c.get("/api/v1/services?limit=500")
    srv = body_json(svc)["metadata"]["resourceVersion"]
    svc_watch = c.get(f"/api/v1/services?watch=1&allowWatchBookmarks=true&resourceVersion={srv}&timeoutSeconds=2")
    save(out, "services-list-watch", [svc, svc_watch], "LIST of Services, quiet WATCH closed by timeoutSeconds=2")
    v1 = c.get("/apis/discovery.k8s.io/v1/endpointslices?limit=500")
    beta = c.get("/apis/discovery.k8s.io/v1beta1/endpointslices?limit=500")
    erv = body_json(beta)["metadata"]["resourceVersion"]
    eps_watch = c.get(f"/apis/discovery.k8s.io/v1beta1/endpointslices?watch=1&allowWatchBookmarks=true"
                      f"&resourceVersion={erv}&timeoutSeconds=2")
    save(out, "endpointslices-v1beta1", [v1, beta, eps_watch],
         "LIST on discovery.k8s.io/v1 (404 on 1.20), on v1beta1, then a quiet WATCH closed by timeoutSeconds=2")

    # 6. A WATCH from a resourceVersion older than the watch cache: 200 with ERROR 410. The
    # pods' watch cache (1.20) keeps at least the last 75 s of events and grows while they
    # are younger: wait them out, then 400 writes push resourceVersion 1 out of it.
    print("record_wire: waiting 80 s for the watch cache's fresh window to pass", file=sys.stderr)
    time.sleep(80)
    c.churn(f"/api/v1/namespaces/{NS}/pods/fy-b", 400)  # fy-noip: the pod GC removes it by now
    expired = c.get("/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=30")
    if b'"type":"ERROR"' not in expired["raw"]:
        sys.exit("record_wire: the watch from resourceVersion 1 did not end in ERROR 410; not saved")
    save(out, "pods-watch-expired", [expired],
         "WATCH from resourceVersion=1 once 400 writes pushed it out of the watch cache: 200, then ERROR 410")

    c.kubectl("delete", "namespace", NS, "--wait=false")


CRD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "charts", "ferry", "crds")
AP = "authorizationpolicies"
PA = "peerauthentications"


def policy(kind, name, spec, version="v1"):
    return yaml.safe_dump({"apiVersion": f"security.istio.io/{version}", "kind": kind,
                       "metadata": {"name": name, "namespace": NS}, "spec": spec})


def crd_established(c, resource):
    c.kubectl("wait", "--for=condition=Established", f"crd/{resource}.security.istio.io", "--timeout=60s")


def served(c, version, resource):
    """Discovery lists the resource under security.istio.io/<version> (the CRD's handler is up)."""
    r = subprocess.run(["kubectl", "--kubeconfig", c.kubeconfig, "get", "--raw",
                        f"/apis/security.istio.io/{version}"], capture_output=True, text=True)
    return r.returncode == 0 and any(x["name"] == resource for x in json.loads(r.stdout)["resources"])


def wait_until(what, predicate, seconds=60):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"record_wire: timed out waiting for {what}")
        time.sleep(0.2)


def list_then_watch(c, out, resource, changes, timeout, note):
    """Case <resource>-list-watch: a LIST on v1, then a WATCH from its resourceVersion while
    `changes` runs (a second after the watch opened), ended by its timeoutSeconds."""
    lst = c.get(f"/apis/security.istio.io/v1/{resource}?limit=500")
    rv = body_json(lst)["metadata"]["resourceVersion"]

    def later():
        time.sleep(1.0)
        changes()

    mover = threading.Thread(target=later)
    watch = c.get(f"/apis/security.istio.io/v1/{resource}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
                  f"&timeoutSeconds={timeout}", on_open=mover.start)
    mover.join()
    save(out, f"{resource}-list-watch", [lst, watch], note)


def record_policies(c, out):
    """AuthorizationPolicy and PeerAuthentication (security.istio.io) as ferryd's optional
    informers meet them: absent, served by an old Istio's v1beta1-only CRD that is deleted
    under an open watch, then served by the chart's CRDs (v1 and v1beta1)."""
    for r in (AP, PA):
        if c.kubectl("get", "crd", f"{r}.security.istio.io", "--ignore-not-found", "-o", "name").strip():
            sys.exit(f"record_wire: crd/{r}.security.istio.io exists; the policies cases need a cluster without it")
    c.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true")
    c.kubectl("create", "namespace", NS)

    # 1. No CRD: every version answers 404.
    save(out, "policies-crds-absent",
         [c.get(f"/apis/security.istio.io/{v}/{r}?limit=500") for r in (AP, PA) for v in ("v1", "v1beta1")],
         "LIST of authorizationpolicies and peerauthentications on v1 and v1beta1 before any "
         "security.istio.io CRD is installed: four 404s")

    # 2. An old Istio's definition (before 1.22: v1beta1 only), made from the chart's by
    # dropping v1. One policy in it; v1 is a 404, v1beta1 lists it; then the CRD is deleted
    # under an open watch (what the watch carries, and how it ends, is the server's).
    crd = yaml.safe_load(open(os.path.join(CRD_DIR, f"{AP}.security.istio.io.yaml")))
    crd["spec"]["versions"] = [dict(v, storage=True) for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    c.kubectl("apply", "-f", "-", input=json.dumps(crd))
    crd_established(c, AP)
    wait_until("v1beta1 authorizationpolicies served", lambda: served(c, "v1beta1", AP))
    c.kubectl("apply", "-f", "-", input=policy("AuthorizationPolicy", "fy-legacy", {
        "action": "ALLOW", "rules": [{"from": [{"source": {"namespaces": [NS]}}]}]}, version="v1beta1"))
    v1 = c.get(f"/apis/security.istio.io/v1/{AP}?limit=500")
    beta = c.get(f"/apis/security.istio.io/v1beta1/{AP}?limit=500")
    brv = body_json(beta)["metadata"]["resourceVersion"]

    def delete_crd():
        time.sleep(1.0)
        c.kubectl("delete", "crd", f"{AP}.security.istio.io", "--wait=true")

    mover = threading.Thread(target=delete_crd)
    gone = c.get(f"/apis/security.istio.io/v1beta1/{AP}?watch=1&allowWatchBookmarks=true&resourceVersion={brv}"
                 "&timeoutSeconds=30", on_open=mover.start)
    mover.join()
    wait_until("v1beta1 authorizationpolicies gone", lambda: not served(c, "v1beta1", AP))
    after = c.get(f"/apis/security.istio.io/v1beta1/{AP}?watch=1&allowWatchBookmarks=true&resourceVersion={brv}"
                  "&timeoutSeconds=5")
    save(out, "authorizationpolicies-v1beta1-only",
         [v1, beta, gone, after],
         "an old Istio's CRD serving only v1beta1 (the chart's without v1) with policy fy-legacy: LIST on v1 "
         "(404), LIST on v1beta1, a WATCH from its resourceVersion while the CRD is deleted, then the same "
         "WATCH again once the CRD is gone")

    # 3. The chart's CRDs: v1 (storage) and v1beta1, objects written through either.
    c.kubectl("apply", "-f", CRD_DIR)
    for r in (AP, PA):
        crd_established(c, r)
        wait_until(f"v1 {r} served", lambda r=r: served(c, "v1", r))
    apply = lambda *objs: c.kubectl("apply", "-f", "-", input="\n---\n".join(objs))  # noqa: E731
    apply(policy("AuthorizationPolicy", "fy-allow-client", {
              "selector": {"matchLabels": {"app": "fy-echo"}},
              "action": "ALLOW",
              "rules": [{"from": [{"source": {"principals": [f"cluster.local/ns/{NS}/sa/fy-client"]}}],
                         "to": [{"operation": {"ports": ["8080"]}}]}]}),
          policy("AuthorizationPolicy", "fy-deny-range", {
              "action": "DENY",
              "rules": [{"from": [{"source": {"ipBlocks": ["10.9.0.0/16"]}}],
                         "to": [{"operation": {"notPorts": ["15021"]}}]}]}),
          # Written through v1beta1: listed on v1 as v1.
          policy("AuthorizationPolicy", "fy-beta-written", {"action": "AUDIT", "rules": [{}]}, version="v1beta1"),
          # The API server takes it (the schema keeps any spec); ferryd refuses it by field.
          policy("AuthorizationPolicy", "fy-bad-cidr", {
              "rules": [{"from": [{"source": {"ipBlocks": ["10.0.0.0/33"]}}]}]}))

    def ap_changes():
        apply(policy("AuthorizationPolicy", "fy-added", {
            "action": "ALLOW", "rules": [{"from": [{"source": {"namespaces": [NS]}}]}]}))
        c.kubectl("-n", NS, "patch", "authorizationpolicies.security.istio.io", "fy-allow-client", "--type=json",
                  "-p", '[{"op":"replace","path":"/spec/rules/0/to/0/operation/ports","value":["9090"]}]')
        # A valid policy made invalid: ferryd keeps its previous version.
        c.kubectl("-n", NS, "patch", "authorizationpolicies.security.istio.io", "fy-deny-range", "--type=merge",
                  "-p", '{"spec":{"action":"BLOCK"}}')
        c.kubectl("-n", NS, "delete", "authorizationpolicies.security.istio.io", "fy-bad-cidr")
        c.kubectl("-n", NS, "delete", "authorizationpolicies.security.istio.io", "fy-added")

    list_then_watch(c, out, AP, ap_changes, 8,
                    "the chart's CRDs; LIST on v1 of fy-allow-client, fy-deny-range, fy-beta-written (written "
                    "through v1beta1) and fy-bad-cidr (a /33 the API server accepts), then a WATCH while fy-added "
                    "is created, fy-allow-client's port changed, fy-deny-range given action BLOCK, fy-bad-cidr and "
                    "fy-added deleted; closed by timeoutSeconds=8")

    apply(policy("PeerAuthentication", "fy-strict", {"mtls": {"mode": "STRICT"}}),
          policy("PeerAuthentication", "fy-port-level", {
              "selector": {"matchLabels": {"app": "fy-echo"}},
              "mtls": {"mode": "STRICT"},
              "portLevelMtls": {"8080": {"mode": "PERMISSIVE"}}}))

    def pa_changes():
        c.kubectl("-n", NS, "patch", "peerauthentications.security.istio.io", "fy-strict", "--type=merge",
                  "-p", '{"spec":{"mtls":{"mode":"PERMISSIVE"}}}')
        apply(policy("PeerAuthentication", "fy-bad-mode", {"mtls": {"mode": "SORTA"}}))
        c.kubectl("-n", NS, "delete", "peerauthentications.security.istio.io", "fy-port-level")

    list_then_watch(c, out, PA, pa_changes, 6,
                    "the chart's CRDs; LIST on v1 of fy-strict (namespace-wide STRICT) and fy-port-level "
                    "(selector, port 8080 PERMISSIVE), then a WATCH while fy-strict becomes PERMISSIVE, "
                    "fy-bad-mode (mode SORTA) is created and fy-port-level deleted; closed by timeoutSeconds=6")
    c.kubectl("delete", "namespace", NS, "--wait=false")


SERVER_VERSION = ""

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--etcd", default="http://127.0.0.1:12379")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "replay", "fixtures"))
    ap.add_argument("--cases", choices=["workloads", "policies", "all"], default="all")
    a = ap.parse_args()
    cluster = Cluster(a.kubeconfig, a.etcd)
    SERVER_VERSION = json.loads(cluster.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
    if a.cases in ("workloads", "all"):
        record(cluster, a.out)
    if a.cases in ("policies", "all"):
        record_policies(cluster, a.out)
