// Accept-Encoding as the operator endpoints read it (proxy/server/http_server.h): gzip when
// the client names it (or *) with a weight above 0, as RFC 9110 says.
#include <gtest/gtest.h>

#include "proxy/server/http_server.h"

namespace ferry::server {
namespace {

TEST(AcceptsGzip, TheTokenWithAWeightAboveZero) {
  for (const char* yes : {"gzip", "gzip, deflate", "deflate, GZIP", "gzip;q=0.5", "br;q=1.0, gzip;q=0.1", "*",
                          "identity, gzip , br", "gzip; q=1"}) {
    EXPECT_TRUE(acceptsGzip(yes)) << yes;
  }
  for (const char* no : {"", "identity", "deflate, br", "gzip;q=0", "gzip;q=0.0", "x-gzip", "gzipx", "gzip;q=nope"}) {
    EXPECT_FALSE(acceptsGzip(no)) << no;
  }
}

}  // namespace
}  // namespace ferry::server
