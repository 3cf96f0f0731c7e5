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
      --out tests/k8s/replay/fixtures
The cluster's etcd must be reachable with etcdctl (--etcd, for the compaction case).
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
    global SERVER_VERSION
    SERVER_VERSION = json.loads(c.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
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


SERVER_VERSION = ""

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--etcd", default="http://127.0.0.1:12379")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "replay", "fixtures"))
    a = ap.parse_args()
    record(Cluster(a.kubeconfig, a.etcd), a.out)
