#include "proxy/cni/api_fetch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "proxy/cni/poll_wait.h"
#include "proxy/common/unique_fd.h"

namespace ferry::cni {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxAnswerBytes = 4 << 20;  // a Pod object is a few KiB

std::string sslError(const char* what) {
  unsigned long e = ERR_get_error();
  char buf[256] = "";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return std::string(what) + (e != 0 ? std::string(": ") + buf : std::string());
}

// A connected non-blocking socket to host:port, or why not.
std::variant<int, std::string> connectTo(const ApiAccess& a, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  // An IP literal (the in-cluster address) needs no resolver.
  hints.ai_flags |= AI_NUMERICHOST;
  int rc = ::getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &found);
  if (rc != 0) {
    hints.ai_flags &= ~AI_NUMERICHOST;
    rc = ::getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &found);
  }
  if (rc != 0) return std::string("cannot resolve ") + a.host + ": " + ::gai_strerror(rc);
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    common::UniqueFd guard(fd);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      why = std::string("connect: ") + std::strerror(errno);
      continue;
    }
    if (!waitFor(fd, POLLOUT, deadline)) return std::string("connect: no answer in time");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      why = std::string("connect: ") + std::strerror(err);
      continue;
    }
    return guard.release();
  }
  return why;
}

// Drives one SSL call that may want to read or write until it completes; `op` returns
// SSL_*'s result. <0: failed (SSL_get_error's code in *code).
template <class Op>
int drive(SSL* ssl, int fd, Clock::time_point deadline, Op op, int* code) {
  for (;;) {
    int n = op();
    if (n > 0) return n;
    *code = SSL_get_error(ssl, n);
    if (*code == SSL_ERROR_WANT_READ) {
      if (!waitFor(fd, POLLIN, deadline)) return -2;
    } else if (*code == SSL_ERROR_WANT_WRITE) {
      if (!waitFor(fd, POLLOUT, deadline)) return -2;
    } else {
      return -1;
    }
  }
}

}  // namespace

std::variant<ApiReply, std::string> apiGet(const ApiAccess& a, const std::string& path, Clock::time_point deadline) {
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!ctx) return sslError("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  {
    std::unique_ptr<BIO, int (*)(BIO*)> bio(BIO_new_mem_buf(a.ca_pem.data(), static_cast<int>(a.ca_pem.size())), BIO_free);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    int added = 0;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      if (X509_STORE_add_cert(store, cert) == 1) ++added;
      X509_free(cert);
    }
    ERR_clear_error();  // the end of the PEM text
    if (added == 0) return std::string("the kubeconfig's certificate-authority-data holds no certificate");
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);

  auto connected = connectTo(a, deadline);
  if (auto* why = std::get_if<std::string>(&connected)) return *why;
  common::UniqueFd fd(std::get<int>(connected));
  std::unique_ptr<SSL, void (*)(SSL*)> ssl(SSL_new(ctx.get()), SSL_free);
  if (!ssl) return sslError("SSL_new");
  SSL_set_fd(ssl.get(), fd.get());
  unsigned char ip[16];
  bool is_ip = ::inet_pton(AF_INET, a.host.c_str(), ip) == 1 || ::inet_pton(AF_INET6, a.host.c_str(), ip) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), a.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), a.host.c_str());
    SSL_set1_host(ssl.get(), a.host.c_str());
  }
  int code = 0;
  int rc = drive(ssl.get(), fd.get(), deadline, [&] { return SSL_connect(ssl.get()); }, &code);
  if (rc == -2) return std::string("TLS handshake: no answer in time");
  if (rc < 0) {
    long verify = SSL_get_verify_result(ssl.get());
    if (verify != X509_V_OK) {
      return std::string("the API server's certificate: ") + X509_verify_cert_error_string(verify);
    }
    return sslError("TLS handshake");
  }
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + (a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host) +
                        ":" + a.port + "\r\nAuthorization: Bearer " + a.token +
                        "\r\nAccept: application/json\r\nUser-Agent: ferry-cni\r\nConnection: close\r\n\r\n";
  rc = drive(ssl.get(), fd.get(), deadline,
             [&] { return SSL_write(ssl.get(), request.data(), static_cast<int>(request.size())); }, &code);
  if (rc == -2) return std::string("sending the request: no progress in time");
  if (rc < 0) return sslError("sending the request");
  std::string answer;
  for (;;) {
    char buf[16384];
    rc = drive(ssl.get(), fd.get(), deadline, [&] { return SSL_read(ssl.get(), buf, sizeof(buf)); }, &code);
    if (rc > 0) {
      answer.append(buf, static_cast<size_t>(rc));
      if (answer.size() > kMaxAnswerBytes) return std::string("the answer is larger than 4 MiB");
      continue;
    }
    if (rc == -2) return std::string("no whole answer in time");
    // The server closed: cleanly (close_notify), or without it (Go's server may): the answer
    // is judged whole by its length below.
    if (code == SSL_ERROR_ZERO_RETURN || code == SSL_ERROR_SYSCALL) break;
    return sslError("reading the answer");
  }
  ERR_clear_error();
  return parseHttpResponse(answer);
}

}  // namespace ferry::cni
