// What authorization costs per connection and per policy change (docs/benchmarks/policy.md):
// PolicySet::authorize and PolicySet::mtls timed one call at a time over many decisions, with
// 10, 1,000 and 10,000 AuthorizationPolicies spread over namespaces and 10,000 selector
// policies in one namespace; and Store::upsert of one changed object (publishing included).
// Several rounds, scenarios in alternating order; prints numbers, judges none.
//
//   build/default/tests/bench/policy_bench [--rounds 5] [--decisions 200000] [--changes 300]
//                                          [--report docs/benchmarks/policy.md]
#include <malloc.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proxy/policy/decode.h"
#include "proxy/policy/store.h"
#include "tests/bench/proc_status.h"

namespace {

using namespace ferry;
using Clock = std::chrono::steady_clock;
using policy::Action;
using policy::AuthorizationPolicy;
using policy::Decoded;
using policy::MtlsMode;
using policy::PeerAuthentication;
using policy::Rule;
using policy::Source;

constexpr char kOrigin[] = "bench";
constexpr char kRoot[] = "istio-system";
// The policies of one namespace in the spread layout (the shapes below).
constexpr int kPerNamespace = 10;
// Apps (one workload each) per namespace in the spread layout: svc-10 and svc-11 are picked
// by no selector, only by the namespace-wide policies.
constexpr int kAppsPerNamespace = 12;
// Distinct random requests, cycled: enough that caches see many destinations and principals.
constexpr size_t kProbes = 1 << 16;
// Two namespaces' worth of destinations in the spread layout: few enough to stay in cache.
constexpr size_t kHotDestinations = 24;

policy::StringMatch match(const std::string& text) { return *policy::parseStringMatch(text); }
policy::IpBlock block(const std::string& text) { return *policy::parseIpBlock(text); }
std::string ns(int n) { return absl::StrCat("ns-", n); }
std::string principal(int n, int sa) { return absl::StrCat("cluster.local/ns/", ns(n), "/sa/sa-", sa); }

Source fromPrincipals(std::vector<std::string> values) {
  Source s;
  for (auto& v : values) s.principals.values.push_back(match(v));
  return s;
}
Source fromIps(std::vector<std::string> values) {
  Source s;
  for (auto& v : values) s.ip_blocks.values.push_back(block(v));
  return s;
}
policy::Operation toPorts(std::vector<uint16_t> ports, bool negated = false) {
  policy::Operation op;
  (negated ? op.ports.not_values : op.ports.values) = std::move(ports);
  return op;
}

Decoded wrap(AuthorizationPolicy p) {
  std::string key = p.meta.key();
  return Decoded{"AuthorizationPolicy", key, policy::Object(std::make_shared<const AuthorizationPolicy>(std::move(p)))};
}
Decoded wrap(PeerAuthentication p) {
  std::string key = p.meta.key();
  return Decoded{"PeerAuthentication", key, policy::Object(std::make_shared<const PeerAuthentication>(std::move(p)))};
}

AuthorizationPolicy authorization(const std::string& namespace_name, const std::string& name, Action action,
                                  std::optional<policy::Labels> selector, std::vector<Rule> rules) {
  AuthorizationPolicy p;
  p.meta.namespace_name = namespace_name;
  p.meta.name = name;
  p.meta.origin = kOrigin;
  p.action = action;
  p.selector = std::move(selector);
  p.rules = std::move(rules);
  return p;
}

policy::Labels app(int i) { return {{"app", absl::StrCat("svc-", i)}}; }

// A version > 0 of a policy carries one more port in its first rule: what a change edits.
void applyVersion(AuthorizationPolicy& p, int version) {
  if (version == 0) return;
  Rule& r = p.rules.front();
  if (r.to.empty()) r.to.push_back(policy::Operation{});
  r.to.front().ports.values.push_back(static_cast<uint16_t>(10000 + version));
}

// Policy k of namespace n in the spread layout: two namespace-wide, eight with a selector;
// ALLOW, DENY and AUDIT; principals (exact, prefix, suffix), namespaces, ipBlocks, ports.
AuthorizationPolicy spreadPolicy(int n, int k, int namespaces, int version) {
  auto other = [&](int d) { return (n + d) % namespaces; };
  std::string name = absl::StrCat("p-", k);
  AuthorizationPolicy p;
  switch (k) {
    case 0:  // the namespace's own callers
      p = authorization(ns(n), name, Action::kAllow, std::nullopt,
                        {Rule{{fromPrincipals({absl::StrCat("cluster.local/ns/", ns(n), "/*")})}, {}, {}, {}}});
      break;
    case 1:
      p = authorization(ns(n), name, Action::kAllow, app(1),
                        {Rule{{fromPrincipals({principal(other(1), 0), principal(other(2), 1), principal(other(3), 2)})},
                              {toPorts({8080})}, {}, {}}});
      break;
    case 2: {
      Source s;
      s.namespaces.values = {match(ns(other(1))), match(ns(other(2)))};
      p = authorization(ns(n), name, Action::kAllow, app(2), {Rule{{s}, {toPorts({8080, 9090})}, {}, {}}});
      break;
    }
    case 3:
      p = authorization(ns(n), name, Action::kAllow, app(3),
                        {Rule{{fromIps({absl::StrCat("10.", n % 200, ".0.0/16")})}, {}, {}, {}}});
      break;
    case 4:  // no ssh anywhere in the namespace
      p = authorization(ns(n), name, Action::kDeny, std::nullopt, {Rule{{}, {toPorts({22})}, {}, {}}});
      break;
    case 5:
      p = authorization(ns(n), name, Action::kDeny, app(5), {Rule{{fromPrincipals({"*/sa/debug"})}, {}, {}, {}}});
      break;
    case 6:
      p = authorization(ns(n), name, Action::kAllow, app(6),
                        {Rule{{fromPrincipals({absl::StrCat("cluster.local/ns/", ns(other(3)), "/*")})}, {}, {}, {}},
                         Rule{{fromIps({"10.0.0.0/8"})}, {toPorts({443})}, {}, {}}});
      break;
    case 7: {
      Source s;
      s.namespaces.not_values = {match(ns(n))};
      p = authorization(ns(n), name, Action::kAudit, app(7), {Rule{{s}, {}, {}, {}}});
      break;
    }
    case 8: {
      policy::Labels selector = {{"app", "svc-8"}, {"version", "v1"}};
      p = authorization(ns(n), name, Action::kAllow, selector,
                        {Rule{{fromPrincipals({principal(other(4), 0), principal(other(5), 3)})}, {toPorts({8080})}, {}, {}}});
      break;
    }
    default:
      p = authorization(ns(n), name, Action::kDeny, app(9),
                        {Rule{{fromIps({"192.168.0.0/16"})}, {toPorts({8080}, true)}, {}, {}}});
      break;
  }
  applyVersion(p, version);
  return p;
}

// Policy i of the one-namespace layout: a selector of its own app, 70 % ALLOW.
AuthorizationPolicy bigPolicy(int i, int version) {
  Rule rule;
  if (i % 3 == 0) {
    rule.from = {fromIps({absl::StrCat("10.", i % 200, ".0.0/16")})};
  } else {
    rule.from = {fromPrincipals({principal(i % 50, i % 5)})};
    rule.to = {toPorts({8080})};
  }
  auto p = authorization("big", absl::StrCat("svc-", i), i % 10 < 7 ? Action::kAllow : Action::kDeny, app(i), {rule});
  applyVersion(p, version);
  return p;
}

PeerAuthentication peer(const std::string& namespace_name, const std::string& name, std::optional<policy::Labels> selector,
                        MtlsMode mode, std::vector<std::pair<uint16_t, MtlsMode>> ports = {}) {
  PeerAuthentication p;
  p.meta.namespace_name = namespace_name;
  p.meta.name = name;
  p.meta.origin = kOrigin;
  p.selector = std::move(selector);
  p.mode = mode;
  p.port_level = std::move(ports);
  return p;
}

workloads::Workload workload(const std::string& namespace_name, int app_index, uint32_t ip, int team) {
  workloads::Workload w;
  w.name = absl::StrCat("svc-", app_index, "-0");
  w.namespace_name = workloads::intern(namespace_name);
  w.service_account = workloads::intern(absl::StrCat("sa-", app_index % 5));
  w.node = workloads::intern("node-1");
  w.ips = {common::IpAddress(boost::asio::ip::address_v4(ip))};
  w.hbone = true;
  // Five labels, as Deployments' pods carry (app, version, pod-template-hash, tier, team).
  w.labels = workloads::LabelSet({{"app", absl::StrCat("svc-", app_index)},
                                  {"version", "v1"},
                                  {"pod-template-hash", absl::StrFormat("%010x", ip * 2654435761u)},
                                  {"tier", "backend"},
                                  {"team", absl::StrCat("team-", team % 7)}});
  return w;
}

struct Probe {
  uint32_t destination;
  policy::Request request;
};

struct Scenario {
  std::string name;
  size_t authorizations = 0, peers = 0, namespaces = 0;
  std::unique_ptr<policy::Store> store;
  std::vector<workloads::Workload> destinations;
  std::vector<Probe> probes;
  // The same kind of requests to the first kHotDestinations workloads only: what a decision
  // costs when its data is in the CPU's caches.
  std::vector<Probe> hot_probes;
  double applicable_mean = 0;  // AuthorizationPolicies a decision reads, on average
  std::function<Decoded(std::mt19937_64&, int version)> change;  // a changed version of one policy
  double load_ms = 0;
  long rss_kb = 0;
  // Per round.
  std::vector<double> authorize_p50, authorize_p99, authorize_p999, hot_p50, mtls_p50, mtls_p99, change_p50, change_p99,
      change_max;
};

// Random requests: 90 % with a principal (a third of those from the destination's own
// namespace, 1 in 20 a "debug" service account), 10 % plaintext; source IPs mostly in 10/8,
// a few in 192.168/16; ports mostly 8080.
std::vector<Probe> makeProbes(const std::vector<workloads::Workload>& destinations, int principal_namespaces,
                              std::mt19937_64& rng, size_t destination_count) {
  std::vector<Probe> out(kProbes);
  auto pick = [&](uint64_t n) { return static_cast<int>(rng() % n); };
  for (auto& probe : out) {
    probe.destination = static_cast<uint32_t>(rng() % std::min(destination_count, destinations.size()));
    const auto& w = destinations[probe.destination];
    auto& r = probe.request;
    int roll = pick(100);
    if (roll >= 10) {
      std::string from_ns = roll < 40 ? w.namespace_name.str() : ns(pick(principal_namespaces));
      r.principal = absl::StrCat("cluster.local/ns/", from_ns, "/sa/", roll < 15 ? "debug" : absl::StrCat("sa-", pick(5)));
    }
    uint32_t ip = pick(100) < 3 ? 0xc0a80000u + pick(65536) : 0x0a000000u + pick(1 << 24);
    r.source_ip = boost::asio::ip::address_v4(ip);
    r.destination_ip = w.ips.front();
    int port = pick(100);
    r.destination_port = port < 60 ? 8080 : port < 80 ? 9090 : port < 90 ? 443 : port < 95 ? 22 : 5432;
  }
  return out;
}

// Loads `objects` into a new store (timed, with the RSS it adds) and draws the requests.
void load(Scenario& s, std::vector<Decoded> objects, size_t authorizations, int principal_namespaces,
          std::mt19937_64& rng) {
  s.authorizations = authorizations;
  s.peers = objects.size() - authorizations;
  s.store = std::make_unique<policy::Store>(kRoot);
  long rss_before = bench::rssKb();
  auto start = Clock::now();
  s.store->replace(kOrigin, std::move(objects));
  s.load_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  s.rss_kb = bench::rssKb() - rss_before;
  s.probes = makeProbes(s.destinations, principal_namespaces, rng, s.destinations.size());
  s.hot_probes = makeProbes(s.destinations, principal_namespaces, rng, kHotDestinations);
}

std::unique_ptr<Scenario> spread(int authorizations, std::mt19937_64& rng) {
  auto s = std::make_unique<Scenario>();
  int namespaces = authorizations / kPerNamespace;
  s->name = absl::StrCat(authorizations, " in ", namespaces, namespaces == 1 ? " namespace" : " namespaces");
  s->namespaces = namespaces;
  std::vector<Decoded> objects;
  objects.push_back(wrap(peer(kRoot, "mesh", std::nullopt, MtlsMode::kStrict)));
  for (int n = 0; n < namespaces; ++n) {
    for (int k = 0; k < kPerNamespace; ++k) objects.push_back(wrap(spreadPolicy(n, k, namespaces, 0)));
    // Every namespace opens 9090 of svc-1; every other one is PERMISSIVE as a whole.
    objects.push_back(wrap(peer(ns(n), "svc-1-ports", app(1), MtlsMode::kUnset, {{9090, MtlsMode::kPermissive}})));
    if (n % 2 == 0) objects.push_back(wrap(peer(ns(n), "open", std::nullopt, MtlsMode::kPermissive)));
    for (int a = 0; a < kAppsPerNamespace; ++a) {
      s->destinations.push_back(workload(ns(n), a, 0x0b000000u + n * kAppsPerNamespace + a, n));
    }
  }
  load(*s, std::move(objects), authorizations, namespaces, rng);
  s->change = [namespaces](std::mt19937_64& r, int version) {
    return wrap(spreadPolicy(static_cast<int>(r() % namespaces), static_cast<int>(r() % kPerNamespace), namespaces,
                             version));
  };
  return s;
}

// The worst case for a scan: every policy in one namespace, each selecting its own app.
std::unique_ptr<Scenario> oneNamespace(int authorizations, std::mt19937_64& rng) {
  auto s = std::make_unique<Scenario>();
  s->name = absl::StrCat(authorizations, " selector policies in 1 namespace");
  s->namespaces = 1;
  std::vector<Decoded> objects;
  objects.push_back(wrap(peer(kRoot, "mesh", std::nullopt, MtlsMode::kStrict)));
  for (int i = 0; i < authorizations; ++i) objects.push_back(wrap(bigPolicy(i, 0)));
  for (int i = 0; i < authorizations / 10; ++i) {
    objects.push_back(wrap(peer("big", absl::StrCat("pa-", i), app(i * 10), MtlsMode::kPermissive,
                                {{9090, MtlsMode::kStrict}})));
  }
  // A tenth of the apps have no policy of their own.
  for (int a = 0; a < authorizations + authorizations / 10; ++a) {
    s->destinations.push_back(workload("big", a, 0x0c000000u + a, a));
  }
  load(*s, std::move(objects), authorizations, 50, rng);
  s->change = [authorizations](std::mt19937_64& r, int version) {
    return wrap(bigPolicy(static_cast<int>(r() % authorizations), version));
  };
  return s;
}

double percentile(std::vector<double>& v, double p) {
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}
double median(std::vector<double> v) { return percentile(v, 0.5); }
double minOf(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double maxOf(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

volatile uint64_t g_sink;  // keeps the decisions from being optimised away

// Times `call(probe)` once per probe, `count` times cycling over the probes; ns per call.
template <class Call>
std::vector<double> timeEach(const std::vector<Probe>& probes, size_t count, Call call) {
  uint64_t sink = 0;
  for (size_t i = 0; i < std::min(count, kProbes); ++i) sink += call(probes[i]);  // warm-up
  std::vector<double> ns(count);
  for (size_t i = 0; i < count; ++i) {
    const Probe& probe = probes[i % kProbes];
    auto t0 = Clock::now();
    sink += call(probe);
    auto t1 = Clock::now();
    ns[i] = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  g_sink = sink;
  return ns;
}

void runRound(Scenario& s, size_t decisions, size_t changes, std::mt19937_64& rng, int round) {
  auto set = s.store->current();
  auto decide = [&](const Probe& p) {
    auto d = set->authorize(s.destinations[p.destination], p.request);  // destroyed inside the timing
    return static_cast<uint64_t>(d.allowed) + d.audited.size();
  };
  auto authorize = timeEach(s.probes, decisions, decide);
  s.authorize_p50.push_back(percentile(authorize, 0.5));
  s.authorize_p99.push_back(percentile(authorize, 0.99));
  s.authorize_p999.push_back(percentile(authorize, 0.999));
  auto hot = timeEach(s.hot_probes, decisions, decide);
  s.hot_p50.push_back(percentile(hot, 0.5));
  auto mtls = timeEach(s.probes, decisions, [&](const Probe& p) {
    const auto& w = s.destinations[p.destination];
    return static_cast<uint64_t>(set->mtls(w, p.request.destination_port, MtlsMode::kPermissive).mode);
  });
  s.mtls_p50.push_back(percentile(mtls, 0.5));
  s.mtls_p99.push_back(percentile(mtls, 0.99));
  set.reset();  // as a worker lets go of it: the upserts below free each replaced snapshot

  std::vector<double> us;
  us.reserve(changes);
  for (size_t c = 0; c < changes; ++c) {
    // Versions alternate so that every upsert is a change (1, 2, 1, 2... for one object;
    // the loaded version is 0).
    Decoded next = s.change(rng, static_cast<int>(1 + (c + round) % 2));
    auto t0 = Clock::now();
    auto result = s.store->upsert(kOrigin, std::move(next));
    auto t1 = Clock::now();
    if (result.changed != 1) std::fprintf(stderr, "policy_bench: an upsert changed %zu objects\n", result.changed);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  s.change_p50.push_back(percentile(us, 0.5));
  s.change_p99.push_back(percentile(us, 0.99));
  s.change_max.push_back(maxOf(us));
}

std::string readFirstLine(const std::string& path, const std::string& prefix = "") {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

std::string commandOutput(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// "4.35 3.18 2.70 8/311 20425" -> "4.35 3.18 2.70"
std::string loadAverages() {
  std::string line = readFirstLine("/proc/loadavg");
  size_t end = 0;
  for (int i = 0; i < 3 && end != std::string::npos; ++i) end = line.find(' ', end + (i > 0));
  return line.substr(0, end);
}

std::string range(const std::vector<double>& v, const char* format) {
  return absl::StrCat(absl::StrFormat(format, minOf(v)), "–", absl::StrFormat(format, maxOf(v)));
}

// What the table says, in words; the causes named are the code's at the measured commit.
std::string findings(const std::vector<std::unique_ptr<Scenario>>& scenarios) {
  const Scenario& few = *scenarios.front();
  const Scenario& spread = *scenarios[2];
  const Scenario& one = *scenarios[3];
  auto ns = [](const std::vector<double>& v) { return absl::StrFormat("%.0f ns", median(v)); };
  auto us = [](const std::vector<double>& v) { return absl::StrFormat("%.1f µs", median(v)); };
  auto ms = [](const std::vector<double>& v) { return absl::StrFormat("%.1f ms", median(v) / 1000); };
  std::string out = "## What the numbers say\n\n";
  absl::StrAppend(
      &out, "- **A decision does not scan.** It reads ", absl::StrFormat("%.2f", spread.applicable_mean),
      " policies on average with 10,000 spread over 1,000 namespaces and ", absl::StrFormat("%.2f", one.applicable_mean),
      " with 10,000 in one namespace (", absl::StrFormat("%.2f", few.applicable_mean),
      " with 10): the index finds the destination's namespace and, within it, the selector policies filed under "
      "one of the workload's labels (`PolicySet::forEachApplicable`, proxy/policy/policy_set.cc). authorize's p50 "
      "still grows from ", ns(few.authorize_p50), " (10 policies) to ", ns(spread.authorize_p50), " and ",
      ns(one.authorize_p50),
      " (10,000): with 11,000-12,000 destinations drawn at random, the workloads' labels, the namespace "
      "buckets and the policies are cache misses. Limited to 24 destinations the same snapshots answer in ",
      ns(spread.hot_p50), " and ", ns(one.hot_p50), ", as 10 policies do (", ns(few.hot_p50),
      "). What a decision does per call besides memory: an `absl::StrCat` of `key=value` per destination label to "
      "look up the label index (a heap allocation for labels longer than 15 bytes, such as pod-template-hash), and "
      "the reason string.\n");
  absl::StrAppend(&out, "- **mtls()** is ", ns(few.mtls_p50), " to ", ns(spread.mtls_p50),
                  " (p50) by the same pattern: two namespace lookups and the label index of PeerAuthentications.\n");
  absl::StrAppend(
      &out, "- **A change, spread layout:** ", us(spread.change_p50),
      " (p50) with 10,000 policies: `Store::publish` (proxy/policy/store.cc) copies the namespace map of the "
      "previous snapshot (1,000 entries, a string and a reference count each) and rebuilds the index of the one "
      "namespace that changed (10 policies).\n");
  absl::StrAppend(
      &out, "- **A change, 10,000 selector policies in one namespace: ", ms(one.change_p50),
      " (p50).** This is the cost that grows with the policies: `Store::publish` rebuilds the changed namespace's "
      "whole index -- every object of the namespace collected from the store's map, each filed again by "
      "`PolicySet::Bucket::build` (proxy/policy/policy_set.cc: a `labelKey` string, a hash-map insert, a vector "
      "per label) -- and the previous snapshot's index of that namespace, 10,000 vectors, is freed by whoever "
      "drops the last reference to it: here the upsert, in ferryd possibly a worker that held the old snapshot "
      "for a decision. A profile of these upserts (perf, 300 changes): the rebuild about 60 %, freeing the old "
      "index about 27 %, collecting the namespace's objects about 10 %. One change is harmless at this size; a "
      "burst is not: a controller re-applying 1,000 policies of that namespace as 1,000 watch events costs "
      "seconds of the control thread. The remedy is to publish per object, not per namespace: shard each "
      "namespace's label index (as proxy/workloads/registry.h shards its IP index) and let the Store hand "
      "publish the before and after of each changed object, so that a change copies one shard. Not done here.\n");
  absl::StrAppend(
      &out, "- **Initial load** (`Store::replace` of everything, what a policy file's change or a Kubernetes "
            "relist costs): ",
      absl::StrFormat("%.0f ms", spread.load_ms), " and ", absl::StrFormat("%.0f ms", one.load_ms),
      " for 10,000. Before this benchmark it was O(n^2) -- 235 ms and 244 ms on this machine (2026-12-01, one "
      "round) -- because `Store::admit` looked each object up in a vector of the batch's keys (and `replace` "
      "did again for each object held); the keys are a `std::set` now (proxy/policy/store.h, "
      "tests/unit/policy_store_test.cc).\n");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  size_t decisions = 200000, changes = 300;
  std::string report;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (flag == "--decisions") decisions = std::strtoul(argv[i + 1], nullptr, 10);
    else if (flag == "--changes") changes = std::strtoul(argv[i + 1], nullptr, 10);
    else if (flag == "--report") report = argv[i + 1];
    else {
      std::fprintf(stderr, "policy_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (rounds < 1 || decisions < 100 || changes < 10) {
    std::fprintf(stderr, "policy_bench: --rounds >= 1, --decisions >= 100, --changes >= 10\n");
    return 2;
  }
  std::string load_start = loadAverages();
  auto wall_start = Clock::now();
  std::mt19937_64 rng(20261201);
  std::vector<std::unique_ptr<Scenario>> scenarios;
  for (int n : {10, 1000, 10000}) scenarios.push_back(spread(n, rng));
  scenarios.push_back(oneNamespace(10000, rng));
  malloc_trim(0);
  for (auto& s : scenarios) {
    auto set = s->store->current();
    size_t read = 0;
    for (const auto& probe : s->probes) read += set->applicable(s->destinations[probe.destination]).size();
    s->applicable_mean = static_cast<double>(read) / s->probes.size();
  }
  for (const auto& s : scenarios) {
    std::printf("loaded %s: %zu AuthorizationPolicies, %zu PeerAuthentications, %zu workloads; %.1f ms, +%.1f MB RSS; "
                "a decision reads %.2f policies\n",
                s->name.c_str(), s->authorizations, s->peers, s->destinations.size(), s->load_ms, s->rss_kb / 1024.0,
                s->applicable_mean);
  }

  // The clock's own cost, timed the same way around nothing.
  std::vector<double> clock_ns(decisions);
  for (auto& v : clock_ns) {
    auto t0 = Clock::now();
    auto t1 = Clock::now();
    v = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  double clock_p50 = percentile(clock_ns, 0.5), clock_p99 = percentile(clock_ns, 0.99);

  for (int r = 0; r < rounds; ++r) {
    // Alternating order, so that no scenario always runs first or after the same one.
    for (size_t i = 0; i < scenarios.size(); ++i) {
      Scenario& s = *scenarios[r % 2 == 0 ? i : scenarios.size() - 1 - i];
      runRound(s, decisions, changes, rng, r);
      std::printf("round %d %-40s authorize p50 %4.0f ns p99 %5.0f ns (hot p50 %4.0f ns) | mtls p50 %4.0f ns p99 %5.0f "
                  "ns | upsert p50 %8.1f us p99 %8.1f us\n",
                  r + 1, s.name.c_str(), s.authorize_p50.back(), s.authorize_p99.back(), s.hot_p50.back(),
                  s.mtls_p50.back(), s.mtls_p99.back(), s.change_p50.back(), s.change_p99.back());
      std::fflush(stdout);
    }
  }
  std::string load_end = loadAverages();
  // The share of one core this process had: under 100 % means it waited for a CPU (another
  // process, or the host) while the rounds ran.
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  double cpu_s = usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  double wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();

  std::string table =
      "| AuthorizationPolicies | PeerAuthentications | policies read per decision | authorize p50 ns | authorize p99 "
      "ns | authorize p99.9 ns | authorize p50 ns, 24 destinations | mtls p50 ns | mtls p99 ns | upsert p50 µs | "
      "upsert p99 µs | upsert max µs | initial load ms | RSS MB |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& s : scenarios) {
    absl::StrAppend(&table, "| ", s->name, " | ", s->peers, " | ", absl::StrFormat("%.2f", s->applicable_mean), " | ",
                    absl::StrFormat("%.0f", median(s->authorize_p50)), " | ", range(s->authorize_p99, "%.0f"), " | ",
                    range(s->authorize_p999, "%.0f"), " | ", absl::StrFormat("%.0f", median(s->hot_p50)), " | ",
                    absl::StrFormat("%.0f", median(s->mtls_p50)), " | ", range(s->mtls_p99, "%.0f"), " | ",
                    absl::StrFormat("%.1f", median(s->change_p50)), " | ", range(s->change_p99, "%.1f"), " | ",
                    range(s->change_max, "%.0f"), " | ", absl::StrFormat("%.0f", s->load_ms), " | ",
                    absl::StrFormat("%.1f", s->rss_kb / 1024.0), " |\n");
  }
  std::printf("\n%s\nclock overhead (two steady_clock::now() around nothing): p50 %.0f ns, p99 %.0f ns\n",
              table.c_str(), clock_p50, clock_p99);
  if (report.empty()) return 0;

  utsname un{};
  ::uname(&un);
  std::string cpu = readFirstLine("/proc/cpuinfo", "model name");
  cpu = cpu.substr(cpu.find(':') + 2);
  double mem_gib = std::strtod(readFirstLine("/proc/meminfo", "MemTotal:").c_str() + 9, nullptr) / (1 << 20);
  std::string source = FERRY_SOURCE_DIR;
  std::string commit = commandOutput("git -C '" + source + "' rev-parse --short HEAD 2>/dev/null");
  if (commit.empty()) commit = "unknown";
  if (!commandOutput("git -C '" + source + "' status --porcelain --untracked-files=no -- proxy/policy 2>/dev/null").empty()) {
    commit += " (proxy/policy with uncommitted changes)";
  }
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));

  std::ofstream out(report);
  out << "# Authorization: cost per connection and per policy change\n\n"
      << "Generated by `tests/bench/policy_bench` (" << rounds << " rounds, " << decisions
      << " decisions per round and scenario, " << changes << " changes); do not edit by hand.\n"
      << "A decision runs on a worker for every inbound connection (HBONE and plaintext); a change runs on "
         "the control thread. Why a decision reads only the policies that can apply: proxy/policy/policy_set.h.\n\n"
      << "## Machine\n\n"
      << "- " << date << "; ferry " << commit << ", RelWithDebInfo (-O2)\n"
      << "- " << cpu << ", " << commandOutput("nproc") << " cores, " << absl::StrFormat("%.1f", mem_gib)
      << " GiB; kernel " << un.release << "\n"
      << "- load average (1, 5, 15 min) at the start " << load_start << ", at the end " << load_end
      << "; the program had " << absl::StrFormat("%.0f", 100 * cpu_s / wall_s)
      << " % of a core over the run (CPU time / wall time, load included): the machine is shared, and a tail "
         "is where that shows\n\n"
      << "## Method\n\n"
      << "- **Scenarios.** *Spread*: 10 AuthorizationPolicies per namespace (10, 100 and 1,000 namespaces): two "
         "namespace-wide (an ALLOW of the namespace's own principals by prefix, a DENY of port 22) and eight with "
         "a selector (ALLOWs by exact principals and a port, by source namespaces and two ports, by an ipBlock, "
         "by a principal prefix or an ipBlock and a port in two rules, by two principals and a port with a "
         "two-label selector; DENYs by a principal suffix and by an ipBlock with notPorts; one AUDIT by "
         "notNamespaces); a mesh-wide STRICT PeerAuthentication in the root namespace, a selector "
         "PeerAuthentication with a port-level mode in every namespace and a namespace-wide one in every other. "
         "12 workloads per namespace (apps svc-0 to svc-11; svc-10 and svc-11 are selected by no policy). "
         "*One namespace*: 10,000 policies in one namespace, each selecting its own `app` label (70 % ALLOW, "
         "30 % DENY; principals and a port, or an ipBlock), 1,000 selector PeerAuthentications, 11,000 "
         "workloads. Every workload has five labels (app, version, pod-template-hash, tier, team).\n"
      << "- **Requests.** " << kProbes << " random ones per scenario, cycled: a random destination workload; 90 % "
         "with a principal (a third from the destination's namespace, one in twenty a `debug` service account), "
         "10 % plaintext; source IPs mostly in 10/8, 3 % in 192.168/16; port 8080 (60 %), 9090, 443, 22, 5432.\n"
      << "- **Per decision.** One call timed alone with `steady_clock` (the clock's own cost around nothing: p50 "
      << absl::StrFormat("%.0f", clock_p50) << " ns, p99 " << absl::StrFormat("%.0f", clock_p99)
      << " ns, included in every figure): `PolicySet::authorize(destination, request)` with its Decision's "
         "destruction, and `PolicySet::mtls(destination, port, PERMISSIVE)`, on one snapshot, after a warm-up "
         "pass. Taking the snapshot (`Store::current()`, a mutex and a reference count) is not in it.\n"
      << "- **Per change.** `Store::upsert` of one AuthorizationPolicy (a random one, its first rule with one "
         "port more or a different one; built before the timing), which publishes a new snapshot: the changed "
         "namespace's index rebuilt, the other namespaces shared with the previous snapshot, which is freed in "
         "the same call (no worker holds it here). No listener is subscribed: ferryd's re-judging of live "
         "connections after a change is not in it.\n"
      << "- **Rounds.** Every scenario once per round, the order reversed every other round. A cell is the "
         "median of the rounds' p50s, and the range (lowest–highest) of the rounds' p99s (and p99.9s, and "
         "maxima): one p99 from one round on a shared 2-core machine says little; the range says how much of "
         "it is the machine. Load time and RSS are of the single initial `Store::replace`. Steps of about 25 µs "
         "in a p99 or p99.9, which come and go between rounds and show with 10 policies too, are the virtual "
         "machine (interrupts, time stolen by the host), not the code.\n\n"
      << "## Results\n\n"
      << table << "\n"
      << findings(scenarios) << "\n"
      << "## Running it\n\n"
      << "```sh\nbuild/default/tests/bench/policy_bench --rounds " << rounds << " --decisions " << decisions
      << " --changes " << changes << " --report docs/benchmarks/policy.md\n```\n";
  std::printf("wrote %s\n", report.c_str());
  return 0;
}
