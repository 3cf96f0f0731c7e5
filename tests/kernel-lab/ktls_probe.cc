// ktls_probe: can OpenSSL's kernel-TLS offload engage on this kernel, with the OpenSSL ferry
// links? A TLS 1.3 connection over loopback TCP between two threads of this process, both
// ends with SSL_OP_ENABLE_KTLS and socket BIOs (the only BIOs kTLS works with), then the
// question each end's BIO answers: is the send / receive side in the kernel?
//
// Prints one line per cipher, "ktls_probe: <cipher> tx=yes|no rx=yes|no", and exits 0 when
// it could run the handshake at all (the answer is the output, not the exit status).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

namespace {

void fail(const char* what) {
  std::fprintf(stderr, "ktls_probe: %s\n", what);
  ERR_print_errors_fp(stderr);
  std::exit(1);
}

// A throwaway self-signed ECDSA P-256 certificate: the probe is about the record layer.
void selfSigned(SSL_CTX* ctx) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  if (key == nullptr || cert == nullptr) fail("key generation");
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fy-ktls-probe"), -1, -1, 0);
  X509_set_issuer_name(cert, X509_get_subject_name(cert));
  X509_set_pubkey(cert, key);
  if (X509_sign(cert, key, EVP_sha256()) == 0) fail("signing");
  if (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1) fail("cert/key");
  X509_free(cert);
  EVP_PKEY_free(key);
}

SSL_CTX* context(bool server, const char* ciphersuite) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) fail("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_ciphersuites(ctx, ciphersuite);
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS);
  if (server) selfSigned(ctx);
  return ctx;
}

struct Result {
  bool tx = false;
  bool rx = false;
};

Result probe(const char* ciphersuite) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    fail("loopback listener");
  }
  SSL_CTX* sctx = context(true, ciphersuite);
  std::thread server([&] {
    int fd = ::accept(listener, nullptr, nullptr);
    SSL* ssl = SSL_new(sctx);
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      char buf[16];
      if (SSL_read(ssl, buf, sizeof(buf)) > 0) SSL_write(ssl, "pong", 4);
    }
    SSL_shutdown(ssl);
    SSL_free(ssl);
    ::close(fd);
  });
  SSL_CTX* cctx = context(false, ciphersuite);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) fail("connect");
  SSL* ssl = SSL_new(cctx);
  SSL_set_fd(ssl, fd);
  Result r;
  if (SSL_connect(ssl) != 1) fail("handshake");
  // TLS 1.3 installs the receive key after the server's NewSessionTicket; one round trip
  // gives OpenSSL the chance to hand both directions to the kernel.
  char buf[16];
  if (SSL_write(ssl, "ping", 4) != 4 || SSL_read(ssl, buf, sizeof(buf)) <= 0) fail("round trip");
  r.tx = BIO_get_ktls_send(SSL_get_wbio(ssl)) != 0;
  r.rx = BIO_get_ktls_recv(SSL_get_rbio(ssl)) != 0;
  SSL_shutdown(ssl);
  SSL_free(ssl);
  ::close(fd);
  server.join();
  ::close(listener);
  SSL_CTX_free(cctx);
  SSL_CTX_free(sctx);
  return r;
}

}  // namespace

int main() {
  std::printf("ktls_probe: %s\n", OpenSSL_version(OPENSSL_VERSION));
  for (const char* cs : {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}) {
    Result r = probe(cs);
    std::printf("ktls_probe: %s tx=%s rx=%s\n", cs, r.tx ? "yes" : "no", r.rx ? "yes" : "no");
  }
  return 0;
}
