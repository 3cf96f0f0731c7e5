#include "proxy/identity/spiffe_id.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/identity/string_compat.h"

namespace ferry::identity {
namespace {

// IDs reach error messages from peer certificates: quote, escape and shorten them so a
// hostile SAN cannot forge log lines or flood them.
constexpr size_t kMaxQuotedBytes = 128;

std::string quoted(std::string_view text) {
  std::string out = absl::CHexEscape(toAbsl(text.substr(0, kMaxQuotedBytes)));
  if (text.size() > kMaxQuotedBytes) absl::StrAppend(&out, "...");
  return absl::StrCat("\"", out, "\"");
}

std::string printable(char c) { return absl::CHexEscape(absl::string_view(&c, 1)); }

bool isTrustDomainChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

bool isPathChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '-' || c == '_';
}

// Returns the rule the trust domain breaks, or "" when it is valid.
std::string trustDomainProblem(std::string_view td) {
  if (td.empty()) return "trust domain is empty (SPIFFE-ID §2.1)";
  if (td.size() > kMaxTrustDomainBytes) {
    return absl::StrCat("trust domain is longer than ", kMaxTrustDomainBytes,
                        " bytes (SPIFFE-ID §2.1)");
  }
  if (td.front() == '[') return "trust domain must not be an IPv6 literal (SPIFFE-ID §2.1)";
  if (absl::StrContains(toAbsl(td), '@')) return "trust domain must not contain userinfo (SPIFFE-ID §2.1)";
  if (absl::StrContains(toAbsl(td), ':')) return "trust domain must not contain a port or ':' (SPIFFE-ID §2.1)";
  if (absl::StrContains(toAbsl(td), '%')) return "trust domain must not be percent-encoded (SPIFFE-ID §2.1)";
  for (char c : td) {
    if (c >= 'A' && c <= 'Z') return "trust domain must be lowercase (SPIFFE-ID §2.1)";
    if (!isTrustDomainChar(c)) {
      return absl::StrCat("character '", printable(c),
                          "' is not allowed in a trust domain, only [a-z0-9.-_] (SPIFFE-ID §2.1)");
    }
  }
  return "";
}

std::string pathProblem(std::string_view path) {
  if (path.empty()) return "";  // a trust-domain ID
  // path starts with '/': walk the segments after it.
  size_t start = 1;
  while (true) {
    size_t end = path.find('/', start);
    std::string_view segment =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    bool last = end == std::string_view::npos;
    if (segment.empty()) {
      return last ? "path must not end with '/' (SPIFFE-ID §2.2)"
                  : "path must not contain empty segments (SPIFFE-ID §2.2)";
    }
    if (segment == "." || segment == "..") {
      return "path must not contain '.' or '..' segments (SPIFFE-ID §2.2)";
    }
    if (absl::StrContains(toAbsl(segment), '%')) return "path must not be percent-encoded (SPIFFE-ID §2.2)";
    for (char c : segment) {
      if (!isPathChar(c)) {
        return absl::StrCat("character '", printable(c),
                            "' is not allowed in a path, only [a-zA-Z0-9.-_] (SPIFFE-ID §2.2)");
      }
    }
    if (last) return "";
    start = end + 1;
  }
}

}  // namespace

absl::Status validateTrustDomain(std::string_view td) {
  std::string problem = trustDomainProblem(td);
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("invalid trust domain ", quoted(td), ": ", problem));
}

absl::StatusOr<SpiffeId> SpiffeId::parse(std::string_view uri) {
  auto invalid = [&](std::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat("invalid SPIFFE ID ", quoted(uri), ": ", toAbsl(rule)));
  };
  if (uri.empty()) return invalid("is empty");
  if (uri.size() > kMaxSpiffeIdBytes) {
    return invalid(absl::StrCat("longer than ", kMaxSpiffeIdBytes, " bytes (SPIFFE-ID §2.3)"));
  }
  size_t scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos) return invalid("scheme must be 'spiffe://' (SPIFFE-ID §2)");
  // SPIFFE-ID §2.4: the scheme is case-insensitive when parsing; we always emit lowercase.
  if (!absl::EqualsIgnoreCase(toAbsl(uri.substr(0, scheme_end)), "spiffe")) {
    return invalid("scheme must be 'spiffe' (SPIFFE-ID §2)");
  }
  std::string_view rest = uri.substr(scheme_end + 3);
  if (absl::StrContains(toAbsl(rest), '#')) return invalid("must not have a fragment (SPIFFE-ID §2)");
  if (absl::StrContains(toAbsl(rest), '?')) return invalid("must not have a query (SPIFFE-ID §2)");

  size_t slash = rest.find('/');
  std::string_view td = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (std::string problem = trustDomainProblem(td); !problem.empty()) return invalid(problem);
  if (std::string problem = pathProblem(path); !problem.empty()) return invalid(problem);
  return SpiffeId(std::string(td), std::string(path));
}

SpiffeId SpiffeId::forWorkload(std::string_view trust_domain, std::string_view ns,
                               std::string_view sa) {
  return SpiffeId(std::string(trust_domain), absl::StrCat("/ns/", toAbsl(ns), "/sa/", toAbsl(sa)));
}

absl::StatusOr<WorkloadName> workloadName(const SpiffeId& id) {
  // "/ns/<namespace>/sa/<service account>": five parts split at '/', the first one empty.
  std::vector<std::string> parts = absl::StrSplit(toAbsl(id.path()), '/');
  if (parts.size() != 5 || !parts[0].empty() || parts[1] != "ns" || parts[3] != "sa" || parts[2].empty() ||
      parts[4].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "identity ", id.str(), " is not of the form spiffe://<td>/ns/<namespace>/sa/<service-account>"));
  }
  return WorkloadName{std::move(parts[2]), std::move(parts[4])};
}

}  // namespace ferry::identity
