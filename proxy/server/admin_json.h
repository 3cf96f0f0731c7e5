#pragma once
// What the admin endpoint's JSON pages share (proxy/server/policy_admin.cc,
// proxy/server/server_admin.cc): the answer, the error answer, the query.
#include <map>
#include <string>

#include <boost/json/value.hpp>

#include "proxy/server/http_server.h"

namespace ferry::server {

HttpResponse jsonResponse(int status, const boost::json::value& body);
// {"error": why} with `status` (400 for a bad parameter).
HttpResponse jsonError(int status, std::string why);
// key=value&key=value with %XX and '+' decoded; the last value of a repeated key wins.
std::map<std::string, std::string> parseQuery(const std::string& query);

}  // namespace ferry::server
