#include "proxy/k8s/session.h"

#include <openssl/ssl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proxy/common/file.h"
#include "proxy/common/strings.h"
#include "proxy/k8s/decode.h"
#include "proxy/k8s/http_stream.h"

namespace ferry::k8s {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using boost::system::error_code;
using internal::HttpStream;

// An error answer is a Status object of a few hundred bytes; more is not one.
constexpr size_t kMaxBody = 16u << 20;

absl::StatusOr<std::string> pemOrFile(const std::string& pem, const std::string& file, std::string_view what) {
  if (!pem.empty() || file.empty()) return pem;
  auto text = common::readFile(file);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("cannot read the ", common::toAbsl(what), ": ", text.status().message()));
  return text;
}

}  // namespace

std::string queryEscape(std::string_view value) {
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

namespace {

// The exit status a v4.channel.k8s.io Status names: Success is 0; a command that exited
// non-zero is Failure, reason NonZeroExitCode, with a cause {reason: ExitCode, message: N}.
absl::StatusOr<int> exitStatusOf(const std::string& status_json) {
  if (status_json.empty()) return absl::UnavailableError("the server closed the exec stream without a status");
  error_code ec;
  json::value v = json::parse(status_json, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  if (o == nullptr) return absl::UnavailableError("the exec status is not JSON");
  const json::value* status = o->if_contains("status");
  if (status != nullptr && status->is_string() && status->get_string() == "Success") return 0;
  const json::value* details = o->if_contains("details");
  const json::value* causes = details && details->is_object() ? details->get_object().if_contains("causes") : nullptr;
  if (causes != nullptr && causes->is_array()) {
    for (const auto& cause : causes->get_array()) {
      const json::object* c = cause.if_object();
      if (c == nullptr) continue;
      const json::value* reason = c->if_contains("reason");
      const json::value* message = c->if_contains("message");
      int code = 0;
      if (reason && reason->is_string() && reason->get_string() == "ExitCode" && message && message->is_string() &&
          absl::SimpleAtoi(absl::string_view(message->get_string().data(), message->get_string().size()), &code)) {
        return code;
      }
    }
  }
  return absl::UnavailableError(absl::StrCat("exec failed: ", internal::decodeStatus(v).message));
}
}  // namespace

absl::Status configureTls(asio::ssl::context& tls, const ClusterAccess& access) {
  SSL_CTX* ctx = tls.native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  tls.set_verify_mode(asio::ssl::verify_peer);
  error_code ec;
  auto ca = pemOrFile(access.ca_pem, access.ca_file, "API server CA");
  if (!ca.ok()) return ca.status();
  if (ca->empty()) {
    // A kubeconfig without a CA trusts the system store, as kubectl does.
    tls.set_default_verify_paths(ec);
  } else {
    tls.add_certificate_authority(asio::buffer(*ca), ec);
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("k8s: the API server CA: ", ec.message()));
  auto cert = pemOrFile(access.client_cert_pem, access.client_cert_file, "client certificate");
  if (!cert.ok()) return cert.status();
  auto key = pemOrFile(access.client_key_pem, access.client_key_file, "client key");
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) return absl::InvalidArgumentError("k8s: a client certificate needs its key");
  if (!cert->empty()) {
    tls.use_certificate_chain(asio::buffer(*cert), ec);
    if (!ec) tls.use_private_key(asio::buffer(*key), asio::ssl::context::pem, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("k8s: the client certificate or key: ", ec.message()));
  }
  return absl::OkStatus();
}

struct ApiSession::Impl {
  explicit Impl(asio::io_context& i) : io(i) {}
  asio::io_context& io;
  asio::ssl::context tls{asio::ssl::context::tls_client};
  internal::ServerAddress server;
  std::string bearer;
  std::string user_agent;
};

ApiSession::ApiSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiSession::~ApiSession() = default;

absl::StatusOr<std::unique_ptr<ApiSession>> ApiSession::create(asio::io_context& io, const ClusterAccess& access,
                                                               std::string user_agent) {
  auto impl = std::make_unique<Impl>(io);
  auto server = internal::parseServerUrl(access.server);
  if (!server.ok()) return server.status();
  impl->server = *server;
  if (auto st = configureTls(impl->tls, access); !st.ok()) return st;
  impl->bearer = access.token;
  if (!access.token_file.empty()) {
    auto token = common::readFile(access.token_file);
    if (!token.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read the API token file ", access.token_file, ": ", token.status().message()));
    }
    impl->bearer = std::string(absl::StripAsciiWhitespace(*token));
  }
  impl->user_agent = std::move(user_agent);
  return std::unique_ptr<ApiSession>(new ApiSession(std::move(impl)));
}

asio::awaitable<absl::StatusOr<ApiAnswer>> ApiSession::get(std::string target, std::chrono::milliseconds timeout) {
  Impl& c = *impl_;
  HttpStream stream(c.io, c.tls, c.server);
  HttpStream::Request request;
  request.target = target;
  request.bearer = c.bearer;
  request.user_agent = c.user_agent;
  error_code ec = co_await stream.open(request, timeout);
  if (ec) co_return absl::UnavailableError(absl::StrCat("GET ", target, ": ", ec.message()));
  ApiAnswer answer;
  answer.status = stream.status();
  ec = co_await stream.readAll(answer.body, kMaxBody, timeout);
  if (ec) co_return absl::UnavailableError(absl::StrCat("GET ", target, ": ", ec.message()));
  if (answer.status / 100 != 2) {
    json::value parsed = json::parse(answer.body, ec);
    answer.message = ec ? std::string("(no Status object)") : internal::decodeStatus(parsed).message;
  }
  co_return answer;
}

asio::awaitable<absl::StatusOr<ExecOutput>> ApiSession::exec(std::string namespace_name, std::string pod,
                                                             std::string container, std::vector<std::string> command,
                                                             std::chrono::milliseconds timeout) {
  Impl& c = *impl_;
  std::string target = absl::StrCat("/api/v1/namespaces/", queryEscape(namespace_name), "/pods/", queryEscape(pod),
                                    "/exec?container=", queryEscape(container), "&stdout=true&stderr=true");
  for (const auto& arg : command) absl::StrAppend(&target, "&command=", queryEscape(arg));
  HttpStream stream(c.io, c.tls, c.server);
  HttpStream::Request request;
  request.target = std::move(target);
  request.bearer = c.bearer;
  request.user_agent = c.user_agent;
  auto got = co_await stream.channels(request, timeout);
  const std::string what = absl::StrCat("exec in pod ", namespace_name, "/", pod);
  if (got.refused_status != 0) {
    error_code jec;
    json::value parsed = json::parse(got.refused_body, jec);
    std::string message = jec ? std::string() : internal::decodeStatus(parsed).message;
    co_return absl::UnavailableError(absl::StrCat(what, ": the API server answered HTTP ", got.refused_status,
                                                  message.empty() ? "" : ": ", message,
                                                  got.refused_status == 403 ? " (RBAC: create on pods/exec?)" : ""));
  }
  if (got.ec) co_return absl::UnavailableError(absl::StrCat(what, ": ", got.ec.message()));
  auto code = exitStatusOf(got.status);
  if (!code.ok()) co_return absl::UnavailableError(absl::StrCat(what, ": ", code.status().message()));
  co_return ExecOutput{*code, std::move(got.out), std::move(got.err)};
}

}  // namespace ferry::k8s
