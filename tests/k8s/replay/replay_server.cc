#include "tests/k8s/replay/replay_server.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

namespace ferry::k8s::replay {
namespace asio = boost::asio;
namespace json = boost::json;
using tcp = asio::ip::tcp;

namespace {
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::string readBinary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void parseRaw(Recorded& r) {
  size_t end = r.raw.find("\r\n\r\n");
  if (end == std::string::npos) throw std::runtime_error("recorded response without a header: " + r.target);
  r.head = r.raw.substr(0, end + 4);
  r.status = std::atoi(r.head.c_str() + 9);  // "HTTP/1.1 200 OK"
  std::string lower = r.head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  r.chunked = lower.find("transfer-encoding: chunked") != std::string::npos;
  std::string rest = r.raw.substr(end + 4);
  if (!r.chunked) {
    r.body = rest;
    return;
  }
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t eol = rest.find("\r\n", pos);
    if (eol == std::string::npos) break;  // cut inside a chunk header
    size_t size = std::strtoul(rest.c_str() + pos, nullptr, 16);
    if (size == 0) break;
    r.chunks.push_back(rest.substr(eol + 2, size));
    r.body += r.chunks.back();
    pos = eol + 2 + size + 2;
  }
}

// A self-signed certificate for 127.0.0.1 made at start: the tier needs no key on disk.
void makeCertificate(std::string& cert_pem, std::string& key_pem) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("fy-replay"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
  X509_add_ext(x, san, -1);
  X509_EXTENSION_free(san);
  X509_sign(x, key, EVP_sha256());
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  cert_pem.assign(data, n);
  BIO_free(b);
  b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  n = BIO_get_mem_data(b, &data);
  key_pem.assign(data, n);
  BIO_free(b);
  X509_free(x);
  EVP_PKEY_free(key);
}

std::string frame(const std::vector<std::string>& chunks, bool final_chunk) {
  std::string out;
  char size[32];
  for (const auto& c : chunks) {
    if (c.empty()) continue;  // an empty chunk would end the body
    snprintf(size, sizeof size, "%zx\r\n", c.size());
    out += size;
    out += c;
    out += "\r\n";
  }
  if (final_chunk) out += "0\r\n\r\n";
  return out;
}

}  // namespace

std::vector<std::string> Recorded::lines() const {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    if (nl == std::string::npos) nl = body.size() - 1;
    out.push_back(body.substr(pos, nl + 1 - pos));
    pos = nl + 1;
  }
  return out;
}

std::string fixtureDir() {
  // Compiled in (tests/k8s/replay/CMakeLists.txt): ctest's environment for gtest-discovered
  // tests carries one variable only (FERRY_BUILD_DIR), and a test run from another directory
  // must still find the recordings.
  return FERRY_REPLAY_FIXTURES;
}

std::vector<Recorded> loadCase(const std::string& name) {
  std::string dir = fixtureDir() + "/" + name;
  std::string meta = readBinary(dir + "/exchanges.json");
  if (meta.empty()) return {};
  json::value v = json::parse(meta);
  std::vector<Recorded> out;
  for (const auto& e : v.at("exchanges").as_array()) {
    Recorded r;
    r.target = std::string(e.at("target").as_string());
    r.raw = readBinary(dir + "/" + std::string(e.at("file").as_string()));
    for (const auto& read : e.at("reads").as_array()) r.read_sizes.push_back(read.at("bytes").to_number<size_t>());
    parseRaw(r);
    out.push_back(std::move(r));
  }
  return out;
}

Reply verbatim(const Recorded& r) {
  Reply reply;
  reply.bytes = r.raw;
  reply.segments = r.read_sizes;
  return reply;
}

Reply rechunked(const Recorded& r, const std::vector<std::string>& chunks, bool final_chunk) {
  if (!r.chunked) throw std::runtime_error("rechunked() needs a chunked recording: " + r.target);
  Reply reply;
  reply.bytes = r.head + frame(chunks, final_chunk);
  return reply;
}

std::vector<std::string> splitEvery(const std::string& body, size_t size) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < body.size(); pos += size) out.push_back(body.substr(pos, size));
  return out;
}

Reply withStatus(const Recorded& r, int code, const std::string& reason, const std::string& extra_headers) {
  Reply reply;
  size_t eol = r.raw.find("\r\n");
  reply.bytes = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\n" + extra_headers + r.raw.substr(eol + 2);
  return reply;
}

Reply headerThenSilence(const Recorded& r) {
  Reply reply;
  reply.bytes = r.head;
  reply.hang = true;
  return reply;
}

std::string Request::param(const std::string& name) const {
  size_t q = target.find('?');
  if (q == std::string::npos) return {};
  std::string query = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string::npos) amp = query.size();
    std::string kv = query.substr(pos, amp - pos);
    size_t eq = kv.find('=');
    if (kv.substr(0, eq) == name) return eq == std::string::npos ? "" : kv.substr(eq + 1);
    pos = amp + 1;
  }
  return {};
}

struct ReplayServer::Impl : std::enable_shared_from_this<ReplayServer::Impl> {
  explicit Impl(asio::io_context& i) : io(i), acceptor(i, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}
  asio::io_context& io;
  tcp::acceptor acceptor;
  asio::ssl::context tls{asio::ssl::context::tls_server};
  std::string cert_pem, key_pem;
  Responder responder;
  std::vector<Request> requests;
  std::vector<std::shared_ptr<asio::steady_timer>> hangs;

  asio::awaitable<void> acceptLoop(std::shared_ptr<Impl> self) {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(kTuple);
      if (ec) co_return;
      asio::co_spawn(io, serve(self, std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(std::shared_ptr<Impl> self, tcp::socket socket) {
    asio::ssl::stream<tcp::socket> stream(std::move(socket), tls);
    auto [hec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kTuple);
    if (hec) co_return;
    std::string in;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      auto [ec, n] = co_await stream.async_read_some(asio::buffer(buf), kTuple);
      if (ec) co_return;
      in.append(buf, n);
    }
    Request req;
    size_t sp1 = in.find(' '), sp2 = in.find(' ', sp1 + 1);
    req.target = in.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t auth = in.find("\r\nAuthorization: ");
    if (auth != std::string::npos) {
      size_t start = auth + 17;
      req.authorization = in.substr(start, in.find("\r\n", start) - start);
    }
    size_t index = requests.size();
    requests.push_back(req);
    Reply reply;
    if (responder) {
      reply = responder(index, req);
    } else {
      reply.hang = true;
    }
    size_t pos = 0;
    for (size_t seg : reply.segments) {
      if (pos >= reply.bytes.size()) break;
      seg = std::min(seg, reply.bytes.size() - pos);
      auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(reply.bytes.data() + pos, seg), kTuple);
      if (wec) co_return;
      pos += seg;
      if (reply.gap.count() > 0) {
        asio::steady_timer t(io, reply.gap);
        co_await t.async_wait(kTuple);
      }
    }
    if (pos < reply.bytes.size()) {
      auto [wec, wn] = co_await asio::async_write(stream, asio::buffer(reply.bytes.data() + pos, reply.bytes.size() - pos),
                                                  kTuple);
      if (wec) co_return;
    }
    if (reply.cut) {
      boost::system::error_code ignored;
      stream.lowest_layer().close(ignored);
      co_return;
    }
    if (reply.hang || reply.bytes.empty()) {
      auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::hours(24));
      hangs.push_back(timer);
      co_await timer->async_wait(kTuple);
      co_return;
    }
    // Complete response: wait for the client to hang up, as a server with keep-alive does.
    for (;;) {
      auto [ec, n] = co_await stream.async_read_some(asio::buffer(buf), kTuple);
      if (ec) break;
    }
  }
};

ReplayServer::ReplayServer(asio::io_context& io) : impl_(std::make_shared<Impl>(io)) {
  makeCertificate(impl_->cert_pem, impl_->key_pem);
  impl_->tls.use_certificate_chain(asio::buffer(impl_->cert_pem));
  impl_->tls.use_private_key(asio::buffer(impl_->key_pem), asio::ssl::context::pem);
  asio::co_spawn(io, impl_->acceptLoop(impl_), asio::detached);
}

ReplayServer::~ReplayServer() {
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
  for (auto& t : impl_->hangs) t->cancel();
}

void ReplayServer::respond(Responder responder) { impl_->responder = std::move(responder); }

ReplayServer::Responder ReplayServer::byPath(std::map<std::string, std::vector<Recorded>> recorded) {
  auto served = std::make_shared<std::map<std::string, size_t>>();
  return [recorded = std::move(recorded), served](size_t, const Request& request) {
    size_t n = (*served)[request.path()]++;
    auto it = recorded.find(request.path());
    if (it != recorded.end() && n < it->second.size()) return verbatim(it->second[n]);
    Reply idle;
    idle.hang = true;
    return idle;
  };
}

std::string ReplayServer::url() const {
  return "https://127.0.0.1:" + std::to_string(impl_->acceptor.local_endpoint().port());
}
const std::string& ReplayServer::caPem() const { return impl_->cert_pem; }
const std::vector<Request>& ReplayServer::requests() const { return impl_->requests; }

}  // namespace ferry::k8s::replay
