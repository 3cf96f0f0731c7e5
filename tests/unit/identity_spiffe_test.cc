// SPIFFE ID parsing against the rules of docs/security.md, "The SPIFFE ID rules".
#include <string>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/identity/spiffe_id.h"

namespace ferry::identity {
namespace {

using ::testing::HasSubstr;

struct ValidCase {
  std::string uri;
  std::string trust_domain;
  std::string path;
};
void PrintTo(const ValidCase& c, std::ostream* os) { *os << c.uri.substr(0, 80); }

class AcceptsValidId : public ::testing::TestWithParam<ValidCase> {};

TEST_P(AcceptsValidId, ParsesTrustDomainAndPath) {
  auto id = SpiffeId::parse(GetParam().uri);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->trustDomain(), GetParam().trust_domain);
  EXPECT_EQ(id->path(), GetParam().path);
}

INSTANTIATE_TEST_SUITE_P(
    SpiffeIds, AcceptsValidId,
    ::testing::Values(
        ValidCase{"spiffe://cluster.local/ns/default/sa/default", "cluster.local", "/ns/default/sa/default"},
        ValidCase{"spiffe://example.org", "example.org", ""},
        ValidCase{"spiffe://example.org/a", "example.org", "/a"},
        ValidCase{"spiffe://a-b_c.9/Path.With-Mixed_Case/x", "a-b_c.9", "/Path.With-Mixed_Case/x"},
        ValidCase{"spiffe://10.0.0.1/ip-looking-td", "10.0.0.1", "/ip-looking-td"},
        ValidCase{"spiffe://example.org/...", "example.org", "/..."},
        ValidCase{"spiffe://example.org/.hidden", "example.org", "/.hidden"},
        // SPIFFE-ID §2.4: the scheme is case-insensitive when parsing.
        ValidCase{"SPIFFE://example.org/x", "example.org", "/x"},
        ValidCase{"spiffe://" + std::string(255, 'a') + "/x", std::string(255, 'a'), "/x"},
        ValidCase{"spiffe://td/" + std::string(2048 - 12, 'p'), "td", "/" + std::string(2048 - 12, 'p')}));

struct InvalidCase {
  std::string name;
  std::string uri;
  std::string rule;  // a fragment the error must contain
};
void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.name; }

class RejectsInvalidId : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(RejectsInvalidId, WithMessageNamingTheRule) {
  auto id = SpiffeId::parse(GetParam().uri);
  ASSERT_FALSE(id.ok()) << "accepted " << GetParam().uri;
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr(GetParam().rule));
}

INSTANTIATE_TEST_SUITE_P(
    SpiffeIds, RejectsInvalidId,
    ::testing::Values(
        InvalidCase{"Empty", "", "is empty"},
        InvalidCase{"NoScheme", "example.org/ns/a", "scheme must be 'spiffe://'"},
        InvalidCase{"HttpScheme", "http://example.org/ns/a", "scheme must be 'spiffe'"},
        InvalidCase{"SchemeWithoutSlashes", "spiffe:example.org/a", "scheme must be 'spiffe://'"},
        InvalidCase{"EmptyTrustDomain", "spiffe:///ns/a", "trust domain is empty"},
        InvalidCase{"EmptyTrustDomainNoPath", "spiffe://", "trust domain is empty"},
        InvalidCase{"UppercaseTrustDomain", "spiffe://Example.org/a", "trust domain must be lowercase"},
        InvalidCase{"PercentEncodedTrustDomain", "spiffe://ex%41mple.org/a", "trust domain must not be percent-encoded"},
        InvalidCase{"PercentEncodedPath", "spiffe://example.org/a%2Fb", "path must not be percent-encoded"},
        InvalidCase{"Port", "spiffe://example.org:8080/a", "port"},
        InvalidCase{"Userinfo", "spiffe://user@example.org/a", "userinfo"},
        InvalidCase{"UserinfoWithPassword", "spiffe://user:pw@example.org/a", "userinfo"},
        InvalidCase{"Ipv6TrustDomain", "spiffe://[::1]/a", "IPv6 literal"},
        InvalidCase{"Query", "spiffe://example.org/a?x=1", "must not have a query"},
        InvalidCase{"QueryWithoutPath", "spiffe://example.org?x", "must not have a query"},
        InvalidCase{"Fragment", "spiffe://example.org/a#frag", "must not have a fragment"},
        InvalidCase{"EmptySegment", "spiffe://example.org/a//b", "empty segments"},
        InvalidCase{"EmptyFirstSegment", "spiffe://example.org//a", "empty segments"},
        InvalidCase{"DotSegment", "spiffe://example.org/a/./b", "'.' or '..' segments"},
        InvalidCase{"DotDotSegment", "spiffe://example.org/a/../b", "'.' or '..' segments"},
        InvalidCase{"TrailingDotDot", "spiffe://example.org/..", "'.' or '..' segments"},
        InvalidCase{"TrailingSlash", "spiffe://example.org/a/", "must not end with '/'"},
        InvalidCase{"RootSlashOnly", "spiffe://example.org/", "must not end with '/'"},
        InvalidCase{"SpaceInPath", "spiffe://example.org/a b", "not allowed in a path"},
        InvalidCase{"PlusInPath", "spiffe://example.org/a+b", "not allowed in a path"},
        InvalidCase{"NulInPath", std::string("spiffe://example.org/a\0b", 24), "not allowed in a path"},
        InvalidCase{"NonAsciiInPath", "spiffe://example.org/caf\xc3\xa9", "not allowed in a path"},
        InvalidCase{"BadCharInTrustDomain", "spiffe://exa*mple.org/a", "not allowed in a trust domain"},
        InvalidCase{"TooLong", "spiffe://td/" + std::string(2048 - 11, 'p'), "longer than 2048 bytes"},
        InvalidCase{"TrustDomainTooLong", "spiffe://" + std::string(256, 'a') + "/x", "longer than 255 bytes"}),
    [](const ::testing::TestParamInfo<InvalidCase>& info) { return info.param.name; });

TEST(SpiffeId, StrRoundTripsAndEmitsLowercaseScheme) {
  auto id = SpiffeId::parse("SpIfFe://example.org/ns/a/sa/b");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->str(), "spiffe://example.org/ns/a/sa/b");
  auto again = SpiffeId::parse(id->str());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *id);
}

TEST(SpiffeId, ForWorkloadBuildsIstioForm) {
  SpiffeId id = SpiffeId::forWorkload("cluster.local", "default", "sleep");
  EXPECT_EQ(id.str(), "spiffe://cluster.local/ns/default/sa/sleep");
  EXPECT_EQ(id.trustDomain(), "cluster.local");
  EXPECT_EQ(id.path(), "/ns/default/sa/sleep");
  EXPECT_EQ(id, *SpiffeId::parse("spiffe://cluster.local/ns/default/sa/sleep"));
}

TEST(SpiffeId, EqualityAndHashDistinguishTrustDomainFromPath) {
  absl::flat_hash_set<SpiffeId> set;
  set.insert(*SpiffeId::parse("spiffe://a.b/c"));
  set.insert(*SpiffeId::parse("spiffe://a.b/c"));
  set.insert(*SpiffeId::parse("spiffe://a/b.c"));
  set.insert(*SpiffeId::parse("spiffe://a.b/C"));
  EXPECT_EQ(set.size(), 3u);
  EXPECT_NE(*SpiffeId::parse("spiffe://a.b/c"), *SpiffeId::parse("spiffe://a.b/C"));
}

TEST(SpiffeId, ErrorQuotesAndShortensHostileInput) {
  std::string hostile = "spiffe://example.org/a\nfake log line" + std::string(3000, 'x');
  auto id = SpiffeId::parse(hostile);
  ASSERT_FALSE(id.ok());
  std::string message(id.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos);
  EXPECT_LT(message.size(), 400u);
}

TEST(ValidateTrustDomain, AcceptsLowercaseDnsAndIpLikeNames) {
  EXPECT_TRUE(validateTrustDomain("cluster.local").ok());
  EXPECT_TRUE(validateTrustDomain("192.168.1.1").ok());
  EXPECT_TRUE(validateTrustDomain("a_b-c.d").ok());
  EXPECT_TRUE(validateTrustDomain(std::string(255, 'z')).ok());
}

TEST(ValidateTrustDomain, RejectsEachBrokenRule) {
  EXPECT_THAT(std::string(validateTrustDomain("").message()), HasSubstr("empty"));
  EXPECT_THAT(std::string(validateTrustDomain("Cluster.local").message()), HasSubstr("lowercase"));
  EXPECT_THAT(std::string(validateTrustDomain("td:443").message()), HasSubstr("port"));
  EXPECT_THAT(std::string(validateTrustDomain("u@td").message()), HasSubstr("userinfo"));
  EXPECT_THAT(std::string(validateTrustDomain("t%64").message()), HasSubstr("percent-encoded"));
  EXPECT_THAT(std::string(validateTrustDomain("td/x").message()), HasSubstr("not allowed"));
  EXPECT_THAT(std::string(validateTrustDomain(std::string(256, 'z')).message()), HasSubstr("255 bytes"));
}

}  // namespace
}  // namespace ferry::identity
