#include "proxy/ferryctl/admin_render.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "proxy/ferryctl/json_read.h"

namespace ferry::ferryctl {
namespace {

namespace json = boost::json;

std::string strings(const json::array& items, absl::string_view separator) {
  std::vector<std::string> out;
  for (const auto& item : items) out.push_back(item.is_string() ? std::string(item.get_string()) : json::serialize(item));
  return absl::StrJoin(out, separator);
}

std::string yesNo(bool b) { return b ? "yes" : "no"; }

// "timeouts.connect: 10s" for every leaf of `o`, in the order ferryd sent them.
void flatten(const json::object& o, const std::string& prefix, std::vector<std::vector<std::string>>& rows) {
  for (const auto& [key, value] : o) {
    std::string name = prefix.empty() ? std::string(key) : absl::StrCat(prefix, ".", std::string(key));
    if (value.is_object()) {
      flatten(value.get_object(), name, rows);
    } else if (value.is_array()) {
      rows.push_back({name, absl::StrCat("[", strings(value.get_array(), ", "), "]")});
    } else if (value.is_string()) {
      rows.push_back({name, value.get_string().empty() ? "\"\"" : std::string(value.get_string())});
    } else {
      rows.push_back({name, json::serialize(value)});
    }
  }
}

}  // namespace

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string formatAge(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return absl::StrCat(seconds, "s");
  if (seconds < 3600) return absl::StrFormat("%dm%02ds", seconds / 60, seconds % 60);
  if (seconds < 86400) return absl::StrFormat("%dh%02dm", seconds / 3600, seconds % 3600 / 60);
  return absl::StrFormat("%dd%02dh", seconds / 86400, seconds % 86400 / 3600);
}

std::string formatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, units[unit]);
}

absl::StatusOr<std::string> renderStatus(absl::string_view body) {
  auto o = parseObject(body, "/status");
  if (!o.ok()) return o.status();
  if (!o->contains("ready")) return absl::DataLossError("ferryd's answer to /status has no 'ready'");
  std::string state = flag(*o, "ready") ? "ready" : absl::StrCat("not ready (", text(*o, "reason", "?"), ")");
  std::vector<std::vector<std::string>> rows = {
      {"pid:", number(*o, "pid")},
      {"uptime:", formatAge(integer(*o, "uptime_seconds"))},
      {"workers:", number(*o, "workers")},
      {"connections:", absl::StrCat(number(*o, "connections_active"), " active")},
      {"datapath:", text(*o, "datapath", "?")},
      {"log level:", text(*o, "log_level", "?")}};
  // While an upgrade's previous generation still carries connections (docs/operations.md).
  if (const auto* h = o->if_contains("handover"); h != nullptr && h->is_object()) {
    if (const auto* p = h->as_object().if_contains("previous"); p != nullptr && p->is_object()) {
      const auto& prev = p->as_object();
      rows.push_back({"previous generation:",
                        absl::StrCat(prev.contains("pod") ? absl::StrCat("pod ", text(prev, "pod"), ", ") : "",
                                     "pid ", number(prev, "pid"), ", ", number(prev, "connections_active"),
                                     " connections active, reset after ", formatAge(integer(prev, "deadline_seconds")))});
    }
  }
  return absl::StrCat("ferryd ", text(*o, "version", "?"), " on node ", text(*o, "node", "?"), ": ", state, "\n",
                      table(rows));
}

absl::StatusOr<std::string> renderWorkloads(absl::string_view body) {
  auto o = parseObject(body, "/workloads");
  if (!o.ok()) return o.status();
  if (!o->contains("workloads")) return absl::DataLossError("ferryd's answer to /workloads has no 'workloads'");
  std::vector<std::vector<std::string>> rows = {{"NAMESPACE/NAME", "NODE", "IPS", "IDENTITY", "HBONE", "LOCAL"}};
  for (const auto& item : list(*o, "workloads")) {
    if (!item.is_object()) continue;
    const auto& w = item.get_object();
    rows.push_back({absl::StrCat(text(w, "namespace"), "/", text(w, "name")), text(w, "node"),
                    strings(list(w, "ips"), ","), text(w, "identity"), yesNo(flag(w, "hbone")),
                    yesNo(flag(w, "local"))});
  }
  return absl::StrCat(rows.size() > 1 ? table(rows) : "", plural(integer(*o, "count"), "workload", "workloads"),
                      ", ", number(*o, "local"), " on this node\n");
}

absl::StatusOr<std::string> renderCerts(absl::string_view body) {
  auto o = parseObject(body, "/certs");
  if (!o.ok()) return o.status();
  if (!o->contains("roots")) return absl::DataLossError("ferryd's answer to /certs has no 'roots'");
  std::string out = absl::StrCat("source: ", text(*o, "source", "?"), ", trust domain ", text(*o, "trust_domain", "?"),
                                 ", ", flag(*o, "ready") ? "ready" : absl::StrCat("not ready (", text(*o, "reason"), ")"),
                                 "\n");
  if (o->contains("ca_generation")) absl::StrAppend(&out, "CA generation: ", number(*o, "ca_generation"), "\n");
  if (o->contains("bundle_error")) absl::StrAppend(&out, "trust bundle: ", text(*o, "bundle_error"), "\n");
  std::vector<std::vector<std::string>> roots = {{"ROOT", "SERIAL", "NOT BEFORE", "NOT AFTER"}};
  for (const auto& item : list(*o, "roots")) {
    if (!item.is_object()) continue;
    const auto& c = item.get_object();
    roots.push_back({text(c, "subject"), text(c, "serial"), text(c, "not_before"), text(c, "not_after")});
  }
  absl::StrAppend(&out, "\n", table(roots));
  std::vector<std::vector<std::string>> certs = {{"IDENTITY", "SERIAL", "NOT BEFORE", "NOT AFTER"}};
  for (const auto& item : list(*o, "certificates")) {
    if (!item.is_object()) continue;
    const auto& c = item.get_object();
    if (c.contains("error")) {
      certs.push_back({text(c, "identity"), "-", "-", absl::StrCat("error: ", text(c, "error"))});
    } else {
      certs.push_back({text(c, "identity"), text(c, "serial"), text(c, "not_before"), text(c, "not_after")});
    }
  }
  absl::StrAppend(&out, "\n", certs.size() > 1 ? table(certs) : "no workload certificates held\n");
  return out;
}

static std::string clockTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "?";
  return absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string closedRows(const boost::json::array& closed) {
  std::vector<std::vector<std::string>> rows = {
      {"CLOSED", "DIRECTION", "REASON", "SOURCE", "DESTINATION", "LASTED", "SENT", "RECEIVED", "DETAIL"}};
  for (const auto& item : closed) {
    if (!item.is_object()) continue;
    const auto& c = item.get_object();
    std::string detail = text(c, "detail");
    if (std::string policy = text(c, "policy"); !policy.empty()) detail = detail.empty() ? policy : detail + "; " + policy;
    rows.push_back({clockTime(integer(c, "time_unix_ms")), text(c, "direction"), text(c, "reason"), text(c, "source"),
                    text(c, "destination"), absl::StrCat(integer(c, "duration_ms"), "ms"),
                    formatBytes(static_cast<uint64_t>(integer(c, "sent_bytes"))),
                    formatBytes(static_cast<uint64_t>(integer(c, "received_bytes"))), detail.empty() ? "-" : detail});
  }
  return rows.size() > 1 ? table(rows) : "";
}

static absl::StatusOr<std::string> renderClosed(const boost::json::object& o) {
  const auto& per_worker = member(o, "per_worker");
  int64_t omitted = integer(o, "omitted");
  return absl::StrCat(closedRows(list(o, "connections")), plural(integer(o, "total"), "connection", "connections"),
                      " closed recently (each worker keeps its last ", number(per_worker, "failures"), " failed and ",
                      number(per_worker, "successes"), " successful ones)",
                      omitted > 0 ? absl::StrCat(", ", omitted, " not shown (--limit)") : "", "; times UTC\n");
}

absl::StatusOr<std::string> renderConnections(absl::string_view body) {
  auto o = parseObject(body, "/connections");
  if (!o.ok()) return o.status();
  if (!o->contains("connections")) return absl::DataLossError("ferryd's answer to /connections has no 'connections'");
  if (text(*o, "state") == "closed") return renderClosed(*o);
  std::vector<std::vector<std::string>> rows = {
      {"DIRECTION", "SOURCE", "DESTINATION", "PEER", "AGE", "SENT", "RECEIVED"}};
  for (const auto& item : list(*o, "connections")) {
    if (!item.is_object()) continue;
    const auto& c = item.get_object();
    std::string peer = text(c, "peer_identity");
    rows.push_back({text(c, "direction"), text(c, "source"), text(c, "destination"), peer.empty() ? "-" : peer,
                    formatAge(integer(c, "age_ms") / 1000),
                    formatBytes(static_cast<uint64_t>(integer(c, "sent_bytes"))),
                    formatBytes(static_cast<uint64_t>(integer(c, "received_bytes")))});
  }
  int64_t omitted = integer(*o, "omitted");
  return absl::StrCat(rows.size() > 1 ? table(rows) : "", plural(integer(*o, "total"), "connection", "connections"),
                      " open", omitted > 0 ? absl::StrCat(", ", omitted, " not shown (--limit)") : "", "\n");
}

absl::StatusOr<std::string> renderConfig(absl::string_view body) {
  auto o = parseObject(body, "/config_dump");
  if (!o.ok()) return o.status();
  if (!o->contains("config")) return absl::DataLossError("ferryd's answer to /config_dump has no 'config'");
  std::vector<std::vector<std::string>> rows;
  flatten(member(*o, "config"), "", rows);
  std::string out = table(rows);
  std::vector<std::vector<std::string>> runtime;
  flatten(member(*o, "runtime"), "", runtime);
  flatten(member(*o, "reload"), "reload", runtime);
  absl::StrAppend(&out, "\nin force:\n", table(runtime));
  const auto& policies = member(*o, "policies");
  absl::StrAppend(&out, "workloads: ", number(member(*o, "workloads"), "count"), " (",
                  number(member(*o, "workloads"), "local"), " on this node); certificates held: ",
                  list(member(*o, "certificates"), "certificates").size(), "; policies: ",
                  list(policies, "policies").size(), " (", list(policies, "refused").size(), " refused); datapath: ",
                  flag(member(*o, "datapath"), "enabled") ? text(member(*o, "datapath"), "injection") : "disabled",
                  "\n");
  return out;
}

absl::StatusOr<std::string> renderLogLevel(absl::string_view body) {
  auto o = parseObject(body, "/logging");
  if (!o.ok()) return o.status();
  std::string level = text(*o, "level");
  if (level.empty()) return absl::DataLossError("ferryd's answer to /logging has no 'level'");
  if (o->contains("previous")) return absl::StrCat("log level: ", level, " (was ", text(*o, "previous"), ")\n");
  return absl::StrCat("log level: ", level, "\n");
}

}  // namespace ferry::ferryctl
