#include "proxy/server/admin_json.h"

#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "proxy/common/strings.h"

namespace ferry::server {

HttpResponse jsonResponse(int status, const boost::json::value& body) {
  return HttpResponse{status, "application/json", boost::json::serialize(body) + "\n"};
}

HttpResponse jsonError(int status, std::string why) {
  return jsonResponse(status, boost::json::object{{"error", std::move(why)}});
}

std::map<std::string, std::string> parseQuery(const std::string& query) {
  std::map<std::string, std::string> out;
  std::string_view rest = query;
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    auto eq = pair.find('=');
    out[common::percentDecode(pair.substr(0, eq))] =
        eq == std::string_view::npos ? "" : common::percentDecode(pair.substr(eq + 1));
  }
  return out;
}

}  // namespace ferry::server
