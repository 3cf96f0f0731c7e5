#include "proxy/cni/api.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>

#include "proxy/workloads/enrolment.h"

namespace ferry::cni {
namespace json = boost::json;
namespace {

const json::value* path(const json::value& v, std::initializer_list<std::string_view> keys) {
  const json::value* at = &v;
  for (auto key : keys) {
    if (!at->is_object()) return nullptr;
    at = at->get_object().if_contains(key);
    if (at == nullptr) return nullptr;
  }
  return at;
}

std::string stringAt(const json::value& v, std::initializer_list<std::string_view> keys) {
  const json::value* at = path(v, keys);
  return at != nullptr && at->is_string() ? std::string(at->get_string()) : std::string();
}

// RFC 4648 base64, padding optional; false on any other byte.
bool decodeBase64(std::string_view in, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; ++i) {
    int v = value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  for (; i < in.size(); ++i) {
    if (in[i] != '=') return false;
  }
  return true;
}

const std::string* label(const json::value& object, const char* key, std::string& storage) {
  const json::value* v = path(object, {"metadata", "labels", key});
  if (v == nullptr || !v->is_string()) return nullptr;
  storage = std::string(v->get_string());
  return &storage;
}

std::string describe(const char* what, const std::string* value) {
  return std::string(what) + "=" + (value == nullptr ? "(none)" : *value);
}

}  // namespace

std::variant<ApiAccess, std::string> parseApiAccess(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(text.data(), text.size()), ec);
  if (ec || !v.is_object()) return std::string("not a JSON kubeconfig");
  const json::value* clusters = path(v, {"clusters"});
  const json::value* users = path(v, {"users"});
  if (clusters == nullptr || !clusters->is_array() || clusters->get_array().empty()) return std::string("no cluster");
  if (users == nullptr || !users->is_array() || users->get_array().empty()) return std::string("no user");
  const json::value& cluster = clusters->get_array()[0];
  const json::value& user = users->get_array()[0];
  std::string server = stringAt(cluster, {"cluster", "server"});
  constexpr std::string_view kScheme = "https://";
  if (server.compare(0, kScheme.size(), kScheme) != 0) return "server '" + server + "' is not an https URL";
  std::string_view rest = std::string_view(server).substr(kScheme.size());
  rest = rest.substr(0, rest.find('/'));
  ApiAccess a;
  if (!rest.empty() && rest.front() == '[') {  // [v6]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return "server '" + server + "' has an unclosed [";
    a.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return "server '" + server + "' has text after its address";
      a.port = std::string(rest.substr(1));
    }
  } else {
    size_t colon = rest.rfind(':');
    a.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) a.port = std::string(rest.substr(colon + 1));
  }
  if (a.host.empty() || a.port.empty() || a.port.find_first_not_of("0123456789") != std::string::npos) {
    return "server '" + server + "' is not https://host[:port]";
  }
  std::string ca = stringAt(cluster, {"cluster", "certificate-authority-data"});
  if (ca.empty() || !decodeBase64(ca, a.ca_pem)) return std::string("no certificate-authority-data in base64");
  a.token = stringAt(user, {"user", "token"});
  if (a.token.empty()) return std::string("no user token");
  return a;
}

bool validObjectName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  return name.front() != '-' && name.front() != '.';
}

std::string podPath(std::string_view ns, std::string_view name) {
  return "/api/v1/namespaces/" + std::string(ns) + "/pods/" + std::string(name);
}

std::string namespacePath(std::string_view ns) { return "/api/v1/namespaces/" + std::string(ns); }

std::variant<ApiReply, std::string> parseHttpResponse(std::string_view raw) {
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.substr(0, 9) != "HTTP/1.1 " && raw.substr(0, 9) != "HTTP/1.0 ") return std::string("not an HTTP answer");
  if (head_end == std::string_view::npos) return std::string("the answer's header is cut");
  ApiReply r;
  std::string_view code = raw.substr(9, 3);
  if (code.size() != 3 || code.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::string("the answer has no status code");
  }
  r.status = std::stoi(std::string(code));
  std::string_view head = raw.substr(0, head_end);
  std::string_view body = raw.substr(head_end + 4);
  bool chunked = false;
  long long length = -1;
  for (size_t at = head.find("\r\n"); at != std::string_view::npos;) {
    size_t next = head.find("\r\n", at + 2);
    std::string line(head.substr(at + 2, next == std::string_view::npos ? std::string_view::npos : next - at - 2));
    at = next;
    for (auto& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto value = [&](std::string_view name) -> std::string {
      if (line.compare(0, name.size(), name) != 0) return "";
      std::string v = line.substr(name.size());
      v.erase(0, v.find_first_not_of(' '));
      return v;
    };
    if (value("transfer-encoding:").find("chunked") != std::string::npos) chunked = true;
    if (std::string v = value("content-length:"); !v.empty()) {
      if (v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12) return std::string("a bad Content-Length");
      length = std::stoll(v);
    }
  }
  if (chunked) {
    while (true) {
      size_t eol = body.find("\r\n");
      if (eol == std::string_view::npos) return std::string("the chunked body is cut");
      std::string size_text(body.substr(0, std::min(eol, body.find(';'))));
      if (size_text.empty() || size_text.size() > 8 || size_text.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        return std::string("a bad chunk size");
      }
      size_t size = std::stoul(size_text, nullptr, 16);
      if (size == 0) break;
      if (body.size() < eol + 2 + size + 2) return std::string("the chunked body is cut");
      r.body.append(body.substr(eol + 2, size));
      body = body.substr(eol + 2 + size + 2);
    }
  } else if (length >= 0) {
    if (body.size() < static_cast<size_t>(length)) return std::string("the body is shorter than its Content-Length");
    r.body = std::string(body.substr(0, static_cast<size_t>(length)));
  } else {
    r.body = std::string(body);
  }
  return r;
}

std::variant<Membership, std::string> decideMembership(const ApiReply& pod, const ApiReply& ns,
                                                       std::string_view pod_uid, bool istio_ambient) {
  auto parse = [](const ApiReply& r, const char* kind, json::value& out) -> std::string {
    if (r.status != 200) {
      std::string why = std::string("the API server answered ") + std::to_string(r.status) + " for the " +
                        (std::string_view(kind) == "Pod" ? "pod" : "namespace");
      if (r.status == 401 || r.status == 403) why += " (the plugin's credentials are expired or not allowed)";
      if (r.status == 404) why += " (not there)";
      return why;
    }
    boost::system::error_code ec;
    out = json::parse(json::string_view(r.body.data(), r.body.size()), ec);
    if (ec || stringAt(out, {"kind"}) != kind) return std::string("the API server's answer is not a ") + kind;
    return "";
  };
  json::value p, n;
  if (auto why = parse(pod, "Pod", p); !why.empty()) return why;
  if (auto why = parse(ns, "Namespace", n); !why.empty()) return why;
  std::string uid = stringAt(p, {"metadata", "uid"});
  if (!pod_uid.empty() && uid != pod_uid) {
    return "the API server's pod of that name has uid " + uid + ", the sandbox is for " + std::string(pod_uid);
  }
  if (stringAt(p, {"metadata", "namespace"}) != stringAt(n, {"metadata", "name"})) {
    return std::string("the pod and the namespace the API server answered do not match");
  }
  std::string pf, pi, nf, ni;
  workloads::EnrolmentLabels l{label(p, workloads::kFerryLabel, pf), label(p, workloads::kIstioLabel, pi),
                               label(n, workloads::kFerryLabel, nf), label(n, workloads::kIstioLabel, ni)};
  Membership m;
  m.enrolled = workloads::enrolled(l, istio_ambient);
  m.why = "pod " + describe(workloads::kFerryLabel, l.pod_ferry) + ", namespace " +
          describe(workloads::kFerryLabel, l.namespace_ferry);
  if (istio_ambient) {
    m.why += "; pod " + describe(workloads::kIstioLabel, l.pod_istio) + ", namespace " +
             describe(workloads::kIstioLabel, l.namespace_istio);
  }
  return m;
}

}  // namespace ferry::cni
