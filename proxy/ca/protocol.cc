#include "proxy/ca/protocol.h"

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "proxy/common/strings.h"

namespace ferry::ca {
namespace json = boost::json;

namespace {

using common::toAbsl;

absl::StatusOr<json::object> parseObject(std::string_view body, std::string_view what) {
  boost::system::error_code ec;
  json::value v = json::parse(json::string_view(body.data(), body.size()), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(toAbsl(what), ": not JSON: ", ec.message()));
  if (!v.is_object()) return absl::InvalidArgumentError(absl::StrCat(toAbsl(what), ": not a JSON object"));
  return std::move(v.as_object());
}

absl::StatusOr<std::string> stringField(const json::object& o, std::string_view what, std::string_view key) {
  const json::value* v = o.if_contains(json::string_view(key.data(), key.size()));
  if (v == nullptr) return absl::InvalidArgumentError(absl::StrCat(toAbsl(what), ": missing \"", toAbsl(key), "\""));
  if (!v->is_string()) return absl::InvalidArgumentError(absl::StrCat(toAbsl(what), ": \"", toAbsl(key), "\" is not a string"));
  return std::string(v->as_string());
}

std::string serialized(const json::object& o) { return json::serialize(json::value(o)); }

}  // namespace

std::string encode(const SignRequest& request) {
  json::object o;
  o["csr"] = request.csr_pem;
  o["validity_seconds"] = request.validity.count();
  return serialized(o);
}

std::string encode(const SignResponse& response) {
  json::array chain;
  for (const std::string& pem : response.cert_chain_pem) chain.emplace_back(pem);
  json::object o;
  o["cert_chain"] = std::move(chain);
  return serialized(o);
}

std::string encode(const ErrorBody& error) {
  json::object o;
  o["error"] = error.code;
  o["message"] = error.message;
  return serialized(o);
}

absl::StatusOr<SignRequest> decodeSignRequest(std::string_view body) {
  constexpr std::string_view kWhat = "sign request";
  auto o = parseObject(body, kWhat);
  if (!o.ok()) return o.status();
  SignRequest out;
  auto csr = stringField(*o, kWhat, "csr");
  if (!csr.ok()) return csr.status();
  out.csr_pem = *std::move(csr);
  if (const json::value* v = o->if_contains("validity_seconds"); v != nullptr) {
    if (!v->is_int64() && !v->is_uint64()) {
      return absl::InvalidArgumentError("sign request: \"validity_seconds\" is not an integer");
    }
    int64_t seconds = v->is_int64() ? v->as_int64() : static_cast<int64_t>(std::min<uint64_t>(v->as_uint64(), INT64_MAX));
    if (seconds < 0) return absl::InvalidArgumentError("sign request: \"validity_seconds\" is negative");
    out.validity = std::chrono::seconds(seconds);
  }
  return out;
}

absl::StatusOr<SignResponse> decodeSignResponse(std::string_view body) {
  constexpr std::string_view kWhat = "sign response";
  auto o = parseObject(body, kWhat);
  if (!o.ok()) return o.status();
  const json::value* chain = o->if_contains("cert_chain");
  if (chain == nullptr || !chain->is_array()) {
    return absl::InvalidArgumentError("sign response: \"cert_chain\" is missing or not an array");
  }
  SignResponse out;
  for (const json::value& pem : chain->as_array()) {
    if (!pem.is_string()) return absl::InvalidArgumentError("sign response: a \"cert_chain\" entry is not a string");
    out.cert_chain_pem.emplace_back(pem.as_string());
  }
  if (out.cert_chain_pem.empty()) return absl::InvalidArgumentError("sign response: \"cert_chain\" is empty");
  return out;
}

absl::StatusOr<ErrorBody> decodeErrorBody(std::string_view body) {
  constexpr std::string_view kWhat = "error response";
  auto o = parseObject(body, kWhat);
  if (!o.ok()) return o.status();
  ErrorBody out;
  auto code = stringField(*o, kWhat, "error");
  if (!code.ok()) return code.status();
  out.code = *std::move(code);
  if (auto message = stringField(*o, kWhat, "message"); message.ok()) out.message = *std::move(message);
  return out;
}

}  // namespace ferry::ca
