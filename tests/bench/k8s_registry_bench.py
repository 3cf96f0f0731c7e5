#!/usr/bin/env python3
"""Registry at cluster scale against a real API server (issue 13; docs/benchmarks/registry.md).

Starts its own etcd and kube-apiserver (Kubernetes 1.20.2: the k8s lab's cached binaries,
scripts/k8s-lab/build-kubernetes.sh) on loopback inside a network namespace of its own
(fy-bench-k8s), fills them with a simulated cluster -- Nodes, enrolled Namespaces, Pods bound
to the nodes with their IPs set through the status subresource, selector-less ClusterIP
Services with one EndpointSlice each whose endpoints are mesh pods; 5,000 / 500 / 150,000 /
10,000 by default -- and measures ferryd (`workload_source: kubernetes`, `node: fy-node-0001`)
against it:

  sync       R rounds without the datapath: exec -> /healthz/ready 200 and ferryd's CPU until
             then, the LIST times ferryd logs, VmRSS once every list is applied and VmHWM;
             per workload against the same ferryd on an empty API server (a second
             kube-apiserver on the same etcd under an empty prefix)
  datapath   ferryd with the datapath (`proxy_netns: auto`, pins in a bpffs of the bench's):
             the same sync figures, then
    services one Service at a time: its EndpointSlice emptied, then restored: API write
             acknowledged -> its VIP gone from / back in the pinned ferry_capture map
             (ferry-bench-tool capture-wait), with ferryd's ferry_k8s_event_apply_seconds
             over the same events
    latency  one pod's IP change at a time, the same two ways (R rounds)
    rate     pod changes (IP moves, label flips, pods created, given an IP and deleted) at a
             steady rate for S s per round, then EndpointSlice changes: ferryd's CPU from the
             first write until it is quiet again, minus idle, per event applied, times 1,000
             (CPU seconds per second at 1,000 events/s, whether or not it kept up)

Writes results.json and the ferryd logs to --out, and prints Markdown tables for
docs/benchmarks/registry.md. Numbers only: nothing is judged. Root only (netns, bpffs).

Everything it makes is named fy-bench-* / fy-*: the netns fy-bench-k8s, the state dir
(default /dev/shm/fy-bench-k8s: etcd on tmpfs, so that populating is not bound by the disk's
fsync), the processes it started (stopped by PID), the bpffs mounted under the state dir. All
of it goes at the end, also on failure; `--cleanup` removes what a killed run left. With
--keep the state dir (etcd's data) stays for the next run, which then skips populating (the
run puts back what it changed; a run that fails after its first write leaves it to be
populated again). --serve keeps the API server up instead of measuring, for profiling.

  tests/bench/k8s_registry_bench.py --ferryd build/default/proxy/main/ferryd \\
      --ferryctl build/default/proxy/ferryctl/ferryctl \\
      --bench-tool build/default/tests/bench/ferry-bench-tool
"""
import argparse
import concurrent.futures
import ctypes
import http.client
import json
import os
import queue
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

from benchlib import Ferryd, cpu_seconds, load_average, make_cert_dir, status_kb

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETNS = "fy-bench-k8s"
# Off the k8s lab's ports (etcd 12379/12380, API 6443) and etcd's defaults; inside the netns
# anyway.
ETCD_CLIENT = "127.0.0.1:22379"
ETCD_PEER = "127.0.0.1:22380"
API_PORT = 16443
EMPTY_API_PORT = 16444
# The address the API server advertises (never dialled: no Endpoints reconciler runs).
ADVERTISE = "10.255.77.1"
SERVICE_CIDR = "10.96.0.0/16"  # 65,534 ClusterIPs: room for the 10,000 Services
LOCAL_NODE = "fy-node-0001"
FERRY_LABEL = "ferry.io/dataplane"
# Pod IPs: node n owns 10.(128 + n/256).(n%256).0/24; its k-th pod (k < 40) is .(2+k), and
# moved to another address it takes .(2+k+BANK*40) for BANK 1..4 (one pod never collides
# with another).
BANK = 40
CLONE_NEWNET = 0x40000000


def log(msg):
    print("k8s-bench: %s" % msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# The simulated cluster's objects. Pods look like a Deployment's pods after a kubelet
# started them (one container, probes, resources, a token volume, four conditions, a
# running container status), so that a Pod is about as many bytes as in a real cluster.

class Shape:
    def __init__(self, nodes, namespaces, pods, services):
        if pods // nodes + (pods % nodes > 0) > BANK:
            raise SystemExit("at most %d pods per node" % BANK)
        if nodes > 256 * 64:
            raise SystemExit("at most %d nodes" % (256 * 64))
        self.nodes, self.namespaces, self.pods, self.services = nodes, namespaces, pods, services

    def key(self):
        return {"nodes": self.nodes, "namespaces": self.namespaces, "pods": self.pods,
                "services": self.services}

    @staticmethod
    def node(n):
        return "fy-node-%04d" % n

    @staticmethod
    def namespace(ns):
        return "fy-ns-%03d" % ns

    def pod_ns(self, i):
        return i % self.namespaces

    def pod_node(self, i):
        return i % self.nodes

    def pod_ip(self, i, bank=0):
        n = self.pod_node(i)
        return "10.%d.%d.%d" % (128 + n // 256, n % 256, 2 + i // self.nodes + bank * BANK)

    @staticmethod
    def node_ip(n):
        return "172.20.%d.%d" % (n // 256, n % 256)

    def service_ns(self, k):
        return k % self.namespaces

    def service_endpoints(self, k):
        """Three pods of the Service's namespace."""
        ns = self.service_ns(k)
        per_ns = max(1, (self.pods - ns + self.namespaces - 1) // self.namespaces)
        first = 3 * (k // self.namespaces)
        return [ns + self.namespaces * ((first + j) % per_ns) for j in range(3)]


def now_rfc3339():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def namespace_body(shape, ns):
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": shape.namespace(ns), "labels": {FERRY_LABEL: "enabled", "fy-bench": "1"}}}


def node_body(shape, n):
    name = shape.node(n)
    cidr = "10.%d.%d.0/24" % (128 + n // 256, n % 256)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "kubernetes.io/arch": "amd64", "fy-bench": "1"}},
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]}}


def pod_name(i):
    return "fy-pod-%06d" % i


def pod_body(shape, i, name=None):
    app = "fy-app-%02d" % (i // shape.namespaces % 20)
    name = name or pod_name(i)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": shape.namespace(shape.pod_ns(i)),
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b6d", "fy-bench": "1"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T09:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": app + "-5d8f7c9b6d",
                                 "uid": "0b3c1f7e-2a44-4d1e-9a5f-%012d" % (i % 20), "controller": True,
                                 "blockOwnerDeletion": True}]},
        "spec": {
            "nodeName": shape.node(shape.pod_node(i)),
            "serviceAccountName": "fy-sa",
            "containers": [{
                "name": "app", "image": "registry.example/fy/app:1.4.2", "imagePullPolicy": "IfNotPresent",
                "args": ["--listen=:8080", "--log-level=info"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                "env": [{"name": "FY_MODE", "value": "bench"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "volumeMounts": [{"name": "fy-sa-token-x7k2p", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
            "volumes": [{"name": "fy-sa-token-x7k2p", "secret": {"secretName": "fy-sa-token-x7k2p",
                                                                "defaultMode": 420}}]}}


def pod_status_patch(shape, i, ip):
    t = now_rfc3339()
    cond = [{"type": c, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
            for c in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
    return {"status": {
        "phase": "Running", "conditions": cond, "hostIP": shape.node_ip(shape.pod_node(i)),
        "podIP": ip, "podIPs": [{"ip": ip}], "startTime": t, "qosClass": "Burstable",
        "containerStatuses": [{
            "name": "app", "state": {"running": {"startedAt": t}}, "lastState": {}, "ready": True,
            "restartCount": 0, "image": "registry.example/fy/app:1.4.2",
            "imageID": "registry.example/fy/app@sha256:" + "%064x" % (i * 7919 + 1),
            "containerID": "containerd://" + "%064x" % (i * 104729 + 3), "started": True}]}}


def ip_patch(ip):
    return {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}


def service_name(k):
    return "fy-svc-%05d" % k


def service_body(shape, k):
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(k), "namespace": shape.namespace(shape.service_ns(k)),
                         "labels": {"fy-bench": "1"}},
            "spec": {"type": "ClusterIP",
                     "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}}


def slice_endpoints(shape, k):
    return [{"addresses": [shape.pod_ip(i)], "conditions": {"ready": True},
             "topology": {"kubernetes.io/hostname": shape.node(shape.pod_node(i))},
             "targetRef": {"kind": "Pod", "namespace": shape.namespace(shape.pod_ns(i)), "name": pod_name(i)}}
            for i in shape.service_endpoints(k)]


def slice_body(shape, k):
    # Kubernetes 1.20 serves discovery.k8s.io/v1beta1 only.
    return {"apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
            "metadata": {"name": service_name(k) + "-fy", "namespace": shape.namespace(shape.service_ns(k)),
                         "labels": {"kubernetes.io/service-name": service_name(k),
                                    "endpointslice.kubernetes.io/managed-by": "fy-bench"}},
            "addressType": "IPv4", "endpoints": slice_endpoints(shape, k),
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}


def pod_path(shape, i, name=None):
    return "/api/v1/namespaces/%s/pods/%s" % (shape.namespace(shape.pod_ns(i)), name or pod_name(i))


def slice_path(shape, k):
    return "/apis/discovery.k8s.io/v1beta1/namespaces/%s/endpointslices/%s-fy" % (
        shape.namespace(shape.service_ns(k)), service_name(k))


# ---------------------------------------------------------------------------------------
# The API: one keep-alive TLS connection per thread, client certificate of system:masters
# (API Priority and Fairness exempts it: populating is not throttled).

class ApiError(Exception):
    pass


class Api:
    def __init__(self, port, pki):
        self.port = port
        self.ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)
            self.local.conn = c
        return c

    def call(self, method, path, body=None, ctype="application/json", ok=(200, 201), attempts=5):
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        headers = {"Content-Type": ctype, "Accept": "application/json"} if data else {"Accept": "application/json"}
        for attempt in range(attempts):
            try:
                c = self._conn()
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                payload = r.read()
            except (OSError, http.client.HTTPException):
                self.local.conn = None
                if attempt + 1 == attempts:
                    raise
                time.sleep(0.2 * (attempt + 1))
                continue
            if r.status in ok:
                return json.loads(payload) if payload else None
            if r.status in (429, 500, 503, 504) and attempt + 1 < attempts:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise ApiError("%s %s: HTTP %d %s" % (method, path, r.status, payload[:300].decode(errors="replace")))

    def ready(self):
        c = self._conn()
        try:
            c.request("GET", "/readyz")
            r = c.getresponse()
            r.read()
            return r.status == 200
        except (OSError, http.client.HTTPException):
            self.local.conn = None
            return False

    def merge_patch(self, path, body):
        return self.call("PATCH", path, body, ctype="application/merge-patch+json")


def run_parallel(fn, items, threads, what):
    """fn(item) for every item on `threads` threads; progress every 10 %."""
    items = list(items)
    t0 = time.monotonic()
    step = max(1, len(items) // 10)
    done = 0
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(fn, items, chunksize=64):
            done += 1
            if done % step == 0:
                log("  %s: %d/%d (%.0f/s)" % (what, done, len(items), done / (time.monotonic() - t0)))
    return time.monotonic() - t0


# ---------------------------------------------------------------------------------------
# Processes, netns, bpffs: recorded in STATE/pids so that --cleanup finds a killed run's.

class Resources:
    def __init__(self, state):
        self.state = state
        self.procs = {}  # name -> Popen
        self.netns = False
        self.bpffs = None

    def start(self, name, argv, logdir):
        os.makedirs(os.path.join(self.state, "pids"), exist_ok=True)
        out = open(os.path.join(logdir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        out.close()
        with open(os.path.join(self.state, "pids", name), "w") as f:
            f.write("%d %s\n" % (p.pid, os.path.realpath(argv[0])))
        self.procs[name] = p
        return p

    def stop(self, name):
        p = self.procs.pop(name, None)
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                log("%s (%d) ignored SIGTERM for 20 s: SIGKILL" % (name, p.pid))
                p.kill()
                p.wait()
        try:
            os.unlink(os.path.join(self.state, "pids", name))
        except FileNotFoundError:
            pass

    def stop_all(self):
        for name in reversed(list(self.procs)):
            self.stop(name)


def cleanup_leftovers(state):
    """What a killed run left: its processes (by recorded PID, only while still running the
    binary recorded), the bpffs mount, the netns, the state dir."""
    piddir = os.path.join(state, "pids")
    if os.path.isdir(piddir):
        for name in os.listdir(piddir):
            with open(os.path.join(piddir, name)) as f:
                pid, exe = f.read().split()
            try:
                if os.path.realpath("/proc/%s/exe" % pid) == exe:
                    log("stopping %s (pid %s)" % (name, pid))
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
    bpffs = os.path.join(state, "bpffs")
    if os.path.ismount(bpffs):
        subprocess.run(["umount", bpffs], check=False)
    if os.path.exists("/run/netns/" + NETNS):
        subprocess.run(["ip", "netns", "del", NETNS], check=False)
    if os.path.isdir(state):
        shutil.rmtree(state, ignore_errors=True)


def enter_netns():
    """Moves this process (its only thread, before any other starts) into the bench's netns:
    every thread and child from here on lives there."""
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    subprocess.run(["ip", "-n", NETNS, "link", "set", "lo", "up"], check=True)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/run/netns/" + NETNS, os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns(%s): %s" % (NETNS, os.strerror(err)))
    os.close(fd)


# ---------------------------------------------------------------------------------------
# etcd and kube-apiserver

def make_pki(pki):
    lib = os.path.join(REPO, "scripts", "k8s-lab", "pki.sh")
    subprocess.run(["bash", "-c", """set -euo pipefail; . "$1"; d=$2
        pki_ca "$d" fy-bench-ca
        pki_cert "$d" apiserver /CN=kube-apiserver "IP:127.0.0.1,DNS:localhost"
        pki_cert "$d" admin /O=system:masters/CN=fy-bench-admin
        pki_cert "$d" ferryd /O=system:masters/CN=fy-bench-ferryd
        pki_service_account_keys "$d"
        pki_kubeconfig "$d/ferryd.kubeconfig" fy-bench https://127.0.0.1:%d "$d" ferryd
        pki_kubeconfig "$d/ferryd-empty.kubeconfig" fy-bench https://127.0.0.1:%d "$d" ferryd
        """ % (API_PORT, EMPTY_API_PORT), "_", lib, pki], check=True)


def wait_until(what, check, timeout, proc=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise SystemExit("%s exited (status %s)" % (what, proc.returncode))
        try:
            if check():
                return
        except (OSError, ApiError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    raise SystemExit("%s not ready after %d s" % (what, timeout))


def start_apiserver(res, bindir, pki, logdir, name, port, prefix):
    p = res.start(name, [
        os.path.join(bindir, "kube-apiserver"),
        "--etcd-servers", "http://" + ETCD_CLIENT, "--etcd-prefix", prefix,
        "--bind-address", "127.0.0.1", "--advertise-address", ADVERTISE, "--secure-port", str(port),
        "--insecure-port", "0", "--endpoint-reconciler-type", "none",
        "--tls-cert-file", pki + "/apiserver.crt", "--tls-private-key-file", pki + "/apiserver.key",
        "--client-ca-file", pki + "/ca.crt",
        "--service-account-key-file", pki + "/sa.pub", "--service-account-signing-key-file", pki + "/sa.key",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--api-audiences", "https://kubernetes.default.svc.cluster.local",
        "--authorization-mode", "Node,RBAC", "--service-cluster-ip-range", SERVICE_CIDR,
        # No controller-manager creates service accounts: pods name one that need not exist.
        "--disable-admission-plugins", "ServiceAccount", "--profiling=false"], logdir)
    api = Api(port, pki)
    wait_until(name, api.ready, 120, p)
    return api


def populate(api, shape, threads):
    t = {}
    t["namespaces"] = run_parallel(lambda ns: api.call("POST", "/api/v1/namespaces", namespace_body(shape, ns)),
                                   range(shape.namespaces), threads, "namespaces")
    t["nodes"] = run_parallel(lambda n: api.call("POST", "/api/v1/nodes", node_body(shape, n)),
                              range(shape.nodes), threads, "nodes")

    def pod(i):
        ns = shape.namespace(shape.pod_ns(i))
        api.call("POST", "/api/v1/namespaces/%s/pods" % ns, pod_body(shape, i))
        api.merge_patch(pod_path(shape, i) + "/status", pod_status_patch(shape, i, shape.pod_ip(i)))

    t["pods"] = run_parallel(pod, range(shape.pods), threads, "pods (create + status)")

    def service(k):
        ns = shape.namespace(shape.service_ns(k))
        api.call("POST", "/api/v1/namespaces/%s/services" % ns, service_body(shape, k))
        api.call("POST", "/apis/discovery.k8s.io/v1beta1/namespaces/%s/endpointslices" % ns, slice_body(shape, k))

    t["services"] = run_parallel(service, range(shape.services), threads, "services + endpointslices")
    return {k: round(v, 1) for k, v in t.items()}


# ---------------------------------------------------------------------------------------
# Measuring ferryd

def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * len(s) + 0.5)) - 1))]


HIST_RE = re.compile(r'^ferry_k8s_event_apply_seconds_bucket\{resource="([a-z]+)",le="([^"]+)"\} (\d+)$', re.M)
COUNTER_RE = re.compile(r'^(ferry_k8s_events_total)\{resource="([a-z]+)"\} (\d+)$', re.M)


def histogram(metrics, resource):
    return [(float("inf") if le == "+Inf" else float(le), int(n))
            for r, le, n in HIST_RE.findall(metrics) if r == resource]


def events_total(metrics, resource):
    for _, r, n in COUNTER_RE.findall(metrics):
        if r == resource:
            return int(n)
    return 0


def histogram_quantile(before, after, q):
    """Prometheus' histogram_quantile over the difference of two scrapes: linear within the
    bucket that holds the rank."""
    cum = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = cum[-1][1] if cum else 0
    if total == 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0
    for le, n in cum:
        if n >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(1, n - below)
        lower, below = le, n
    return lower


class CaptureWaiter:
    """ferry-bench-tool capture-wait on the pinned ferry_capture map."""

    def __init__(self, tool, pin):
        self.proc = subprocess.Popen([tool, "capture-wait", "--map", pin, "--interval-us", "50", "--seconds", "30"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def expect(self, what, ip):
        self.proc.stdin.write("%s %s\n" % (what, ip))
        self.proc.stdin.flush()

    def result(self):
        line = self.proc.stdout.readline().strip()
        if not line or line == "timeout":
            raise SystemExit("capture-wait: %s" % (line or "exited"))
        return int(line.split()[0])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def list_lines(ferry, started_wall):
    """{resource: {objects, list_ms, applied_ms, at_s}} from ferryd's 'listed' log lines."""
    out = {}
    for m in re.finditer(r"^(\S+)Z \S+\s+k8s (\w+): listed (\d+) objects in (\d+) pages \((\d+) KiB\) in (\d+) ms; "
                         r"applied in (\d+) ms", ferry.log(), re.M):
        stamp = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
        out.setdefault(m.group(2), {"objects": int(m.group(3)), "pages": int(m.group(4)), "kib": int(m.group(5)),
                                    "list_ms": int(m.group(6)), "applied_ms": int(m.group(7)),
                                    "at_s": round(stamp - started_wall, 2)})
    return out


def sync_once(ferry, stop=False, want_lists=("pods", "namespaces", "services", "endpointslices")):
    """Starts `ferry` and measures its initial sync; stops it afterwards when `stop`."""
    try:
        return measure_sync(ferry, want_lists)
    finally:
        if stop:
            ferry.stop()


def measure_sync(ferry, want_lists):
    started_wall = time.time()
    ferry.start()
    ready = ferry.wait_ready()
    pid = ferry.pid
    r = {"ready_s": round(ready, 2), "ready_cpu_s": round(cpu_seconds(pid), 2),
         "ready_rss_mb": round(status_kb(pid, "VmRSS") / 1024, 1)}
    t0 = time.monotonic()
    while time.monotonic() - t0 < 300 and not all(w in list_lines(ferry, started_wall) for w in want_lists):
        time.sleep(0.05)
    r["synced_s"] = round(time.monotonic() - ferry.started, 2)
    r["synced_cpu_s"] = round(cpu_seconds(pid), 2)
    r["lists"] = list_lines(ferry, started_wall)
    time.sleep(2)  # the last list applied: let the heap settle (malloc_trim runs on a timer)
    r["rss_mb"] = round(status_kb(pid, "VmRSS") / 1024, 1)
    r["hwm_mb"] = round(status_kb(pid, "VmHWM") / 1024, 1)
    r["load"] = load_average()[0]
    return r


def timed_changes(api, waiter, ferry, changes, resource):
    """Each change alone: (expect, ip, path, patch). Returns per-change latencies (ms) from the
    API's acknowledgement and from the request's start to the map, and ferryd's own."""
    m0 = ferry.metrics()
    ack, sent = [], []
    for expect, ip, path, patch in changes:
        waiter.expect(expect, ip)
        t_send = time.monotonic_ns()
        api.merge_patch(path, patch)
        t_ack = time.monotonic_ns()
        t_map = waiter.result()
        ack.append((t_map - t_ack) / 1e6)
        sent.append((t_map - t_send) / 1e6)
    m1 = ferry.metrics()
    h0, h1 = histogram(m0, resource), histogram(m1, resource)
    return {"n": len(changes),
            "ack_p50_ms": round(percentile(ack, 0.5), 3), "ack_p99_ms": round(percentile(ack, 0.99), 3),
            "ack_max_ms": round(max(ack), 3),
            "send_p50_ms": round(percentile(sent, 0.5), 3), "send_p99_ms": round(percentile(sent, 0.99), 3),
            "ferryd_events": events_total(m1, resource) - events_total(m0, resource),
            "ferryd_p50_ms": round(histogram_quantile(h0, h1, 0.5) * 1e3, 3),
            "ferryd_p99_ms": round(histogram_quantile(h0, h1, 0.99) * 1e3, 3),
            "load": load_average()[0]}


def service_vips(api, shape, ks):
    out = {}
    for k in ks:
        svc = api.call("GET", "/api/v1/namespaces/%s/services/%s" % (shape.namespace(shape.service_ns(k)), service_name(k)))
        out[k] = svc["spec"]["clusterIP"]
    return out


class PodChurn:
    """Pod changes, each one API write and one watch event for ferryd, each a change of what
    ferry holds: an IP moved (capture entry out, another in), the ferry.io/dataplane label
    flipped (a workload out or back in), a pod created (no IP: a pod, not yet a workload),
    given its IP (a workload in) and deleted (out)."""

    resource = "pods"

    def __init__(self, api, shape):
        self.api, self.shape = api, shape
        self.pool = []            # pods the IP moves and label flips cycle through
        self.bank = {}            # pod -> address bank of its IP now (absent: 0)
        self.disabled = set()     # pods labelled ferry.io/dataplane=disabled now
        self.churn = 0
        self.next = 0

    def tasks(self):
        """Endless (writes, fn): one cycle is 2 IP moves, 2 label flips, 1 pod's life (3)."""
        while True:
            for kind in ("ip", "label", "churn", "ip", "label"):
                i = self.pool[self.next % len(self.pool)]
                self.next += 1
                if kind == "ip":
                    yield 1, self._move(i)
                elif kind == "label":
                    yield 1, self._flip(i)
                else:
                    self.churn += 1
                    yield 3, self._life(self.churn)

    def _move(self, i):
        bank = 1 if self.bank.get(i, 0) == 0 else 0
        self.bank[i] = bank
        return lambda: self.api.merge_patch(pod_path(self.shape, i) + "/status", ip_patch(self.shape.pod_ip(i, bank)))

    def _flip(self, i):
        on = i in self.disabled
        (self.disabled.discard if on else self.disabled.add)(i)
        body = {"metadata": {"labels": {FERRY_LABEL: None if on else "disabled"}}}
        return lambda: self.api.merge_patch(pod_path(self.shape, i), body)

    def _life(self, c):
        # A pod of its own beside pod `twin` (same node and namespace), in address bank 2 or 3.
        twin = c % (self.shape.nodes * 2)
        bank = 2 + twin // self.shape.nodes
        twin %= self.shape.nodes
        name = "fy-churn-%06d" % c

        def run():
            ns = self.shape.namespace(self.shape.pod_ns(twin))
            self.api.call("POST", "/api/v1/namespaces/%s/pods" % ns, pod_body(self.shape, twin, name))
            self.api.merge_patch(pod_path(self.shape, twin, name) + "/status",
                                 pod_status_patch(self.shape, twin, self.shape.pod_ip(twin, bank)))
            self.api.call("DELETE", pod_path(self.shape, twin, name) + "?gracePeriodSeconds=0")
        return run

    def restore(self, threads):
        """Back to the populated state (--keep): IPs home, labels off."""
        moved = [i for i, b in self.bank.items() if b != 0]
        run_parallel(lambda i: self.api.merge_patch(pod_path(self.shape, i) + "/status", ip_patch(self.shape.pod_ip(i))),
                     moved, threads, "restoring IPs")
        run_parallel(lambda i: self.api.merge_patch(pod_path(self.shape, i), {"metadata": {"labels": {FERRY_LABEL: None}}}),
                     sorted(self.disabled), threads, "restoring labels")
        self.bank.clear()
        self.disabled.clear()


class SliceChurn:
    """EndpointSlice changes: a Service's slice emptied (its VIP leaves ferry_capture), then
    given its endpoints back (the VIP returns), over a pool of Services."""

    resource = "endpointslices"

    def __init__(self, api, shape, pool):
        self.api, self.shape, self.pool = api, shape, pool
        self.empty = set()
        self.next = 0

    def tasks(self):
        while True:
            k = self.pool[self.next % len(self.pool)]
            self.next += 1
            was_empty = k in self.empty
            (self.empty.discard if was_empty else self.empty.add)(k)
            body = {"endpoints": slice_endpoints(self.shape, k) if was_empty else []}
            yield 1, (lambda k=k, body=body: self.api.merge_patch(slice_path(self.shape, k), body))

    def restore(self, threads):
        run_parallel(lambda k: self.api.merge_patch(slice_path(self.shape, k), {"endpoints": slice_endpoints(self.shape, k)}),
                     sorted(self.empty), threads, "restoring slices")
        self.empty.clear()


def drive(tasks, rate, seconds, threads, on_window):
    """API writes from `tasks` at `rate` per second for `seconds`, on `threads` connections;
    on_window("start"|"end", writes done) marks the middle (without the first and last
    second). Returns (writes, errors)."""
    q = queue.Queue(maxsize=max(64, rate))
    done = [0, 0]
    lock = threading.Lock()

    def worker():
        while True:
            item = q.get()
            if item is None:
                return
            n, fn = item
            try:
                fn()
            except (ApiError, OSError, http.client.HTTPException) as e:
                with lock:
                    done[1] += 1
                    if done[1] <= 5:
                        log("  write failed: %s" % e)
            with lock:
                done[0] += n

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    t0 = time.monotonic()
    sent = 0
    marks = [(1.0, "start"), (seconds - 1.0, "end")]
    while True:
        elapsed = time.monotonic() - t0
        while marks and elapsed >= marks[0][0]:
            on_window(marks.pop(0)[1], done[0])
        if elapsed >= seconds:
            break
        due = sent / rate
        if due > elapsed:
            time.sleep(min(due - elapsed, 0.01))
            continue
        n, fn = next(tasks)
        q.put((n, fn))  # blocks when the writers fall behind: the rate achieved is measured
        sent += n
    for _ in workers:
        q.put(None)
    for w in workers:
        w.join()
    return done[0], done[1]


def wait_quiet(pid, timeout=300):
    """Seconds until ferryd's CPU falls under 5 % over half a second: it has applied every
    event the API server queued for it."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        c = cpu_seconds(pid)
        time.sleep(0.5)
        if cpu_seconds(pid) - c < 0.025:
            return time.monotonic() - t0
    raise SystemExit("ferryd still busy %d s after the writes stopped" % timeout)


def rate_round(ferry, churn, rate, seconds, threads, idle_s):
    """CPU per 1,000 events/s = ferryd's CPU for the round's events (from the first write to
    the moment it is quiet again, minus its idle rate over that span) per event, times 1,000
    events/s. It holds whether or not ferryd keeps up with the writes; `events_per_s` (in the
    middle of the drive) and `drain_s` (after it) say whether it did."""
    pid = ferry.pid
    wait_quiet(pid)
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(idle_s)
    idle = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
    marks = {}

    def on_window(which, writes):
        marks[which] = (time.monotonic(), cpu_seconds(pid), events_total(ferry.metrics(), churn.resource), writes)

    e_begin, c_begin, t_begin = events_total(ferry.metrics(), churn.resource), cpu_seconds(pid), time.monotonic()
    writes, errors = drive(churn.tasks(), rate, seconds, threads, on_window)
    t_written = time.monotonic()
    drain = wait_quiet(pid)
    e_end, c_end, t_end = events_total(ferry.metrics(), churn.resource), cpu_seconds(pid), time.monotonic()
    (ta, ca, ea, wa), (tb, cb, eb, wb) = marks["start"], marks["end"]
    events = e_end - e_begin
    work = c_end - c_begin - idle * (t_end - t_begin)
    return {"target_writes_per_s": rate, "writes": writes, "errors": errors,
            "writes_per_s": round((wb - wa) / (tb - ta)), "events_per_s": round((eb - ea) / (tb - ta)),
            "cpu_per_s": round((cb - ca) / (tb - ta), 3), "idle_cpu_per_s": round(idle, 4),
            "events": events, "drain_s": round(drain, 1), "written_s": round(t_written - t_begin, 1),
            "cpu_ms_per_event": round(work / events * 1e3, 3) if events else None,
            "cpu_per_1000_events_per_s": round(work / events * 1e3, 3) if events else None,
            "load": load_average()[0]}


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferryd", required=True)
    ap.add_argument("--ferryctl", required=True)
    ap.add_argument("--bench-tool", required=True, help="ferry-bench-tool (capture-wait)")
    ap.add_argument("--k8s-bin", help="dir of kube-apiserver (default: build-kubernetes.sh's cache)")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--namespaces", type=int, default=500)
    ap.add_argument("--pods", type=int, default=150000)
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=24, help="API writers")
    ap.add_argument("--rounds", type=int, default=3, help="of each measurement")
    ap.add_argument("--latency-events", type=int, default=2000, help="pod changes timed one at a time, over all rounds")
    ap.add_argument("--service-events", type=int, default=200)
    ap.add_argument("--rate", type=int, default=1000, help="pod writes per second in the rate phase")
    ap.add_argument("--service-rate", type=int, default=200, help="EndpointSlice writes per second")
    ap.add_argument("--rate-seconds", type=float, default=30)
    ap.add_argument("--idle-seconds", type=float, default=10)
    ap.add_argument("--skip", action="append", default=[], choices=["sync", "datapath"])
    ap.add_argument("--state", default="/dev/shm/fy-bench-k8s")
    ap.add_argument("--keep", action="store_true", help="keep the state dir (etcd) for the next run")
    ap.add_argument("--cleanup", action="store_true", help="remove what a killed run left, and exit")
    ap.add_argument("--serve", action="store_true",
                    help="populate (or reuse --keep's state), then keep etcd and the API server up until "
                         "SIGINT/SIGTERM instead of measuring: for profiling by hand (ip netns exec %s ...)" % NETNS)
    ap.add_argument("--out", default="build/default/k8s-registry-bench")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (netns, bpffs)")
    state = os.path.abspath(args.state)
    if not os.path.basename(state).startswith("fy-"):
        raise SystemExit("--state must be a fy-* directory (it is removed at the end)")
    if args.cleanup:
        cleanup_leftovers(state)
        return 0
    if os.path.exists("/run/netns/" + NETNS) or os.path.isdir(os.path.join(state, "pids")):
        raise SystemExit("a previous run left %s or %s/pids: run with --cleanup first" % (NETNS, state))
    bindir = args.k8s_bin or subprocess.run([os.path.join(REPO, "scripts", "k8s-lab", "build-kubernetes.sh")],
                                            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    if not os.access(os.path.join(bindir, "kube-apiserver"), os.X_OK):
        raise SystemExit("no kube-apiserver in %s" % bindir)
    shape = Shape(args.nodes, args.namespaces, args.pods, args.services)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    marker = os.path.join(state, "populated.json")
    reuse = False
    if os.path.exists(marker):
        with open(marker) as f:
            reuse = json.load(f).get("shape") == shape.key()
    if not reuse and os.path.isdir(state):
        shutil.rmtree(state)  # another shape, or a kept state left dirty by a failed run
    pki, logdir, work = (os.path.join(state, d) for d in ("pki", "logs", "work"))
    for d in (logdir, work):
        shutil.rmtree(d, ignore_errors=True)  # a kept state keeps etcd's data and the PKI only
        os.makedirs(d)
    res = Resources(state)
    results = {"shape": shape.key(), "started": now_rfc3339(), "load_at_start": load_average(),
               "ferryd": args.ferryd, "commit": subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                                                               capture_output=True, text=True).stdout.strip()}
    ferry = None
    churns = []  # what changed the populated state, to restore it (--keep)

    def on_signal(signum, _):
        raise KeyboardInterrupt("signal %d" % signum)
    # SIGHUP too: a session or terminal that ends sends it, and its default would skip the
    # cleanup below (processes, netns).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        enter_netns()
        res.netns = True
        if not reuse:
            make_pki(pki)
        make_cert_dir(args.ferryctl, work)
        etcd = res.start("etcd", [
            shutil.which("etcd"), "--name", "fy-bench-etcd", "--data-dir", os.path.join(state, "etcd"),
            "--listen-client-urls", "http://" + ETCD_CLIENT, "--advertise-client-urls", "http://" + ETCD_CLIENT,
            "--listen-peer-urls", "http://" + ETCD_PEER, "--initial-advertise-peer-urls", "http://" + ETCD_PEER,
            "--initial-cluster", "fy-bench-etcd=http://" + ETCD_PEER, "--initial-cluster-state", "new",
            # 150,000 pods, each written twice, and their history until the API server compacts.
            "--quota-backend-bytes", str(8 << 30)], logdir)
        wait_until("etcd", lambda: subprocess.run(["etcdctl", "--endpoints", "http://" + ETCD_CLIENT, "endpoint", "health"],
                                                  capture_output=True, env=dict(os.environ, ETCDCTL_API="3")).returncode == 0,
                   60, etcd)
        api = start_apiserver(res, bindir, pki, logdir, "kube-apiserver", API_PORT, "/registry")

        # Baseline: the same ferryd against an API server with nothing in it.
        start_apiserver(res, bindir, pki, logdir, "kube-apiserver-empty", EMPTY_API_PORT, "/fy-bench-empty")
        results["baseline"] = sync_once(Ferryd(args.ferryd, work, LOCAL_NODE, "workload_source: kubernetes\n"
                                               "kubernetes:\n  kubeconfig: %s\n"
                                               % os.path.join(pki, "ferryd-empty.kubeconfig"), name="ferryd-empty"),
                                        stop=True)
        log("baseline: %s" % json.dumps(results["baseline"]))
        res.stop("kube-apiserver-empty")

        if reuse:
            log("reusing the populated state in %s" % state)
            with open(marker) as f:
                results["populate_s"] = json.load(f).get("populate_s")
        else:
            log("populating: %s" % shape.key())
            results["populate_s"] = populate(api, shape, args.threads)
            log("populated in %s s" % results["populate_s"])
            with open(marker, "w") as f:
                json.dump({"shape": shape.key(), "populate_s": results["populate_s"]}, f)

        if args.serve:
            log("serving: ip netns exec %s <cmd>; kubeconfig %s; SIGINT or SIGTERM to stop"
                % (NETNS, os.path.join(pki, "ferryd.kubeconfig")))
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                args.skip = ["sync", "datapath"]  # the state is as populated: --keep keeps it
        k8s_source = "workload_source: kubernetes\nkubernetes:\n  kubeconfig: %s\n" % os.path.join(pki, "ferryd.kubeconfig")
        if "sync" not in args.skip:
            results["sync"] = []
            for r in range(args.rounds):
                results["sync"].append(sync_once(Ferryd(args.ferryd, work, LOCAL_NODE, k8s_source, name="ferryd-sync"),
                                                 stop=True))
                log("sync round %d: %s" % (r + 1, json.dumps(results["sync"][-1])))
        if "datapath" not in args.skip:
            bpffs = os.path.join(state, "bpffs")
            os.makedirs(bpffs, exist_ok=True)
            subprocess.run(["mount", "-t", "bpf", "fy-bench-bpffs", bpffs], check=True)
            res.bpffs = bpffs
            dp = ("datapath:\n  enabled: true\n  proxy_netns: auto\n  host_proxy_interface: fy-bench-px\n"
                  "  bpffs: %s\n" % bpffs)
            ferry = Ferryd(args.ferryd, work, LOCAL_NODE, k8s_source, extra=dp, name="ferryd-datapath")
            results["datapath_sync"] = sync_once(ferry)
            log("datapath sync: %s" % json.dumps(results["datapath_sync"]))
            waiter = CaptureWaiter(args.bench_tool, os.path.join(bpffs, "ferry_capture"))
            if os.path.exists(marker):
                os.unlink(marker)  # the writes begin: a kept state is dirty until restored
            rng = random.Random(13)

            # Services: the slice emptied (VIP out), then restored (VIP in).
            ks = rng.sample(range(shape.services), min(shape.services, args.service_events // 2))
            vips = service_vips(api, shape, ks)
            changes = []
            for k in ks:
                changes.append(("absent", vips[k], slice_path(shape, k), {"endpoints": []}))
                changes.append(("present", vips[k], slice_path(shape, k), {"endpoints": slice_endpoints(shape, k)}))
            results["service_latency"] = timed_changes(api, waiter, ferry, changes, "endpointslices")
            log("service events: %s" % json.dumps(results["service_latency"]))

            # Pods: one IP moved at a time, never a pod of this node (no device here to enrol).
            remote = [i for i in range(shape.pods) if shape.node(shape.pod_node(i)) != LOCAL_NODE]
            picked = rng.sample(remote, min(len(remote), args.latency_events))
            pods = PodChurn(api, shape)
            results["pod_latency"] = []
            per_round = max(1, len(picked) // args.rounds)
            for r in range(args.rounds):
                changes = []
                for i in picked[r * per_round:(r + 1) * per_round]:
                    pods.bank[i] = 1
                    changes.append(("present", shape.pod_ip(i, 1), pod_path(shape, i) + "/status",
                                    ip_patch(shape.pod_ip(i, 1))))
                results["pod_latency"].append(timed_changes(api, waiter, ferry, changes, "pods"))
                log("pod events round %d: %s" % (r + 1, json.dumps(results["pod_latency"][-1])))
            waiter.close()

            # Steady rates: pods, then EndpointSlices.
            pods.pool = [i for i in remote if i not in pods.bank][: max(1000, args.rate * 4)]
            churns.append(pods)
            results["rate"] = []
            for r in range(args.rounds):
                results["rate"].append(rate_round(ferry, pods, args.rate, args.rate_seconds, args.threads,
                                                  args.idle_seconds))
                log("pod rate round %d: %s" % (r + 1, json.dumps(results["rate"][-1])))
            slices = SliceChurn(api, shape, rng.sample(range(shape.services), min(shape.services, 2000)))
            churns.append(slices)
            results["service_rate"] = [rate_round(ferry, slices, args.service_rate, args.rate_seconds, args.threads,
                                                  args.idle_seconds)]
            log("service rate: %s" % json.dumps(results["service_rate"][-1]))
            results["datapath_rss_after_mb"] = round(status_kb(ferry.pid, "VmRSS") / 1024, 1)
            results["datapath_hwm_after_mb"] = round(status_kb(ferry.pid, "VmHWM") / 1024, 1)
        results["load_at_end"] = load_average()
        if args.keep:
            for churn in churns:
                churn.restore(args.threads)
            with open(marker, "w") as f:
                json.dump({"shape": shape.key(), "populate_s": results["populate_s"]}, f)
    finally:
        if ferry is not None:
            ferry.stop()
        res.stop_all()
        for name in os.listdir(work) if os.path.isdir(work) else []:
            if name.endswith(".log"):
                shutil.copy(os.path.join(work, name), out)
        for name in os.listdir(logdir) if os.path.isdir(logdir) else []:
            shutil.copy(os.path.join(logdir, name), out)
        if res.bpffs:
            subprocess.run(["umount", res.bpffs], check=False)
        if res.netns:
            subprocess.run(["ip", "netns", "del", NETNS], check=False)
        # Kept only when asked and as populated (the marker says so); a run that failed before
        # its writes leaves a kept state reusable.
        if args.keep and os.path.exists(marker):
            shutil.rmtree(os.path.join(state, "pids"), ignore_errors=True)
        else:
            shutil.rmtree(state, ignore_errors=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    report(results)
    return 0


def report(r):
    """Markdown for docs/benchmarks/registry.md."""
    pods = r["shape"]["pods"]
    print("\nshape %s; populating took %s s; load average at start %s, at end %s\n"
          % (r["shape"], r.get("populate_s"), r.get("load_at_start"), r.get("load_at_end")))
    base = r.get("baseline") or {}
    rows = [("no datapath, round %d" % (n + 1), s) for n, s in enumerate(r.get("sync", []))]
    if r.get("datapath_sync"):
        rows.append(("datapath", r["datapath_sync"]))
    if rows:
        print("| ferryd | ready (CPU) | pods LIST / applied | all four lists (CPU) | RSS | peak | per workload | load |")
        print("|---|---|---|---|---|---|---|---|")
        for label, s in rows:
            p = s["lists"].get("pods", {})
            print("| %s | %.2f s (%.2f s) | %.2f s / %d ms | %.2f s (%.2f s) | %.0f MB | %.0f MB | %d B | %.1f |" % (
                label, s["ready_s"], s["ready_cpu_s"], p.get("list_ms", 0) / 1e3, p.get("applied_ms", 0),
                s["synced_s"], s["synced_cpu_s"], s["rss_mb"], s["hwm_mb"],
                (s["rss_mb"] - base.get("rss_mb", 0)) * 1024 * 1024 / pods, s["load"]))
        print("\nbaseline (empty API server): RSS %.1f MB\n" % base.get("rss_mb", 0))
    lat = []
    if r.get("service_latency"):
        lat.append(("EndpointSlice (VIP out / in)", r["service_latency"]))
    lat += [("pod IP move, round %d" % (n + 1), x) for n, x in enumerate(r.get("pod_latency", []))]
    if lat:
        print("| events | n | write ack -> map p50 / p99 / max | write start -> map p50 / p99 | ferryd p50 / p99 | load |")
        print("|---|---|---|---|---|---|")
        for label, x in lat:
            print("| %s | %d | %.2f / %.2f / %.2f ms | %.2f / %.2f ms | %.2f / %.2f ms | %.1f |" % (
                label, x["n"], x["ack_p50_ms"], x["ack_p99_ms"], x["ack_max_ms"], x["send_p50_ms"], x["send_p99_ms"],
                x["ferryd_p50_ms"], x["ferryd_p99_ms"], x["load"]))
        print()
    rates = [("pods, round %d" % (n + 1), x) for n, x in enumerate(r.get("rate", []))]
    rates += [("EndpointSlices", x) for x in r.get("service_rate", [])]
    if rates:
        print("| changes | writes/s (target) | events/s applied | ferryd CPU s/s | caught up after | "
              "CPU per event | per 1,000 events/s | load |")
        print("|---|---|---|---|---|---|---|---|")
        for label, x in rates:
            print("| %s | %d (%d) | %d | %.2f (idle %.3f) | %.1f s | %s | %s | %.1f |" % (
                label, x["writes_per_s"], x["target_writes_per_s"], x["events_per_s"], x["cpu_per_s"],
                x["idle_cpu_per_s"], x["drain_s"],
                "%.3f ms" % x["cpu_ms_per_event"] if x["cpu_ms_per_event"] is not None else "-",
                "%.2f s/s" % x["cpu_per_1000_events_per_s"] if x["cpu_per_1000_events_per_s"] is not None else "-",
                x["load"]))

if __name__ == "__main__":
    sys.exit(main())
