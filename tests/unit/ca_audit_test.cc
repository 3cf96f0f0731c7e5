// ferry-ca's audit lines: the shape of docs/ferry-ca.md, valid JSON whatever the strings hold.
#include <boost/json.hpp>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/ca/audit.h"
#include "proxy/identity/ca.h"

namespace ferry::ca {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::MatchesRegex;

// 2026-12-02T05:40:00.123Z
const std::chrono::system_clock::time_point kTime =
    std::chrono::system_clock::time_point(std::chrono::seconds(1796190000)) + std::chrono::milliseconds(123);

AuditRecord refused() {
  AuditRecord r;
  r.time = kTime;
  r.reason = "no_pod_on_node";
  r.message = "node fy-node runs no unfinished pod of namespace x with service account y";
  r.identity = "spiffe://cluster.local/ns/x/sa/y";
  r.caller = "system:serviceaccount:ferry-system:ferryd";
  r.caller_pod = "ferry-system/ferryd-abcde";
  r.node = "fy-node";
  r.remote = "10.244.0.1:53422";
  return r;
}

std::vector<std::string> keys(const json::object& o) {
  std::vector<std::string> out;
  for (const auto& kv : o) out.emplace_back(kv.key());
  return out;
}

TEST(CaAuditTest, RefusedLineHasTheDocumentedFieldsInOrder) {
  std::string line = auditLine(refused());
  EXPECT_EQ(line,
            R"({"audit":"ferry-ca","time":"2026-12-02T05:40:00.123Z","decision":"refused","reason":"no_pod_on_node",)"
            R"("message":"node fy-node runs no unfinished pod of namespace x with service account y",)"
            R"("identity":"spiffe://cluster.local/ns/x/sa/y","caller":"system:serviceaccount:ferry-system:ferryd",)"
            R"("caller_pod":"ferry-system/ferryd-abcde","node":"fy-node","remote":"10.244.0.1:53422"})");
}

TEST(CaAuditTest, SignedLineAddsSerialAndNotAfterOfTheLeaf) {
  auto root = identity::CertificateAuthority::createRoot("cluster.local", std::chrono::hours(1));
  ASSERT_TRUE(root.ok()) << root.status();
  auto leaf = root->issueLeaf(identity::SpiffeId::forWorkload("cluster.local", "x", "y"), std::chrono::minutes(30));
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  AuditRecord r = refused();
  r.signed_cert = true;
  r.reason = "signed";
  describeLeaf(r, leaf->cert.get());
  json::object o = json::parse(auditLine(r)).as_object();
  EXPECT_THAT(keys(o), ElementsAre("audit", "time", "decision", "reason", "message", "identity", "caller",
                                   "caller_pod", "node", "remote", "serial", "not_after"));
  EXPECT_EQ(o["decision"].as_string(), "signed");
  std::string serial(o["serial"].as_string());
  EXPECT_THAT(serial, MatchesRegex("[0-9A-F]+"));
  EXPECT_GE(serial.size(), 30u) << "a 128-bit random serial";
  EXPECT_EQ(o["not_after"].as_string(),
            identity::formatTime(identity::asn1TimeToTimePoint(X509_get0_notAfter(leaf->cert.get()))));
}

TEST(CaAuditTest, StringsFromTheNetworkStayOneValidJsonLine) {
  AuditRecord r = refused();
  r.message = "quote \" backslash \\ newline \n tab \t nul " + std::string(1, '\0') + " bad utf8 \xff end";
  r.identity = "spiffe://x/\u2028";
  std::string line = auditLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  ASSERT_FALSE(ec) << ec.message() << ": " << line;
  std::string message(v.as_object()["message"].as_string());
  EXPECT_EQ(message.substr(0, 40), "quote \" backslash \\ newline \n tab \t nul ");
}

TEST(CaAuditTest, LogWritesOneLinePerRecordThroughItsSink) {
  std::vector<std::string> lines;
  AuditLog log([&](std::string_view line) { lines.emplace_back(line); });
  log.write(refused());
  AuditRecord other = refused();
  other.reason = "rate_limited";
  log.write(other);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], auditLine(refused()));
  EXPECT_EQ(json::parse(lines[1]).as_object()["reason"].as_string(), "rate_limited");
}

}  // namespace
}  // namespace ferry::ca
