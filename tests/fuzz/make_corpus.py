#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/ (docs/testing.md): small valid and invalid inputs
for each target, one file each. Run from anywhere; it rewrites the seed_* files and leaves
every other file (crash_*: regression inputs) alone. The DER seeds are certificates the
openssl CLI makes at run time, so they differ on every run: commit them once, re-run only
when a seed must change.

    tests/fuzz/make_corpus.py
"""
import os
import pathlib
import struct
import subprocess
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def write(target, name, data):
    d = HERE / f"{target}_corpus"
    d.mkdir(exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed_{name}").write_bytes(data)


def clear_seeds(target):
    d = HERE / f"{target}_corpus"
    d.mkdir(exist_ok=True)
    for f in d.glob("seed_*"):
        f.unlink()


# --- HTTP/2 (RFC 9113) and HPACK (RFC 7541) -------------------------------------------
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINUPD, CONT = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIO = 0x1, 0x1, 0x4, 0x8, 0x20
MARK = b"FYRP"  # read-pass separator of hbone_server_fuzzer.cc


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_int(value, prefix_bits, first=0):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value % 128) + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def literal(name, value, indexing=False):
    """Literal header field with a new name (without indexing, or with incremental)."""
    first = 0x40 if indexing else 0x00
    return (bytes([first]) + hpack_int(len(name), 7) + name.encode() +
            hpack_int(len(value), 7) + value.encode())


def block(headers, indexing=False):
    return b"".join(literal(n, v, indexing) for n, v in headers)


def connect(authority, extra=()):
    return [(":method", "CONNECT"), (":authority", authority)] + list(extra)


def settings(*pairs):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def hbone_seeds():
    t = "hbone_server"
    clear_seeds(t)
    pre = settings((4, 65535), (2, 0)) + frame(SETTINGS, ACK, 0)
    good = connect("10.77.1.11:8080", [("forwarded", 'for="10.77.2.11:40000"'),
                                       ("baggage", "k8s.namespace.name=data,k8s.pod.name=db-0")])
    h = lambda sid, hs, flags=END_HEADERS: frame(HEADERS, flags, sid, block(hs))
    write(t, "connect_ok", pre + h(1, good))
    write(t, "connect_data_eof", pre + h(1, good) + MARK + frame(DATA, 0, 1, b"hello") + MARK +
          frame(DATA, END_STREAM, 1, b"bye"))
    write(t, "connect_data_reset", pre + h(1, good) + MARK + frame(DATA, 0, 1, b"please reset"))
    write(t, "connect_two_streams", pre + h(1, good) + h(3, connect("10.77.1.11:9090")) + MARK +
          frame(DATA, 0, 3, b"x" * 100) + frame(WINUPD, 0, 1, struct.pack(">I", 1 << 20)) + MARK +
          frame(RST, 0, 1, struct.pack(">I", 8)) + frame(WINUPD, 0, 0, struct.pack(">I", 1000)))
    write(t, "connect_indexing", pre + frame(HEADERS, END_HEADERS, 1, block(good, indexing=True)) +
          frame(HEADERS, END_HEADERS, 3, bytes([0x3f, 0xe1, 0x1f]) + block(connect("10.77.1.11:81"))))
    write(t, "bad_authority_mismatch", pre + h(1, connect("10.77.2.11:8080")))
    write(t, "bad_authority_malformed", pre + h(1, connect("10.77.1.11")) + h(3, connect("[::1]:0")) +
          h(5, connect("10.77.1.11:99999")))
    write(t, "bad_ferry_port", pre + h(1, connect("10.77.1.11:15008")) + h(3, connect("10.77.1.11:15001")))
    write(t, "bad_path_scheme", pre + h(1, connect("10.77.1.11:80", [(":path", "/"), (":scheme", "https")])) +
          h(3, [(":method", "CONNECT"), (":protocol", "websocket"), (":authority", "10.77.1.11:80")]))
    write(t, "bad_method", pre + frame(HEADERS, END_HEADERS | END_STREAM, 1, bytes([0x82, 0x86, 0x84]) +
                                       block([(":authority", "10.77.1.11:80")])))
    write(t, "two_authorities", pre + h(1, connect("10.77.1.11:80", [(":authority", "10.77.1.11:81")])))
    big = connect("10.77.1.11:80", [("x-big", "a" * 17000)])
    write(t, "header_list_too_large", pre + frame(HEADERS, END_HEADERS, 1, block(big)))
    hb = block(good)
    parts = [hb[i:i + 4] for i in range(0, len(hb), 4)]
    cont = frame(HEADERS, 0, 1, parts[0]) + b"".join(frame(CONT, 0, 1, p) for p in parts[1:-1]) + \
        frame(CONT, END_HEADERS, 1, parts[-1])
    write(t, "continuation_many", pre + cont)
    write(t, "continuation_flood", pre + frame(HEADERS, 0, 1, hb[:3]) +
          b"".join(frame(CONT, 0, 1, b"") for _ in range(12)))
    write(t, "rapid_reset", pre + b"".join(h(2 * i + 1, good) + frame(RST, 0, 2 * i + 1, struct.pack(">I", 8))
                                           for i in range(40)))
    write(t, "ping_settings_flood", b"".join(frame(PING, 0, 0, b"12345678") for _ in range(50)) +
          b"".join(settings((1, 4096)) for _ in range(40)))
    write(t, "goaway", pre + h(1, good) + frame(GOAWAY, 0, 0, struct.pack(">II", 1, 0) + b"bye"))
    write(t, "priority_padded", pre + frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 16)) +
          frame(HEADERS, END_HEADERS | PADDED | PRIO, 1,
                bytes([4]) + struct.pack(">IB", 0, 16) + hb + b"\0" * 4) +
          frame(DATA, PADDED, 1, bytes([3]) + b"abc" + b"\0" * 3))
    write(t, "window_overflow", pre + h(1, good) + frame(WINUPD, 0, 1, struct.pack(">I", 0x7fffffff)) +
          frame(WINUPD, 0, 1, struct.pack(">I", 0x7fffffff)))
    write(t, "settings_bad", settings((4, 0x80000000)) + settings((5, 1)) + settings((2, 2)))
    write(t, "push_promise_unknown_type", pre + frame(PUSH, END_HEADERS, 1, b"\0\0\0\2" + hb) +
          frame(0xfa, 0, 0, b"whatever"))
    write(t, "data_idle_stream", pre + frame(DATA, 0, 7, b"data on a stream never opened"))
    write(t, "even_stream_id", pre + h(2, good))
    write(t, "initial_window_zero", settings((4, 0)) + h(1, good) + MARK + settings((4, 1 << 20)))
    write(t, "empty", b"")


# --- PROXY protocol v2 -------------------------------------------------------------
SIG = bytes([0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A])


def pp(cmd, fam, body, length=None):
    return SIG + bytes([cmd, fam]) + struct.pack(">H", len(body) if length is None else length) + body


def proxy_seeds():
    t = "proxy_protocol"
    clear_seeds(t)
    v4 = bytes([10, 77, 2, 11, 10, 77, 1, 11]) + struct.pack(">HH", 40000, 8080)
    v6 = bytes(15) + b"\1" + bytes(10) + b"\xff\xff\x0a\x4d\x01\x0b" + struct.pack(">HH", 40000, 8080)
    tlv = bytes([0x04, 0x00, 0x04]) + b"abcd" + bytes([0x20, 0x00, 0x01, 0x00])
    write(t, "tcp4", pp(0x21, 0x11, v4))
    write(t, "tcp6", pp(0x21, 0x21, v6))
    write(t, "tcp4_tlvs", pp(0x21, 0x11, v4 + tlv))
    write(t, "tcp4_trailing_payload", pp(0x21, 0x11, v4) + b"GET / HTTP/1.1\r\n")
    write(t, "local_command", pp(0x20, 0x00, b""))
    write(t, "udp4", pp(0x21, 0x12, v4))
    write(t, "unix", pp(0x21, 0x31, bytes(216)))
    write(t, "tcp4_short", pp(0x21, 0x11, v4[:8]))
    write(t, "tcp6_short", pp(0x21, 0x21, v6[:20]))
    write(t, "length_too_long", pp(0x21, 0x11, v4, length=0xffff))
    write(t, "port_zero", pp(0x21, 0x11, v4[:10] + b"\0\0"))
    write(t, "version1", b"PROXY TCP4 10.77.2.11 10.77.1.11 40000 8080\r\n")
    write(t, "bad_signature", b"\0" + SIG[1:] + bytes([0x21, 0x11, 0, 12]) + v4)
    write(t, "truncated", pp(0x21, 0x11, v4)[:20])


# --- SPIFFE IDs ---------------------------------------------------------------------
def spiffe_seeds():
    t = "spiffe_id"
    clear_seeds(t)
    ids = {
        "workload": "spiffe://cluster.local/ns/default/sa/web",
        "trust_domain_only": "spiffe://cluster.local",
        "upper_scheme": "SPIFFE://example.org/a.b-c_d",
        "trust_domain_plain": "cluster.local",
        "upper_td": "spiffe://Cluster.local/ns/a",
        "port": "spiffe://cluster.local:8443/ns/a",
        "userinfo": "spiffe://user@cluster.local/ns/a",
        "ipv6": "spiffe://[::1]/ns/a",
        "percent": "spiffe://cluster.local/ns/%41",
        "dot_segment": "spiffe://cluster.local/ns/../sa",
        "empty_segment": "spiffe://cluster.local/ns//sa",
        "trailing_slash": "spiffe://cluster.local/ns/",
        "query": "spiffe://cluster.local/ns?x=1",
        "fragment": "spiffe://cluster.local/ns#x",
        "wrong_scheme": "https://cluster.local/ns/a",
        "no_scheme": "cluster.local/ns/a",
        "empty_td": "spiffe:///ns/a",
        "control_char": "spiffe://cluster.local/ns/a\x00b\n",
        "long_td": "spiffe://" + "a" * 256 + "/x",
        "long_id": "spiffe://cluster.local/" + "b" * 2100,
    }
    for name, text in ids.items():
        write(t, name, text)


# --- X.509-SVIDs (DER) --------------------------------------------------------------
def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def svid_seeds():
    t = "svid"
    clear_seeds(t)
    with tempfile.TemporaryDirectory(prefix="fy-corpus-") as tmp:
        def key(name):
            openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=tmp)

        def ext(name, text):
            pathlib.Path(tmp, f"{name}.ext").write_text(text)

        def cert(name, issuer, extensions, subject=None):
            key(name)
            openssl("req", "-new", "-key", f"{name}.key", "-subj", subject or f"/O=ferry/CN={name}",
                    "-out", f"{name}.csr", cwd=tmp)
            ext(name, extensions)
            args = ["x509", "-req", "-in", f"{name}.csr", "-days", "3650", "-set_serial", "1",
                    "-extfile", f"{name}.ext", "-outform", "DER", "-out", f"{name}.der"]
            if issuer is None:
                args += ["-signkey", f"{name}.key"]
            else:
                args += ["-CA", f"{issuer}.pem", "-CAkey", f"{issuer}.key"]
            openssl(*args, cwd=tmp)
            openssl("x509", "-inform", "DER", "-in", f"{name}.der", "-out", f"{name}.pem", cwd=tmp)
            return pathlib.Path(tmp, f"{name}.der").read_bytes()

        ca_ext = ("basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
                  "subjectKeyIdentifier=hash\nsubjectAltName=URI:spiffe://cluster.local\n")
        root = cert("root", None, ca_ext)
        inter = cert("inter", "root", ca_ext + "authorityKeyIdentifier=keyid\n")
        leaf_ext = ("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n"
                    "subjectAltName=critical,URI:spiffe://cluster.local/ns/default/sa/web\n")
        leaf = cert("leaf", "inter", leaf_ext)
        direct = cert("direct", "root", leaf_ext)
        write(t, "leaf_inter_root", leaf + inter + root)
        write(t, "leaf_root", direct + root)
        write(t, "leaf_only", leaf)
        write(t, "leaf_wrong_root", leaf + root)
        write(t, "root_only", root)
        variants = {
            "leaf_is_ca": leaf_ext.replace("CA:FALSE", "CA:TRUE"),
            "no_san": leaf_ext.replace("subjectAltName=critical,URI:spiffe://cluster.local/ns/default/sa/web\n", ""),
            "two_uri_sans": leaf_ext.replace("/sa/web\n", "/sa/web,URI:spiffe://cluster.local/ns/x/sa/y\n"),
            "dns_and_uri": leaf_ext.replace("URI:", "DNS:web.default,URI:"),
            "bad_spiffe": leaf_ext.replace("spiffe://cluster.local/ns/default/sa/web", "spiffe://Cluster.local/a/../b"),
            "root_path": leaf_ext.replace("/ns/default/sa/web", ""),
            "no_key_usage": leaf_ext.replace("keyUsage=critical,digitalSignature,keyEncipherment\n", ""),
            "no_digital_signature": leaf_ext.replace("digitalSignature,", ""),
            "key_cert_sign": leaf_ext.replace("keyEncipherment", "keyCertSign"),
            "eku_server_only": leaf_ext.replace("serverAuth,clientAuth", "serverAuth"),
            "eku_client_only": leaf_ext.replace("serverAuth,clientAuth", "clientAuth"),
            "other_td": leaf_ext.replace("cluster.local", "other.example"),
        }
        for name, extensions in variants.items():
            write(t, name, cert(name, "inter", extensions) + inter + root)
        write(t, "truncated", (leaf + inter + root)[:700])
        write(t, "garbage", b"\x30\x82\xff\xff" + b"\x00" * 64)


# --- YAML ---------------------------------------------------------------------------
def config_seeds():
    t = "config"
    clear_seeds(t)
    base = (ROOT / "config" / "ferry.yaml").read_text()
    minimal = "node: n1\ntrust_domain: cluster.local\nworkloads_file: workloads.yaml\ncert_dir: certs\n"
    write(t, "example", base)
    write(t, "minimal", minimal)
    write(t, "identity_ca", minimal + "identity: {source: ca, ca_cert: ca.pem, ca_key: ca.key, "
          "leaf_lifetime: 2s, poll_interval: 500ms}\n")
    write(t, "datapath", minimal + "datapath:\n  enabled: true\n  proxy_netns: /run/netns/fy-n1-proxy\n"
          "  host_proxy_interface: fy-n1-proxy\n  injection: auto\n  egress_flag: 32\n  capture: all\n"
          "  failure_mode: open\n  mark: 0x539\n  bpffs: /run/ferry/bpffs\n")
    write(t, "proxy_protocol", minimal + "original_destination: proxy_protocol\ntransparent: false\n"
          "listen: {outbound: ['[::1]:15001', '127.0.0.1:15001'], admin: 127.0.0.1:0}\n")
    write(t, "bad_duration", minimal + "timeouts: {connect: 10, idle: -1h, drain: 1y}\n")
    write(t, "unknown_key", minimal + "colour: blue\npool: {max_streams: 100000}\n")
    write(t, "duplicate_listener", minimal + "listen: {admin: 127.0.0.1:15000, metrics: 127.0.0.1:15000}\n")
    write(t, "not_a_map", "- just\n- a list\n")
    write(t, "anchors", "node: &n n1\ntrust_domain: *n\nworkloads_file: *n\ncert_dir: !!binary aGk=\n"
          "<<: {log_level: debug}\n")
    write(t, "malformed", "node: [n1\ntrust_domain: {\n\t- x: 'y\n")
    write(t, "duplicate_key", minimal + "node: n2\n")
    write(t, "deep", "a: " + "[" * 200 + "]" * 200 + "\n")
    write(t, "huge_int", minimal + "workers: 99999999999999999999999\nhbone_port: 0x10000\n")


def workloads_seeds():
    t = "workloads"
    clear_seeds(t)
    write(t, "example", (ROOT / "config" / "workloads.yaml").read_text())
    write(t, "block_style", "workloads:\n  - name: web-0\n    namespace: default\n    service_account: web\n"
          "    node: node-1\n    ips: [10.77.1.11, 'fd00::11']\n    hbone: true\n    host_interface: fy-n1-p1\n"
          "    tls_mode: strict\n")
    write(t, "empty_list", "workloads: []\n")
    write(t, "duplicate_ip", "workloads:\n  - {name: a, namespace: n, service_account: s, node: node-1, ips: [10.0.0.1]}\n"
          "  - {name: b, namespace: n, service_account: s, node: node-2, ips: [10.0.0.1]}\n")
    write(t, "duplicate_name", "workloads:\n  - {name: a, namespace: n, service_account: s, node: node-1, ips: [10.0.0.1]}\n"
          "  - {name: a, namespace: n, service_account: s, node: node-1, ips: [10.0.0.2]}\n")
    write(t, "mapped_v4", "workloads:\n  - {name: a, namespace: n, service_account: s, node: node-1, ips: ['::ffff:10.0.0.1', 10.0.0.1]}\n")
    write(t, "bad_values", "workloads:\n  - {name: A_B, namespace: '', service_account: s/x, node: node-1, ips: [300.1.1.1], "
          "hbone: maybe, tls_mode: STRICT, extra: 1}\n")
    write(t, "missing_keys", "workloads:\n  - {name: a}\n  - 7\n  - []\n")
    write(t, "not_a_list", "workloads: {name: a}\n")
    write(t, "malformed", "workloads:\n  - {name: a, ips: [10.0.0.1\n")


def cni_seeds():
    """ferry-cni's inputs (proxy/cni/): byte 0 picks the parser (cni_fuzzer.cc)."""
    t = "cni"
    clear_seeds(t)
    prev = ('{"cniVersion":"1.0.0","interfaces":[{"name":"veth1","mac":"12:07:82:c3:a6:57"},'
            '{"name":"eth0","mac":"86:af:c5:8f:66:49","sandbox":"/run/netns/x"}],'
            '"ips":[{"interface":1,"address":"10.99.0.6/24","gateway":"10.99.0.1"}],"dns":{}}')
    write(t, "config_chained", "\x00" + '{"cniVersion":"1.0.0","name":"n","type":"ferry-cni","socket":"/run/s",'
          '"failurePolicy":"open","excludeNamespaces":["kube-system"],"timeoutMs":250,"prevResult":' + prev + "}")
    write(t, "config_040", "\x00" + '{"cniVersion":"0.4.0","name":"n","type":"ferry-cni","prevResult":'
          '{"interfaces":[{"name":"e","sandbox":"/x"}],"ips":[{"version":"4","interface":0,"address":"10.0.0.2/8"}]}}')
    write(t, "request", "\x01" + '{"version":1,"verb":"ADD","containerId":"abc","netns":"/run/netns/x","ifname":"eth0",'
          '"podNamespace":"shop","podName":"web-0","podUid":"u","ips":["10.0.0.2"],"hostInterfaces":["veth1","cni0"]}')
    write(t, "request_v2", "\x01" + '{"version":2,"verb":"ADD"}')
    write(t, "answer", "\x02" + '{"version":1,"verdict":"enrolled","reason":"","device":"veth1"}')
    write(t, "conflist", "\x03" + '{"cniVersion":"0.4.0","name":"fy-pods","plugins":[{"type":"bridge","bridge":"cni0",'
          '"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}')
    write(t, "conf", "\x03" + '{"cniVersion":"0.3.1","name":"k8s","type":"bridge","bridge":"cni0"}')
    write(t, "conflist_stale", "\x03" + '{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp"},{"type":"ferry-cni","socket":"/old"},{"type":"tuning"}]}')


def policy_seeds():
    """Policy objects (proxy/policy/): byte 0 picks the form (policy_fuzzer.cc)."""
    t = "policy"
    clear_seeds(t)
    allow = ("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: a, namespace: shop}\n"
             "spec:\n  selector: {matchLabels: {app: web}}\n  rules:\n"
             "  - from: [{source: {principals: [cluster.local/ns/shop/sa/frontend, '*/sa/x'], notIpBlocks: [10.0.0.0/8]}}]\n"
             "    to: [{operation: {ports: ['8080'], methods: [GET]}}]\n"
             "    when: [{key: source.ip, values: ['10.1.0.0/16']}, {key: request.headers[x], values: [y]}]\n")
    deny = ("apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: {name: d, namespace: istio-system}\n"
            "spec: {action: DENY, rules: [{from: [{source: {notNamespaces: [shop]}}]}]}\n")
    peer = ("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: shop}\n"
            "spec: {selector: {matchLabels: {app: web}}, mtls: {mode: STRICT}, portLevelMtls: {'8080': {mode: PERMISSIVE}}}\n")
    write(t, "file_three", "\x00" + allow + "---\n" + deny + "---\n" + peer)
    write(t, "file_empty_forms", "\x00" + "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
          "metadata: {name: n}\nspec: {}\n---\napiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\n"
          "metadata: {name: all}\nspec: {rules: [{}]}\n")
    write(t, "file_bad", "\x00" + "apiVersion: security.istio.io/v1alpha1\nkind: AuthorizationPolicy\nmetadata: {name: x}\n"
          "spec: {action: CUSTOM, rules: [{from: [{source: {ipBlocks: [10.0.0.0/33], principals: ['a*b']}}]}]}\n"
          "---\nkind: Pod\n---\n[1, 2\n")
    write(t, "file_duplicate", "\x00" + peer + "---\n" + peer)
    write(t, "api_json", "\x01" + '{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":'
          '{"name":"a","namespace":"shop","uid":"u","resourceVersion":"7","creationTimestamp":"2026-01-01T00:00:00Z",'
          '"annotations":{"istio.io/dry-run":"true"}},"spec":{"action":"ALLOW","rules":[{"from":[{"source":'
          '{"serviceAccounts":["shop/web","db"]}}],"to":[{"operation":{"notPorts":["22"]}}]}]}}')
    write(t, "api_peer", "\x01" + '{"apiVersion":"security.istio.io/v1","kind":"PeerAuthentication","metadata":'
          '{"name":"m","namespace":"istio-system"},"spec":{"mtls":{"mode":"UNSET"}}}')
    write(t, "api_bad", "\x01" + '{"kind":"AuthorizationPolicy","metadata":{"name":7},"spec":[]}')


if __name__ == "__main__":
    hbone_seeds()
    proxy_seeds()
    spiffe_seeds()
    svid_seeds()
    config_seeds()
    workloads_seeds()
    cni_seeds()
    policy_seeds()
    total = sum(f.stat().st_size for f in HERE.glob("*_corpus/*"))
    print(f"corpora: {total} bytes")
