// ferryctl: operator tool (docs/operations.md, "ferryctl"): a small CA for labs and tests,
// netkit pairs for the lab, and questions to ferryd's admin endpoint (its state, its
// connections, its policies; its log level).
// Usage in kUsage below.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <boost/json/serialize.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proxy/common/duration.h"
#include "proxy/common/log.h"
#include "proxy/common/readiness_file.h"
#include "proxy/rtnetlink/rtnetlink.h"
#include "proxy/ferryctl/admin_client.h"
#include "proxy/ferryctl/admin_render.h"
#include "proxy/ferryctl/explain.h"
#include "proxy/ferryctl/json_read.h"
#include "proxy/ferryctl/policy_render.h"
#include "proxy/ferryctl/remote.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/dir_cert_source.h"
#include "proxy/identity/svid.h"

namespace ferry::ferryctl {
namespace {

using identity::CertificateAuthority;
using identity::SpiffeId;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// policy check: ferryd would deny the connection (0 says it would allow it), so that a
// script can branch on the verdict without reading the output.
constexpr int kExitDenied = 3;
// No answer from ferryd: nothing listens at the admin address (ferryd is not running) or it
// cannot be reached. Apart from 1 so that a script can tell "ferryd is down" from "ferryd
// said no".
constexpr int kExitUnreachable = 4;

// ferryd's listen.admin default (docs/configuration.md); FERRY_ADMIN overrides it, --admin
// both.
constexpr char kDefaultAdmin[] = "127.0.0.1:15000";
constexpr char kAdminEnv[] = "FERRY_ADMIN";
// /connections lists this many by default (ferryd's own default).
constexpr char kDefaultConnectionsLimit[] = "1000";

// A root lives a year by default: long enough for a lab, short enough to exercise rotation.
constexpr char kDefaultCaLifetime[] = "8760h";
// 24 h, as ztunnel and the Istio agent use (docs/hbone.md, "TLS").
constexpr char kDefaultLeafLifetime[] = "24h";

constexpr char kUsage[] =
    "usage:\n"
    "  ferryctl ca init  --dir DIR --trust-domain TD [--lifetime 8760h] [--force]\n"
    "  ferryctl ca issue --ca DIR --out CERTDIR --namespace NS --service-account SA [--lifetime 24h]\n"
    "  ferryctl ca show  FILE\n"
    "  ferryctl ca intermediate --ca DIR --out DIR [--lifetime 720h] [--force]\n"
    "  ferryctl link netkit --name NAME --peer-name NAME [--peer-netns PATH] [--mode l2|l3]\n"
    "  ferryctl status      [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl workloads   [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl certs       [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl connections [--closed] [--limit N] [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl explain --from NAMESPACE/POD --to NAMESPACE/NAME:PORT|IP:PORT [--kubeconfig FILE]\n"
    "                   [--ferry-namespace NS] [-o text|json]\n"
    "  ferryctl explain --from IP --to IP:PORT [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl config      [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl log-level   [trace|debug|info|warn|error|off] [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl policy check --from NAMESPACE/WORKLOAD|IP|node --to NAMESPACE/WORKLOAD:PORT [--plaintext]\n"
    "                        [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl policy list  [--admin HOST:PORT] [-o text|json]\n"
    "  ferryctl probe --file FILE [--max-age 10s] [--live]\n"
    "probe reads ferryd's handover.readiness_file (a Kubernetes exec probe: it answers for the ferryd\n"
    "of its own container): 0 when the file is fresh and says ready (--live: fresh whatever it says).\n"
    "Every command but ca, link and probe asks ferryd's admin endpoint: --admin, else $FERRY_ADMIN, else\n"
    "127.0.0.1:15000 (policy check: on the node that runs the destination workload). With --node NAME\n"
    "or --pod NAMESPACE/NAME (the node that runs it) it asks that node's ferryd from anywhere instead,\n"
    "through the API server of --kubeconfig FILE ($KUBECONFIG, ~/.kube/config): it runs in the node's\n"
    "ferryd pod (--ferry-namespace, default ferry-system) as kubectl exec would. -o json prints\n"
    "ferryd's JSON answer as it is. Exit status: 0 done (policy check: allowed), 1 error (ferryd's\n"
    "error answer, or one ferryctl cannot read), 2 usage, 3 policy check: denied, 4 ferryd not\n"
    "running or not reachable at the admin address.\n";

struct Args {
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  std::vector<std::string> positional;
};

// --name VALUE, --name=VALUE and boolean --switch, and -o for --output (kubectl's
// spelling); anything else is a usage error.
bool parseArgs(const std::vector<std::string>& argv, const std::set<std::string>& value_flags,
               const std::set<std::string>& switch_flags, Args& out, std::string& error) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "-o" && value_flags.count("output") == 0) {
      error = "unknown flag -o";
      return false;
    }
    if (!absl::StartsWith(arg, "--") && arg != "-o") {
      out.positional.push_back(arg);
      continue;
    }
    std::string name = arg == "-o" ? "output" : arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (switch_flags.count(name) != 0) {
      if (has_value) {
        error = absl::StrCat("--", name, " takes no value");
        return false;
      }
      out.switches.insert(name);
      continue;
    }
    if (value_flags.count(name) == 0) {
      error = absl::StrCat("unknown flag --", name);
      return false;
    }
    if (!has_value) {
      if (i + 1 >= argv.size()) {
        error = absl::StrCat("--", name, " needs a value");
        return false;
      }
      value = argv[++i];
    }
    if (out.values.count(name) != 0) {
      error = absl::StrCat("--", name, " given twice");
      return false;
    }
    out.values[name] = value;
  }
  return true;
}

int usage(absl::string_view error) {
  std::fprintf(stderr, "ferryctl: %s\n%s", std::string(error).c_str(), kUsage);
  return kExitUsage;
}

int fail(absl::string_view error) {
  std::fprintf(stderr, "ferryctl: %s\n", std::string(error).c_str());
  return kExitFailure;
}

bool exists(const std::string& path) {
  struct stat st = {};
  return ::stat(path.c_str(), &st) == 0;
}

absl::StatusOr<std::chrono::seconds> parseLifetime(const std::string& text) {
  auto d = common::parseDuration(text);
  if (!d.ok()) return d.status();
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(*d);
  if (secs.count() < 1) return absl::InvalidArgumentError(absl::StrCat("--lifetime ", text, " is shorter than 1s"));
  return secs;
}

int caInit(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"dir", "trust-domain", "lifetime"}, {"force"}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  if (args.values.count("dir") == 0) return usage("ca init needs --dir");
  if (args.values.count("trust-domain") == 0) return usage("ca init needs --trust-domain");
  const std::string& dir = args.values["dir"];
  const std::string& td = args.values["trust-domain"];
  if (absl::Status s = identity::validateTrustDomain(td); !s.ok()) return usage(s.message());
  std::string lifetime_text = args.values.count("lifetime") ? args.values["lifetime"] : kDefaultCaLifetime;
  auto lifetime = parseLifetime(lifetime_text);
  if (!lifetime.ok()) return usage(lifetime.status().message());

  std::string cert_path = dir + "/ca.pem";
  std::string key_path = dir + "/ca.key";
  if ((exists(cert_path) || exists(key_path)) && args.switches.count("force") == 0) {
    return fail(absl::StrCat("a CA already exists in ", dir,
                             " (ca.pem/ca.key); pass --force to replace it, which invalidates every "
                             "certificate it issued"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  auto ca = CertificateAuthority::createRoot(td, *lifetime);
  if (!ca.ok()) return fail(ca.status().message());
  if (absl::Status s = ca->writePem(cert_path, key_path); !s.ok()) return fail(s.message());
  std::printf("wrote %s and %s: root CA for spiffe://%s, valid until %s\n", cert_path.c_str(),
              key_path.c_str(), td.c_str(),
              identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notAfter(ca->cert()))).c_str());
  return kExitOk;
}

int caIssue(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"ca", "out", "namespace", "service-account", "lifetime"}, {}, args, error)) {
    return usage(error);
  }
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  for (const char* required : {"ca", "out", "namespace", "service-account"}) {
    if (args.values.count(required) == 0) return usage(absl::StrCat("ca issue needs --", required));
  }
  std::string lifetime_text = args.values.count("lifetime") ? args.values["lifetime"] : kDefaultLeafLifetime;
  auto lifetime = parseLifetime(lifetime_text);
  if (!lifetime.ok()) return usage(lifetime.status().message());

  const std::string& ca_dir = args.values["ca"];
  const std::string& out = args.values["out"];
  auto ca = CertificateAuthority::load(ca_dir + "/ca.pem", ca_dir + "/ca.key");
  if (!ca.ok()) return fail(ca.status().message());
  SpiffeId id = SpiffeId::forWorkload(ca->trustDomain(), args.values["namespace"],
                                      args.values["service-account"]);
  if (auto parsed = SpiffeId::parse(id.str()); !parsed.ok()) {
    return usage(absl::StrCat("--namespace/--service-account: ", parsed.status().message()));
  }
  auto leaf = ca->issueLeaf(id, *lifetime);
  if (!leaf.ok()) return fail(leaf.status().message());
  // A CA that is not self-signed (an intermediate) must travel with the leaf.
  std::vector<X509*> chain;
  if (X509_check_issued(ca->cert(), ca->cert()) != X509_V_OK) chain.push_back(ca->cert());
  if (absl::Status s = identity::writeSvidFiles(out, id, *leaf, chain); !s.ok()) return fail(s.message());

  std::string bundle_path = out + "/bundle.pem";
  if (!exists(bundle_path)) {
    auto pem = identity::certToPem(ca->cert());
    if (!pem.ok()) return fail(pem.status().message());
    if (absl::Status s = identity::writeFileAtomic(bundle_path, *pem, 0644); !s.ok()) return fail(s.message());
    std::printf("wrote %s\n", bundle_path.c_str());
  }
  auto dir = identity::svidDirectory(out, id);
  std::printf("wrote %s/{cert.pem,key.pem} for %s, valid until %s\n", dir.ok() ? dir->c_str() : out.c_str(),
              id.str().c_str(),
              identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notAfter(leaf->cert.get()))).c_str());
  return kExitOk;
}

int caShow(const std::vector<std::string>& argv) {
  if (argv.size() != 1 || absl::StartsWith(argv[0], "--")) return usage("ca show takes exactly one FILE");
  auto certs = identity::loadCertsPem(argv[0]);
  if (!certs.ok()) return fail(certs.status().message());
  auto now = std::chrono::system_clock::now();
  for (size_t i = 0; i < certs->size(); ++i) {
    X509* cert = (*certs)[i].get();
    auto not_before = identity::asn1TimeToTimePoint(X509_get0_notBefore(cert));
    auto not_after = identity::asn1TimeToTimePoint(X509_get0_notAfter(cert));
    std::string validity = absl::StrCat(identity::formatTime(not_before), " .. ", identity::formatTime(not_after));
    if (now >= not_after) absl::StrAppend(&validity, " (EXPIRED)");
    if (now < not_before) absl::StrAppend(&validity, " (NOT YET VALID)");
    std::vector<std::string> uris;
    for (const std::string& uri : identity::uriSans(cert)) uris.push_back(absl::CHexEscape(uri));
    std::string role;
    if (X509_check_ca(cert) != 0) {
      role = "CA";
    } else if (auto id = identity::validateSvidLeaf(cert); id.ok()) {
      role = absl::StrCat("X.509-SVID leaf for ", id->str());
    } else {
      role = std::string(id.status().message());
    }
    std::string subject = identity::nameToString(X509_get_subject_name(cert));
    std::printf("certificate #%zu\n  subject:   %s\n  issuer:    %s\n  URI SANs:  %s\n  validity:  %s\n  role:      %s\n",
                i + 1, subject.empty() ? "(empty)" : subject.c_str(),
                identity::nameToString(X509_get_issuer_name(cert)).c_str(),
                uris.empty() ? "(none)" : absl::StrJoin(uris, ", ").c_str(), validity.c_str(), role.c_str());
  }
  return kExitOk;
}

// A per-node intermediate: ferryd issues its workloads' SVIDs from it (identity.source: ca),
// so a node's key can sign only for as long as the intermediate lives.
int caIntermediate(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"ca", "out", "lifetime"}, {"force"}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  for (const char* required : {"ca", "out"}) {
    if (args.values.count(required) == 0) return usage(absl::StrCat("ca intermediate needs --", required));
  }
  auto lifetime = parseLifetime(args.values.count("lifetime") ? args.values["lifetime"] : "720h");
  if (!lifetime.ok()) return usage(lifetime.status().message());
  const std::string& out = args.values["out"];
  if (exists(out + "/ca.pem") && args.switches.count("force") == 0) {
    return fail(absl::StrCat(out, "/ca.pem exists; pass --force to replace it"));
  }
  auto parent = CertificateAuthority::load(args.values["ca"] + "/ca.pem", args.values["ca"] + "/ca.key");
  if (!parent.ok()) return fail(parent.status().message());
  auto inter = parent->issueIntermediate(*lifetime);
  if (!inter.ok()) return fail(inter.status().message());
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return fail(absl::StrCat("creating ", out, ": ", ec.message()));
  if (absl::Status s = inter->writePem(out + "/ca.pem", out + "/ca.key"); !s.ok()) return fail(s.message());
  if (X509_check_issued(parent->cert(), parent->cert()) != X509_V_OK) {
    // The parent is an intermediate too: the chain up to the root travels in ca.pem.
    auto mine = identity::readFile(out + "/ca.pem");
    auto theirs = identity::certToPem(parent->cert());
    if (!mine.ok() || !theirs.ok()) return fail("cannot append the parent certificate");
    if (absl::Status s = identity::writeFileAtomic(out + "/ca.pem", *mine + *theirs, 0644); !s.ok()) {
      return fail(s.message());
    }
  }
  std::printf("wrote %s/ca.pem and %s/ca.key: intermediate CA for spiffe://%s, valid until %s\n", out.c_str(),
              out.c_str(), inter->trustDomain().c_str(),
              identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notAfter(inter->cert()))).c_str());
  return kExitOk;
}

// Creates a netkit pair (iproute2 6.1 cannot): the primary here, the peer in --peer-netns.
// The lab uses it for its pods and proxies; ferryd adopts such devices by their kind.
int linkNetkit(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"name", "peer-name", "peer-netns", "mode"}, {}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  for (const char* required : {"name", "peer-name"}) {
    if (args.values.count(required) == 0) return usage(absl::StrCat("link netkit needs --", required));
  }
  rtnetlink::NetkitPairSpec spec;
  spec.name = args.values["name"];
  spec.peer_name = args.values["peer-name"];
  std::string mode = args.values.count("mode") ? args.values["mode"] : "l2";
  if (mode == "l2") {
    spec.mode = rtnetlink::NetkitMode::kL2;
  } else if (mode == "l3") {
    spec.mode = rtnetlink::NetkitMode::kL3;
  } else {
    return usage(absl::StrCat("--mode must be l2 or l3, not '", mode, "'"));
  }
  int fd = -1;
  if (args.values.count("peer-netns")) {
    fd = ::open(args.values["peer-netns"].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(absl::StrCat("--peer-netns ", args.values["peer-netns"], ": ", strerror(errno)));
  }
  spec.peer_netns_fd = fd;
  absl::Status st = rtnetlink::createNetkitPair(spec);
  if (fd >= 0) ::close(fd);
  if (!st.ok()) return fail(st.message());
  std::printf("created netkit pair %s <-> %s (%s)\n", spec.name.c_str(), spec.peer_name.c_str(), mode.c_str());
  return kExitOk;
}

// What the admin commands share: --admin (or FERRY_ADMIN) and -o.
struct AdminRequest {
  common::HostPort admin;
  bool json = false;
};
absl::StatusOr<AdminRequest> adminRequest(Args& args) {
  AdminRequest out;
  const char* env = std::getenv(kAdminEnv);
  std::string address = args.values.count("admin")       ? args.values["admin"]
                        : env != nullptr && *env != '\0' ? std::string(env)
                                                         : std::string(kDefaultAdmin);
  auto admin = parseAdminAddress(address);
  if (!admin.ok()) return admin.status();
  out.admin = *admin;
  std::string output = args.values.count("output") ? args.values["output"] : "text";
  if (output != "text" && output != "json") {
    return absl::InvalidArgumentError(absl::StrCat("-o must be text or json, not '", output, "'"));
  }
  out.json = output == "json";
  return out;
}

// `method` `target`; the body of a 200 answer, else an error for the operator (ferryd's own
// message when it gave one). Unavailable: no answer came (kExitUnreachable).
absl::StatusOr<std::string> askFerryd(const AdminRequest& request, const std::string& target,
                                      absl::string_view method = "GET") {
  auto answer = adminCall(request.admin, method, target);
  if (!answer.ok()) return answer.status();
  if (answer->status != 200) {
    return absl::FailedPreconditionError(absl::StrCat("ferryd at ", common::formatHostPort(request.admin),
                                                      " refused the question: ",
                                                      errorMessage(answer->status, answer->body)));
  }
  return std::move(answer->body);
}

// The exit status of a failed question: ferryd down or out of reach, or anything else.
int failAsk(const absl::Status& status) {
  std::fprintf(stderr, "ferryctl: %s\n", std::string(status.message()).c_str());
  return absl::IsUnavailable(status) ? kExitUnreachable : kExitFailure;
}

using Render = absl::StatusOr<std::string> (*)(absl::string_view);

// A question whose answer is printed: ferryd's JSON with -o json, else `render` of it.
int showAnswer(const AdminRequest& request, const std::string& target, Render render, absl::string_view method = "GET") {
  auto body = askFerryd(request, target, method);
  if (!body.ok()) return failAsk(body.status());
  auto text = render(*body);
  if (!text.ok()) return fail(text.status().message());
  std::fputs(request.json ? body->c_str() : text->c_str(), stdout);
  return kExitOk;
}

// status, workloads, certs, config: no argument but --admin and -o.
int simpleQuestion(const std::vector<std::string>& argv, const std::string& target, Render render) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"admin", "output"}, {}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  auto request = adminRequest(args);
  if (!request.ok()) return usage(request.status().message());
  return showAnswer(*request, target, render);
}

int connections(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"admin", "output", "limit"}, {"closed"}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  auto request = adminRequest(args);
  if (!request.ok()) return usage(request.status().message());
  std::string limit = args.values.count("limit") ? args.values["limit"] : kDefaultConnectionsLimit;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(limit, &n) || n < 1) return usage(absl::StrCat("--limit '", limit, "' is not a positive number"));
  // --closed: the last connections each worker closed, with their close reasons.
  return showAnswer(*request, absl::StrCat("/connections?limit=", n, args.switches.count("closed") ? "&state=closed" : ""),
                    &renderConnections);
}

// log-level: shows the level; log-level LEVEL sets it.
// A probe whose period is 5 s and whose file is refreshed every second: 10 s of silence is
// a ferryd that hangs, not one that is slow.
constexpr char kDefaultProbeMaxAge[] = "10s";

int probe(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"file", "max-age"}, {"live"}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  if (args.values.count("file") == 0) return usage("probe needs --file");
  auto max_age = common::parseDuration(args.values.count("max-age") ? args.values["max-age"] : kDefaultProbeMaxAge);
  if (!max_age.ok()) return usage(absl::StrCat("--max-age: ", max_age.status().message()));
  auto verdict = common::probeReadinessFile(args.values["file"], *max_age, args.switches.count("live") != 0,
                                            std::chrono::system_clock::now());
  // The kubelet keeps a failed probe's output in the pod's events.
  std::printf("%s\n", verdict.message.c_str());
  return verdict.pass ? kExitOk : kExitFailure;
}

int logLevel(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"admin", "output"}, {}, args, error)) return usage(error);
  if (args.positional.size() > 1) return usage(absl::StrCat("unexpected argument ", args.positional[1]));
  auto request = adminRequest(args);
  if (!request.ok()) return usage(request.status().message());
  if (args.positional.empty()) return showAnswer(*request, "/logging", &renderLogLevel);
  const std::string& level = args.positional[0];
  if (auto parsed = common::parseLogLevel(level); !parsed.ok()) return usage(parsed.status().message());
  return showAnswer(*request, absl::StrCat("/logging?level=", level), &renderLogLevel, "POST");
}

// How ferryd would judge one connection: exit 0 allow, 3 deny.
int policyCheck(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"from", "to", "admin", "output"}, {"plaintext"}, args, error)) return usage(error);
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  for (const char* required : {"from", "to"}) {
    if (args.values[required].empty()) return usage(absl::StrCat("policy check needs --", required));
  }
  auto target = parseCheckTarget(args.values["to"]);
  if (!target.ok()) return usage(target.status().message());
  auto request = adminRequest(args);
  if (!request.ok()) return usage(request.status().message());
  auto body = askFerryd(*request, checkRequestTarget(args.values["from"], *target, args.switches.count("plaintext")));
  if (!body.ok()) return failAsk(body.status());
  auto verdict = renderCheck(*body);
  if (!verdict.ok()) return fail(verdict.status().message());
  std::fputs(request->json ? body->c_str() : verdict->text.c_str(), stdout);
  return verdict->allowed ? kExitOk : kExitDenied;
}

// The /explain answer of the ferryd at `request` about a connection from `source` to `target`.
NodeAnswer askExplain(const AdminRequest& request, const std::string& source, const std::string& target) {
  NodeAnswer answer;
  auto body = askFerryd(request, absl::StrCat("/explain?from=", source, "&to=", target));
  if (!body.ok()) {
    answer.error = std::string(body.status().message());
    return answer;
  }
  auto view = parseObject(*body, "/explain");
  if (!view.ok()) {
    answer.error = std::string(view.status().message());
    return answer;
  }
  answer.reached = true;
  answer.node = text(*view, "node");
  answer.view = std::move(*view);
  return answer;
}

// explain: what happens to a connection, and why it fails (docs/troubleshooting.md).
// --from NAMESPACE/POD asks the cluster (both nodes); --from IP asks the ferryd at --admin
// alone. --node-view prints that ferryd's /explain answer as it is (what the cluster form
// reads from each node).
int explain(const std::vector<std::string>& argv) {
  Args args;
  std::string error;
  if (!parseArgs(argv, {"from", "to", "admin", "output", "kubeconfig", "ferry-namespace"}, {"node-view"}, args, error)) {
    return usage(error);
  }
  if (!args.positional.empty()) return usage(absl::StrCat("unexpected argument ", args.positional[0]));
  for (const char* required : {"from", "to"}) {
    if (args.values[required].empty()) return usage(absl::StrCat("explain needs --", required));
  }
  std::string output = args.values.count("output") ? args.values["output"] : "text";
  if (output != "text" && output != "json") return usage(absl::StrCat("-o must be text or json, not '", output, "'"));
  const std::string& from = args.values["from"];
  const std::string& to = args.values["to"];
  if (from.find('/') != std::string::npos) {
    const size_t slash = from.find('/');
    if (slash == 0 || slash + 1 == from.size() || from.find('/', slash + 1) != std::string::npos) {
      return usage(absl::StrCat("--from ", from, ": NAMESPACE/POD or IP"));
    }
    if (args.values.count("admin") || args.switches.count("node-view")) {
      return usage("--from NAMESPACE/POD asks the cluster: --admin and --node-view go with --from IP");
    }
    return runExplain(args.values["kubeconfig"], args.values["ferry-namespace"], from, to, output == "json");
  }
  if (args.values.count("kubeconfig") || args.values.count("ferry-namespace")) {
    return usage("--kubeconfig and --ferry-namespace go with --from NAMESPACE/POD");
  }
  auto from_ip = common::parseIp(from);
  if (!from_ip.ok()) return usage(absl::StrCat("--from ", from, ": NAMESPACE/POD or IP"));
  auto to_address = common::parseHostPort(to);
  if (!to_address.ok()) return usage(absl::StrCat("--to ", to, ": with --from IP, an IP:PORT"));
  auto request = adminRequest(args);
  if (!request.ok()) return usage(request.status().message());
  ExplainEnds ends;
  ends.from = ends.from_ip = from_ip->to_string();
  ends.to = ends.to_address = common::formatHostPort(*to_address);
  if (args.switches.count("node-view")) {
    auto body = askFerryd(*request, absl::StrCat("/explain?from=", ends.from_ip, "&to=", ends.to_address));
    if (!body.ok()) return failAsk(body.status());
    std::printf("%s\n", body->c_str());
    return kExitOk;
  }
  NodeAnswer source = askExplain(*request, ends.from_ip, ends.to_address);
  if (!source.reached) {
    std::fprintf(stderr, "ferryctl: %s\n", source.error.c_str());
    return kExitUnreachable;
  }
  // This ferryd alone: the destination's view only when it runs here too.
  std::optional<NodeAnswer> destination;
  if (auto endpoint = pickEndpoint(source.view); endpoint && endpoint->node == source.node) {
    destination = askExplain(*request, ends.from_ip, endpoint->address);
  } else if (const auto& d = member(source.view, "destination"); flag(d, "known") && flag(d, "local")) {
    destination = source;
  }
  Explanation e = explainConnection(ends, source, destination);
  if (output == "json") {
    std::printf("%s\n", boost::json::serialize(explanationJson(ends, e, source, destination)).c_str());
  } else {
    std::fputs(renderExplanation(ends, e).c_str(), stdout);
  }
  return e.exit_code;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // explain takes --kubeconfig and --ferry-namespace itself, before or after the word: it
  // asks two nodes, not one.
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "explain") {
      std::vector<std::string> rest(args.begin() + i + 1, args.end());
      rest.insert(rest.end(), args.begin(), args.begin() + i);
      return explain(rest);
    }
    bool takes_value = args[i] == "--kubeconfig" || args[i] == "--ferry-namespace";
    if (!takes_value && !absl::StartsWith(args[i], "--kubeconfig=") && !absl::StartsWith(args[i], "--ferry-namespace=")) break;
    if (takes_value) ++i;
  }
  // --node / --pod: the same command, asked of that node's ferryd through the API server.
  auto remote = takeRemoteFlags(args);
  if (!remote.ok()) return usage(remote.status().message());
  if (remote->has_value()) {
    if (args.empty() || args[0] == "ca" || args[0] == "link" || args[0] == "probe") {
      return usage("--node and --pod go with the commands that ask ferryd (status, workloads, certs, ...)");
    }
    return runRemote(**remote, args);
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "link") {
    if (args.size() < 2 || args[1] != "netkit") return usage("link needs a subcommand: netkit");
    return linkNetkit(std::vector<std::string>(args.begin() + 2, args.end()));
  }
  if (args[0] == "policy") {
    std::vector<std::string> rest(args.begin() + std::min<size_t>(args.size(), 2), args.end());
    if (args.size() >= 2 && args[1] == "check") return policyCheck(rest);
    // The policies in force and the refused ones.
    if (args.size() >= 2 && args[1] == "list") return simpleQuestion(rest, "/policies", &renderList);
    return usage("policy needs a subcommand: check or list");
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "status") return simpleQuestion(rest, "/status", &renderStatus);
  if (args[0] == "workloads") return simpleQuestion(rest, "/workloads?format=json", &renderWorkloads);
  if (args[0] == "certs") return simpleQuestion(rest, "/certs?format=json", &renderCerts);
  if (args[0] == "config") return simpleQuestion(rest, "/config_dump", &renderConfig);
  if (args[0] == "connections") return connections(rest);
  if (args[0] == "log-level") return logLevel(rest);
  if (args[0] == "probe") return probe(rest);
  if (args[0] != "ca") return usage(absl::StrCat("unknown command '", args[0], "'"));
  if (args.size() < 2) return usage("ca needs a subcommand: init, issue, show or intermediate");
  rest.assign(args.begin() + 2, args.end());
  if (args[1] == "init") return caInit(rest);
  if (args[1] == "issue") return caIssue(rest);
  if (args[1] == "show") return caShow(rest);
  if (args[1] == "intermediate") return caIntermediate(rest);
  return usage(absl::StrCat("unknown subcommand 'ca ", args[1], "'"));
}

}  // namespace
}  // namespace ferry::ferryctl

int main(int argc, char** argv) { return ferry::ferryctl::run(argc, argv); }
