// Full TLS 1.3 mTLS handshakes per second on one core, with ferry's own TLS contexts
// (TlsContextCache over CaCertSource: ECDSA P-256 SVIDs from two per-node intermediates of
// one root, as in the lab) and ferry's own checks after each handshake (requirePeerIdentity
// on the client, verifyPeer on both sides). Both ends run in this one thread over an
// in-memory BIO pair, so no socket or scheduler cost is included and one "handshake" is
// the CPU work of both nodes. Also measured: issuing one SVID (key generation + signing),
// the work a node does per identity at half life.
//
//   handshake_bench [--seconds N] [--out FILE]
//
// Prints the numbers; with --out writes them as Markdown (docs/benchmarks/handshakes.md).
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sched.h>
#include <time.h>
#include <sys/utsname.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/identity/ca.h"
#include "proxy/identity/ca_cert_source.h"
#include "proxy/identity/tls_context.h"

namespace ferry::bench {
namespace {

using identity::CaCertSource;
using identity::CertificateAuthority;
using identity::SpiffeId;
using Clock = std::chrono::steady_clock;

constexpr char kTd[] = "cluster.local";

// CPU time of this thread: the machine this runs on is shared (2 cores, other builds), so
// wall-clock time would measure the neighbours. Handshakes per CPU-second of one core is
// what a dedicated core would do.
double cpuNow() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

[[noreturn]] void die(std::string_view what) {
  std::fprintf(stderr, "handshake_bench: %.*s\n", static_cast<int>(what.size()), what.data());
  std::exit(1);
}

template <typename T>
T orDie(absl::StatusOr<T> v, std::string_view what) {
  if (!v.ok()) die(std::string(what) + ": " + std::string(v.status().message()));
  return *std::move(v);
}

std::unique_ptr<CaCertSource> nodeSource(const CertificateAuthority& root) {
  auto inter = orDie(root.issueIntermediate(std::chrono::hours(48)), "intermediate");
  std::vector<identity::X509Ptr> roots;
  roots.push_back(identity::upRef(root.cert()));
  return orDie(CaCertSource::create(std::move(inter), {}, std::move(roots), kTd), "CA source");
}

struct Timing {
  uint64_t handshakes = 0;
  double seconds = 0;      // CPU time of the whole loop
  double wall_seconds = 0;
  double client_seconds = 0;  // inside the client's SSL_do_handshake and its checks
  double server_seconds = 0;
};

// One complete handshake; false if it failed (it never should here).
bool handshakeOnce(SSL_CTX* client_ctx, SSL_CTX* server_ctx, const std::string& server_id, Timing& t) {
  identity::SslPtr client(SSL_new(client_ctx));
  identity::SslPtr server(SSL_new(server_ctx));
  BIO* client_bio = nullptr;
  BIO* server_bio = nullptr;
  if (!client || !server || BIO_new_bio_pair(&client_bio, 0, &server_bio, 0) != 1) return false;
  SSL_set_bio(client.get(), client_bio, client_bio);
  SSL_set_bio(server.get(), server_bio, server_bio);
  SSL_set_connect_state(client.get());
  SSL_set_accept_state(server.get());
  identity::requirePeerIdentity(client.get(), &server_id);
  bool client_done = false, server_done = false;
  auto step = [](SSL* ssl, bool& done, double& spent) {
    if (done) return true;
    double start = cpuNow();
    int rc = SSL_do_handshake(ssl);
    spent += cpuNow() - start;
    if (rc == 1) {
      done = true;
      return true;
    }
    int err = SSL_get_error(ssl, rc);
    return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE;
  };
  for (int round = 0; round < 10 && !(client_done && server_done); ++round) {
    if (!step(client.get(), client_done, t.client_seconds)) return false;
    if (!step(server.get(), server_done, t.server_seconds)) return false;
  }
  if (!client_done || !server_done) return false;
  double start = cpuNow();
  bool ok = identity::verifyPeer(client.get(), kTd).ok();
  double mid = cpuNow();
  ok = identity::verifyPeer(server.get(), kTd).ok() && ok;
  t.client_seconds += mid - start;
  t.server_seconds += cpuNow() - mid;
  return ok;
}

struct Results {
  Timing handshakes;
  uint64_t issued = 0;
  double issue_seconds = 0;  // CPU time
};

Results run(double seconds) {
  auto root = orDie(CertificateAuthority::createRoot(kTd, std::chrono::hours(72)), "root");
  auto node1 = nodeSource(root);
  auto node2 = nodeSource(root);
  identity::TlsContextCache cache1(*node1, kTd);
  identity::TlsContextCache cache2(*node2, kTd);
  SpiffeId client_id = SpiffeId::forWorkload(kTd, "default", "client");
  SpiffeId server_id = SpiffeId::forWorkload(kTd, "default", "server");
  auto client_ctx = orDie(cache1.clientContext(client_id), "client context");
  auto server_ctx = orDie(cache2.serverContext(server_id), "server context");
  std::string expected = server_id.str();

  Results r;
  // Warm-up: first-use costs (OpenSSL's lazy init, the caches) are not the steady state.
  Timing warm;
  for (int i = 0; i < 50; ++i) {
    if (!handshakeOnce(client_ctx->native_handle(), server_ctx->native_handle(), expected, warm)) {
      die("warm-up handshake failed: " + identity::drainOpenSslErrors());
    }
  }
  // Runs for `seconds` of CPU time, however long that takes on a busy machine.
  auto wall_start = Clock::now();
  double start = cpuNow();
  while (cpuNow() - start < seconds) {
    if (!handshakeOnce(client_ctx->native_handle(), server_ctx->native_handle(), expected, r.handshakes)) {
      die("handshake failed: " + identity::drainOpenSslErrors());
    }
    ++r.handshakes.handshakes;
  }
  r.handshakes.seconds = cpuNow() - start;
  r.handshakes.wall_seconds = std::chrono::duration<double>(Clock::now() - wall_start).count();

  // Issuance: what CaCertSource does for one identity at first use and at each half life.
  auto ca = orDie(root.issueIntermediate(std::chrono::hours(24)), "intermediate");
  start = cpuNow();
  while (cpuNow() - start < seconds / 3) {
    orDie(ca.issueLeaf(client_id, std::chrono::hours(1)), "issue");
    ++r.issued;
  }
  r.issue_seconds = cpuNow() - start;
  return r;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

}  // namespace
}  // namespace ferry::bench

int main(int argc, char** argv) {
  using namespace ferry::bench;
  double seconds = 5;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else {
      std::fprintf(stderr, "usage: handshake_bench [--seconds N] [--out FILE]\n");
      return 2;
    }
  }
  if (seconds <= 0) die("--seconds must be positive");
  // One core: the figure is per core, and the scheduler must not move us mid-run.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  bool pinned = sched_setaffinity(0, sizeof(cpus), &cpus) == 0;

  Results r = run(seconds);
  const Timing& h = r.handshakes;
  double per_sec = h.handshakes / h.seconds;
  double us = 1e6 * h.seconds / h.handshakes;
  double client_us = 1e6 * h.client_seconds / h.handshakes;
  double server_us = 1e6 * h.server_seconds / h.handshakes;
  double issue_per_sec = r.issued / r.issue_seconds;
  std::printf("full mTLS handshakes (both ends, one core): %.0f per CPU-second (%.0f us each: client %.0f us, "
              "server %.0f us); wall clock %.0f/s on this shared machine\n",
              per_sec, us, client_us, server_us, h.handshakes / h.wall_seconds);
  std::printf("one side per core: client %.0f/s, server %.0f/s\n", 1e6 / client_us, 1e6 / server_us);
  std::printf("SVID issuance (P-256 key + signature): %.0f/s\n", issue_per_sec);

  if (!out.empty()) {
    std::FILE* f = std::fopen(out.c_str(), "w");
    if (f == nullptr) die("cannot write " + out);
    utsname u{};
    uname(&u);
    std::fprintf(f,
                 "# TLS handshake cost\n\n"
                 "Written by `tests/bench/handshake_bench.cc` (`build/default/tests/bench/handshake_bench "
                 "--seconds %.0f --out docs/benchmarks/handshakes.md`). Numbers, never assertions.\n\n"
                 "What is measured: complete TLS 1.3 mutual-TLS handshakes with ferry's own contexts "
                 "(`TlsContextCache` over `CaCertSource`: ECDSA P-256 SVIDs from two per-node intermediates "
                 "of one root, X25519, AES-128-GCM, ALPN h2, no resumption) followed by ferry's own checks "
                 "(`requirePeerIdentity` in the client's verify callback, `verifyPeer` on both ends). Both ends "
                 "run in one thread over an in-memory BIO pair: no sockets, no scheduler, so this is the "
                 "cryptographic and X.509 cost only, and one handshake is the work of *both* nodes.\n\n"
                 "| | value |\n|---|---|\n"
                 "| full handshakes per CPU-second, both ends on one core | **%.0f** |\n"
                 "| time per handshake (client + server) | %.0f µs |\n"
                 "| client side alone | %.0f µs (%.0f handshakes/s per core) |\n"
                 "| server side alone | %.0f µs (%.0f handshakes/s per core) |\n"
                 "| SVID issuance (P-256 key generation + signature) | %.0f per CPU-second |\n"
                 "| wall-clock handshakes per second during the run | %.0f (the machine was shared) |\n\n"
                 "Machine: %s, %s %s, %s; pinned to CPU 0: %s; %s. Date: %s.\n\n"
                 "Reading it: ferryd pools HBONE connections per (source, destination) identity pair, so "
                 "handshakes happen per pair and per 100 streams, not per proxied connection; a node pays "
                 "one side of each handshake. Certificate rotation adds one issuance per local identity "
                 "per half life (12 h by default), which is negligible next to these figures. The machine "
                 "this ran on had other builds running: the figures are CPU time of the benchmark thread, so "
                 "they estimate a dedicated core; cache contention still makes them a lower bound.\n",
                 seconds, per_sec, us, client_us, 1e6 / client_us, server_us, 1e6 / server_us, issue_per_sec,
                 h.handshakes / h.wall_seconds,
                 ferry::bench::cpuModel().c_str(), u.sysname, u.release, OpenSSL_version(OPENSSL_VERSION),
                 pinned ? "yes" : "no", u.machine, today().c_str());
    std::fclose(f);
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}
