"""What the registry benches share (registry_bench.py, k8s_registry_bench.py): free loopback
ports, a process's CPU time and memory from /proc, and one ferryd started on a config of
loopback listeners and waited for until /healthz/ready answers 200.
"""
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime: unlike wall time, not inflated by other load on the machine."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kb(pid, key):
    """A /proc/PID/status figure in kB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def make_cert_dir(ferryctl, workdir):
    """A cert_dir holding only a trust bundle: enough for ferryd to start and be ready."""
    ca = os.path.join(workdir, "ca")
    subprocess.run([ferryctl, "ca", "init", "--dir", ca, "--trust-domain", "cluster.local"],
                   check=True, stdout=subprocess.DEVNULL)
    certs = os.path.join(workdir, "certs")
    os.makedirs(certs, exist_ok=True)
    shutil.copy(os.path.join(ca, "ca.pem"), os.path.join(certs, "bundle.pem"))
    return certs


class Ferryd:
    """One ferryd with every listener on a free loopback port (`workers: 1`, no preallocated
    sockets: the registry is what the memory figures are about). `source` is the config's
    workloads part (`workloads_file: ...`, or `workload_source: kubernetes` and its keys),
    `extra` any further top-level YAML (a `datapath:` section)."""

    def __init__(self, binary, workdir, node, source, extra="", name="ferryd"):
        self.binary = binary
        self.ports = [free_port() for _ in range(6)]
        self.config = os.path.join(workdir, name + ".yaml")
        self.log_path = os.path.join(workdir, name + ".log")
        with open(self.config, "w") as f:
            f.write("node: %s\ntrust_domain: cluster.local\n%s" % (node, source))
            f.write("cert_dir: %s\nworkers: 1\n" % os.path.join(workdir, "certs"))
            f.write("listen:\n  outbound: 127.0.0.1:%d\n  inbound_plaintext: 127.0.0.1:%d\n"
                    "  hbone: 127.0.0.1:%d\n  admin: 127.0.0.1:%d\n  metrics: 127.0.0.1:%d\n"
                    "  readiness: 127.0.0.1:%d\n" % tuple(self.ports))
            f.write("limits:\n  preallocated_sockets: 0\n")
            f.write(extra)
        self.proc = None
        self.started = None

    @property
    def pid(self):
        return self.proc.pid

    def start(self):
        self._log = open(self.log_path, "w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen([self.binary, "--config", self.config], stdout=self._log,
                                     stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout=300):
        """Seconds from exec to the first 200 on /healthz/ready."""
        url = "http://127.0.0.1:%d/healthz/ready" % self.ports[5]
        while self.proc.poll() is None and time.monotonic() - self.started < timeout:
            try:
                if urllib.request.urlopen(url, timeout=1).status == 200:
                    return time.monotonic() - self.started
            except OSError:
                pass
            time.sleep(0.01)
        raise SystemExit("ferryd did not become ready (exit status %s); see %s"
                         % (self.proc.poll(), self.log_path))

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.ports[4]
        return urllib.request.urlopen(url, timeout=10).read().decode()

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
