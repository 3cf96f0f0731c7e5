// ferryd's client of ferry-ca (identity.source: cluster-ca) against a stand-in ferry-ca on
// 127.0.0.1: HTTPS with Beast, speaking exactly proxy/ca/protocol.h, signing CSRs with an
// in-process CA, and answering refusals, 429 with Retry-After, or garbage on demand. The
// client runs on this thread's io_context under a fake clock: the tests move time and call
// tick() instead of sleeping.
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proxy/ca/cluster_ca_source.h"
#include "proxy/ca/protocol.h"
#include "proxy/identity/ca.h"
#include "proxy/identity/tls_context.h"
#include "tests/support/fake_clock.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"
#include "tests/support/tls_handshake.h"

namespace ferry::ca {
namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using identity::CertificateAuthority;
using identity::SpiffeId;
using ::testing::HasSubstr;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using std::chrono::system_clock;

constexpr const char* kTd = ferry::test_support::kTestTrustDomain;  // newRoot's
constexpr char kServerName[] = "ferry-ca.test";
// A Service's name (ServiceName, proxy/ca/cluster_ca_source.h): the stand-in's certificate
// carries it too, and nothing resolves it by DNS.
constexpr char kServiceName[] = "ferry-ca.fy-ns.svc";
constexpr char kToken[] = "token-of-ferryd";

SpiffeId webId() { return SpiffeId::forWorkload(kTd, "default", "web"); }
SpiffeId dbId() { return SpiffeId::forWorkload(kTd, "default", "db"); }

using ferry::test_support::FakeClock;
using ferry::test_support::newRoot;
using ferry::test_support::pemOf;

// The stand-in: one request per connection, answered as `mode` says.
class StandInFerryCa {
 public:
  enum class Mode { kSign, kRefuse, kRateLimited, kGarbage };

  // `signer` must outlive the stand-in (or the next useCa).
  explicit StandInFerryCa(const CertificateAuthority& signer) {
    useCa(signer);
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~StandInFerryCa() {
    io_.stop();
    thread_.join();
  }

  // Signs leaves with `signer` and serves a certificate it issued for kServerName.
  void useCa(const CertificateAuthority& signer) {
    // The serving certificate the real ferry-ca makes for itself (ca_cert_source.h).
    identity::EvpPkeyPtr serving_key(EVP_EC_gen("P-256"));
    ASSERT_NE(serving_key, nullptr);
    auto serving = signer.issueServing({kServerName, kServiceName}, serving_key.get(), hours(24));
    ASSERT_TRUE(serving.ok()) << serving.status();
    auto tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    SSL_CTX_use_certificate(tls->native_handle(), serving->get());
    SSL_CTX_use_PrivateKey(tls->native_handle(), serving_key.get());
    std::lock_guard lock(mu_);
    tls_ = std::move(tls);
    signer_ = &signer;
  }
  void setMode(Mode mode, int retry_after = -1) {
    std::lock_guard lock(mu_);
    mode_ = mode;
    retry_after_ = retry_after;
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  int signRequests() const { return sign_requests_.load(); }
  std::string lastBearer() const {
    std::lock_guard lock(mu_);
    return last_bearer_;
  }
  std::chrono::hours leaf_lifetime{1};

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(asio::ip::tcp::socket socket) {
    std::shared_ptr<asio::ssl::context> tls;
    {
      std::lock_guard lock(mu_);
      tls = tls_;
    }
    beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), *tls);
    auto [hs] = co_await stream.async_handshake(asio::ssl::stream_base::server, asio::as_tuple(asio::use_awaitable));
    if (hs) co_return;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    auto [rd, n] = co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
    if (rd) co_return;
    http::response<http::string_body> res = answer(req);
    res.prepare_payload();
    co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
    co_await stream.async_shutdown(asio::as_tuple(asio::use_awaitable));
  }

  static http::response<http::string_body> error(http::status status, const char* code, const char* message) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = encode(ErrorBody{code, message});
    return res;
  }

  http::response<http::string_body> answer(const http::request<http::string_body>& req) {
    if (req.method() != http::verb::post || req.target() != kSignPath) {
      return error(http::status::bad_request, "bad_request", "POST /v1/certificates only");
    }
    ++sign_requests_;
    std::lock_guard lock(mu_);
    last_bearer_ = std::string(req[http::field::authorization]);
    switch (mode_) {
      case Mode::kRefuse:
        return error(http::status::forbidden, "not_node_agent", "the token's service account is not ferryd's");
      case Mode::kRateLimited: {
        auto res = error(http::status::too_many_requests, "rate_limited", "the node is over its signing rate");
        res.set(http::field::retry_after, std::to_string(retry_after_));
        return res;
      }
      case Mode::kGarbage: {
        http::response<http::string_body> res{http::status::ok, 11};
        res.body() = "{\"cert_chain\": 7";
        return res;
      }
      case Mode::kSign:
        break;
    }
    auto sign = decodeSignRequest(req.body());
    if (!sign.ok()) return error(http::status::bad_request, "bad_request", "not a sign request");
    identity::BioPtr bio(BIO_new_mem_buf(sign->csr_pem.data(), static_cast<int>(sign->csr_pem.size())));
    std::unique_ptr<X509_REQ, decltype(&X509_REQ_free)> csr(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr),
                                                            X509_REQ_free);
    EVP_PKEY* key = csr ? X509_REQ_get0_pubkey(csr.get()) : nullptr;
    if (key == nullptr || X509_REQ_verify(csr.get(), key) != 1) {
      return error(http::status::bad_request, "bad_csr", "the CSR does not parse or verify");
    }
    STACK_OF(X509_EXTENSION)* extensions = X509_REQ_get_extensions(csr.get());
    int at = X509v3_get_ext_by_NID(extensions, NID_subject_alt_name, -1);
    auto* names = at < 0 ? nullptr : static_cast<GENERAL_NAMES*>(X509V3_EXT_d2i(X509v3_get_ext(extensions, at)));
    std::string uri;
    if (names != nullptr && sk_GENERAL_NAME_num(names) == 1 && sk_GENERAL_NAME_value(names, 0)->type == GEN_URI) {
      ASN1_IA5STRING* text = sk_GENERAL_NAME_value(names, 0)->d.uniformResourceIdentifier;
      uri.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)), ASN1_STRING_length(text));
    }
    GENERAL_NAMES_free(names);
    sk_X509_EXTENSION_pop_free(extensions, X509_EXTENSION_free);
    if (uri.empty()) return error(http::status::bad_request, "bad_csr", "not exactly one URI SAN");
    auto id = SpiffeId::parse(uri);
    if (!id.ok()) return error(http::status::bad_request, "bad_csr", "the URI SAN is not a SPIFFE ID");
    auto leaf = signer_->issueLeafForKey(*id, key, leaf_lifetime);
    if (!leaf.ok()) return error(http::status::internal_server_error, "signing_failed", "OpenSSL failed");
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = encode(SignResponse{{pemOf(leaf->get())}});
    return res;
  }

  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::thread thread_;
  mutable std::mutex mu_;
  std::shared_ptr<asio::ssl::context> tls_;
  const CertificateAuthority* signer_ = nullptr;
  Mode mode_ = Mode::kSign;
  int retry_after_ = -1;
  std::string last_bearer_;
  std::atomic<int> sign_requests_{0};
};

class ClusterCaClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    writeBundle({root_.cert()});
    ASSERT_TRUE(identity::writeFileAtomic(path("token"), std::string(kToken) + "\n", 0600).ok());
    stand_in_ = std::make_unique<StandInFerryCa>(root_);
    auto source = ClusterCaSource::create(
        io_,
        ClusterCaOptions{absl::StrCat("127.0.0.1:", stand_in_->port()), kServerName, path("token"), path("bundle.pem"),
                         kTd, std::chrono::seconds(5)},
        clock_);
    ASSERT_TRUE(source.ok()) << source.status();
    source_ = *std::move(source);
  }
  void TearDown() override {
    source_.reset();
    stand_in_.reset();
  }

  std::string path(const std::string& name) const { return dir_.file(name); }
  void writeBundle(const std::vector<X509*>& roots) {
    std::string text;
    for (X509* root : roots) text += pemOf(root);
    ASSERT_TRUE(identity::writeFileAtomic(path("bundle.pem"), text, 0644).ok());
  }

  // Runs the client's io_context until `done` holds (the answer is the readiness signal).
  bool runUntil(const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + seconds(20);
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (io_.stopped()) io_.restart();
      io_.run_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  std::shared_ptr<const identity::Svid> waitForSvid(const SpiffeId& id) {
    std::shared_ptr<const identity::Svid> out;
    EXPECT_TRUE(runUntil([&] {
      auto svid = source_->svid(id);
      if (svid.ok()) out = *svid;
      return svid.ok();
    })) << source_->svid(id).status();
    return out;
  }
  // Moves the fake clock and lets the source act on it.
  void advance(system_clock::duration d) {
    clock_.advance(d);
    source_->tick();
  }

  CertificateAuthority root_ = newRoot();
  FakeClock clock_;
  ferry::test_support::TempDir dir_{"cluster-ca"};
  asio::io_context io_;
  std::unique_ptr<StandInFerryCa> stand_in_;
  std::unique_ptr<ClusterCaSource> source_;
};

TEST_F(ClusterCaClientTest, FirstCertificateArrivesAndMakesWorkingTlsContexts) {
  EXPECT_FALSE(source_->status().ok());
  ASSERT_TRUE(source_->poll()) << source_->status();
  // A first connection before the certificate arrived is told why and fails closed; the ask
  // goes out at once.
  auto early = source_->svid(webId());
  ASSERT_FALSE(early.ok());
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("waiting for ferry-ca"));
  source_->retain({webId(), dbId()});
  auto web = waitForSvid(webId());
  auto db = waitForSvid(dbId());
  ASSERT_TRUE(web && db);
  EXPECT_TRUE(source_->status().ok()) << source_->status();
  EXPECT_EQ(stand_in_->lastBearer(), absl::StrCat("Bearer ", kToken)) << "the token file, trimmed";
  EXPECT_EQ(*source_->svid(webId()), web) << "the same pointer while unchanged";
  EXPECT_EQ(source_->held().size(), 2u);

  identity::TlsContextCache contexts(*source_, kTd);
  auto client = contexts.clientContext(webId());
  auto server = contexts.serverContext(dbId());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(server.ok()) << server.status();
  auto hs = ferry::test_support::runHandshake((*client)->native_handle(), (*server)->native_handle());
  EXPECT_TRUE(hs.client_ok) << hs.client_error;
  EXPECT_TRUE(hs.server_ok) << hs.server_error;
  auto peer = identity::verifyPeer(hs.server.get(), kTd);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*peer, webId());

  EXPECT_EQ(source_->retain({dbId()}), 1u) << "web is no longer local: forgotten";
  EXPECT_EQ(source_->held().size(), 1u);
}

TEST_F(ClusterCaClientTest, RefreshAtHalfLifeReplacesTheCertificateWhileAHolderKeepsTheOld) {
  source_->poll();
  source_->retain({webId()});
  auto first = waitForSvid(webId());
  ASSERT_TRUE(first);
  int asked = stand_in_->signRequests();
  advance(minutes(29));
  EXPECT_EQ(*source_->svid(webId()), first) << "before half life nothing is asked";
  EXPECT_EQ(stand_in_->signRequests(), asked);
  advance(minutes(2));
  ASSERT_TRUE(runUntil([&] { return *source_->svid(webId()) != first; }));
  auto second = *source_->svid(webId());
  EXPECT_NE(X509_cmp(first->leaf.get(), second->leaf.get()), 0) << "a new certificate";
  EXPECT_EQ(EVP_PKEY_eq(first->key.get(), second->key.get()), 1) << "for the identity's one key";
  EXPECT_EQ(first->id, webId()) << "the holder's SVID is intact";
  EXPECT_EQ(*source_->svid(webId()), second);
  EXPECT_EQ(source_->signedCount(), 2u);
}

TEST_F(ClusterCaClientTest, RefusalKeepsTheOldCertificateUntilItExpires) {
  source_->poll();
  source_->retain({webId()});
  auto first = waitForSvid(webId());
  ASSERT_TRUE(first);
  stand_in_->setMode(StandInFerryCa::Mode::kRefuse);
  advance(minutes(31));
  ASSERT_TRUE(runUntil([&] { return source_->refusedCount() >= 1; }));
  EXPECT_EQ(*source_->svid(webId()), first) << "served until it expires";
  // Past its expiry: no certificate, and the reason is ferry-ca's.
  advance(minutes(31));
  ASSERT_TRUE(runUntil([&] { return source_->refusedCount() >= 2; }));
  auto after = source_->svid(webId());
  ASSERT_FALSE(after.ok());
  EXPECT_THAT(std::string(after.status().message()), HasSubstr("not_node_agent"));
  EXPECT_THAT(std::string(after.status().message()), HasSubstr("the last expired"));
  EXPECT_THAT(telemetry::textOf(*source_), HasSubstr("ferry_cluster_ca_refused_total{code=\"not_node_agent\"} 2"));
}

TEST_F(ClusterCaClientTest, RateLimitWaitsForRetryAfter) {
  source_->poll();
  stand_in_->setMode(StandInFerryCa::Mode::kRateLimited, 30);
  source_->retain({webId()});
  ASSERT_TRUE(runUntil([&] { return source_->refusedCount() == 1; }));
  int asked = stand_in_->signRequests();
  advance(seconds(20));  // beyond the 1 s back-off, short of Retry-After
  io_.run_for(std::chrono::milliseconds(50));
  EXPECT_EQ(stand_in_->signRequests(), asked) << "Retry-After: 30 not honoured";
  stand_in_->setMode(StandInFerryCa::Mode::kSign);
  advance(seconds(11));
  EXPECT_TRUE(waitForSvid(webId()));
  EXPECT_EQ(stand_in_->signRequests(), asked + 1);
}

TEST_F(ClusterCaClientTest, GarbageAndUnreachableAreFailuresRetriedWithBackOff) {
  source_->poll();
  stand_in_->setMode(StandInFerryCa::Mode::kGarbage);
  source_->retain({webId()});
  ASSERT_TRUE(runUntil([&] { return source_->failureCount() == 1; }));
  auto none = source_->svid(webId());
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("unusable answer"));
  EXPECT_THAT(telemetry::textOf(*source_), HasSubstr("ferry_cluster_ca_failures_total{reason=\"bad_answer\"} 1"));
  stand_in_->setMode(StandInFerryCa::Mode::kSign);
  advance(seconds(2));
  EXPECT_TRUE(waitForSvid(webId()));
  EXPECT_TRUE(source_->status().ok());
}

TEST_F(ClusterCaClientTest, ReadyWithoutLocalWorkloadsOnceFerryCaAnswersAProbe) {
  source_->poll();
  ASSERT_TRUE(runUntil([&] { return source_->status().ok(); })) << source_->status();
  EXPECT_EQ(stand_in_->signRequests(), 0) << "the probe asks for nothing";
}

TEST_F(ClusterCaClientTest, BundleChangeReverifiesHeldCertificatesAndTheServer) {
  source_->poll();
  source_->retain({webId()});
  auto old = waitForSvid(webId());
  ASSERT_TRUE(old);
  // Root rotation with overlap: bundle {old, new} → ferry-ca under new → bundle {new}.
  CertificateAuthority next_root = newRoot();
  writeBundle({root_.cert(), next_root.cert()});
  ASSERT_TRUE(source_->poll());
  stand_in_->useCa(next_root);
  EXPECT_EQ(*source_->svid(webId()), old) << "still trusted by {old, new}";
  writeBundle({next_root.cert()});
  ASSERT_TRUE(source_->poll());
  ASSERT_TRUE(runUntil([&] { return *source_->svid(webId()) != old; })) << "not asked again after {new}";
  auto fresh = *source_->svid(webId());
  auto bundle = source_->bundle();
  ASSERT_TRUE(bundle.ok());
  EXPECT_EQ((*bundle)->roots.size(), 1u);
  std::vector<X509*> none;
  EXPECT_TRUE(identity::verifyChain(fresh->leaf.get(), none, **bundle).ok());
  EXPECT_FALSE(identity::verifyChain(old->leaf.get(), none, **bundle).ok());
  stand_in_.reset();  // it signs with next_root, which goes now
}

TEST_F(ClusterCaClientTest, ServerNameMismatchIsANetworkFailure) {
  stand_in_->setMode(StandInFerryCa::Mode::kSign);
  auto other = ClusterCaSource::create(
      io_,
      ClusterCaOptions{absl::StrCat("127.0.0.1:", stand_in_->port()), "not-ferry-ca.test", path("token"),
                       path("bundle.pem"), kTd, std::chrono::seconds(5)},
      clock_);
  ASSERT_TRUE(other.ok());
  (*other)->poll();
  (*other)->retain({webId()});
  ASSERT_TRUE(runUntil([&] { return (*other)->failureCount() >= 1; }));
  EXPECT_FALSE((*other)->status().ok()) << "a TLS failure is no answer";
  EXPECT_EQ(stand_in_->signRequests(), 0);
  (*other)->stop();
}

TEST_F(ClusterCaClientTest, ServiceNameIsDialledAtTheClusterIpFromTheApiAndVerifiedByName) {
  stand_in_->setMode(StandInFerryCa::Mode::kSign);
  std::vector<std::string> asked;
  ClusterCaOptions options{absl::StrCat(kServiceName, ":", stand_in_->port()), "", path("token"), path("bundle.pem"),
                           kTd, std::chrono::seconds(5)};
  options.service_ip = [&asked](std::string_view ns, std::string_view name) {
    asked.push_back(std::string(ns) + "/" + std::string(name));
    return std::string("127.0.0.1");  // the Service's ClusterIP, as the API server would say
  };
  auto via_api = ClusterCaSource::create(io_, std::move(options), clock_);
  ASSERT_TRUE(via_api.ok()) << via_api.status();
  ASSERT_TRUE((*via_api)->poll());
  (*via_api)->retain({webId()});
  ASSERT_TRUE(runUntil([&] { return (*via_api)->svid(webId()).ok(); })) << (*via_api)->status();
  EXPECT_GE(stand_in_->signRequests(), 1);
  ASSERT_FALSE(asked.empty());
  EXPECT_EQ(asked.front(), "fy-ns/ferry-ca");
  (*via_api)->stop();
}

TEST_F(ClusterCaClientTest, ServiceNameAtAnIpWhoseCertificateLacksTheNameIsRefused) {
  stand_in_->setMode(StandInFerryCa::Mode::kSign);
  // The ClusterIP leads to a server whose certificate does not carry this Service's name:
  // the name, not the address, is what is verified.
  ClusterCaOptions options{absl::StrCat("other-ca.fy-ns.svc:", stand_in_->port()), "", path("token"),
                           path("bundle.pem"), kTd, std::chrono::seconds(5)};
  options.service_ip = [](std::string_view, std::string_view) { return std::string("127.0.0.1"); };
  auto via_api = ClusterCaSource::create(io_, std::move(options), clock_);
  ASSERT_TRUE(via_api.ok()) << via_api.status();
  (*via_api)->poll();
  (*via_api)->retain({webId()});
  ASSERT_TRUE(runUntil([&] { return (*via_api)->failureCount() >= 1; }));
  EXPECT_FALSE((*via_api)->svid(webId()).ok());
  EXPECT_EQ(stand_in_->signRequests(), 0);
  (*via_api)->stop();
}

}  // namespace
}  // namespace ferry::ca
