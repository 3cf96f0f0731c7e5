#include "proxy/net/tls_channel.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proxy/identity/openssl_util.h"

namespace ferry::net {
namespace asio = boost::asio;

namespace {

// SSL_get_error() needs an empty error queue before the call it explains. Clearing it
// walks all of its slots, once per record: only do that when something is queued (every
// failure here ends the connection and drains the queue into its message).
void clearTlsErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

// The handshake's SSL object, with a reference of the channel's own: the stream's engine
// drops its reference when it goes, and the object stays.
identity::SslPtr shareSsl(TlsStream& tls) {
  SSL* ssl = tls.native_handle();
  SSL_up_ref(ssl);
  return identity::SslPtr(ssl);
}

}  // namespace

std::string tlsError(std::string_view what) {
  std::string errors = identity::drainOpenSslErrors();
  std::string out(what);
  if (!errors.empty()) absl::StrAppend(&out, ": ", errors);
  return out;
}

// The BIO between OpenSSL and the channel's ciphertext chains.
struct ChannelBio {
  static int write(BIO* bio, const char* data, int len) {
    static_cast<TlsChannel*>(BIO_get_data(bio))->out_.append(data, static_cast<size_t>(len));
    return len;
  }
  static int read(BIO* bio, char* data, int len) {
    auto* channel = static_cast<TlsChannel*>(BIO_get_data(bio));
    BIO_clear_retry_flags(bio);
    if (channel->in_.empty()) {
      BIO_set_retry_read(bio);
      return -1;
    }
    return static_cast<int>(channel->in_.copyOut(data, static_cast<size_t>(len)));
  }
  static long ctrl(BIO* bio, int cmd, long, void*) {
    switch (cmd) {
      case BIO_CTRL_FLUSH:
        return 1;
      case BIO_CTRL_PENDING:
        return static_cast<long>(static_cast<TlsChannel*>(BIO_get_data(bio))->in_.size());
      default:
        return 0;
    }
  }
  static int create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
  }
  static const BIO_METHOD* method() {
    static BIO_METHOD* m = [] {
      BIO_METHOD* meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ferry-tls-channel");
      BIO_meth_set_write(meth, &ChannelBio::write);
      BIO_meth_set_read(meth, &ChannelBio::read);
      BIO_meth_set_ctrl(meth, &ChannelBio::ctrl);
      BIO_meth_set_create(meth, &ChannelBio::create);
      return meth;
    }();
    return m;
  }
};

TlsChannel::TlsChannel(std::unique_ptr<TlsStream> tls)
    : ssl_(shareSsl(*tls)), socket_(std::move(tls->next_layer())) {
  SSL* ssl = ssl_.get();
  // Bytes that arrived with the end of the handshake (the peer's preface, SETTINGS, a
  // first CONNECT) sit in Asio's BIO pair: move them over, before the stream frees the
  // pair's outer half that holds them. Asio reads at most one pair's worth at a time and
  // SSL drains the pair before asking for more, so nothing is left in Asio's own input
  // buffer.
  BIO* old = SSL_get_rbio(ssl);
  char buf[4096];
  int n;
  while (old != nullptr && (n = BIO_read(old, buf, sizeof(buf))) > 0) in_.append(buf, n);
  BIO* bio = BIO_new(ChannelBio::method());
  BIO_set_data(bio, this);
  SSL_set_bio(ssl, bio, bio);  // one reference for both directions; frees Asio's inner half
  // The rest of the stream goes: its engine frees the pair's outer half (unpaired since
  // the line above) and drops its reference to the SSL object; its record buffers and
  // timers go with it. A verify callback of the stream's own (set_verify_callback, which
  // ferry does not use) lives in the SSL's app data: the engine deletes it and clears the
  // app data, and Asio's static verify function left in the SSL refuses without one. No
  // certificate is verified after a TLS 1.3 handshake anyway (no renegotiation, no
  // post-handshake authentication asked for).
  tls.reset();
  // Asio asks for partial writes (SSL_write returns after each record); our BIO takes
  // every record at once, so one SSL_write turns a whole batch into records.
  SSL_clear_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
  // The TLS contexts release OpenSSL's record buffers after every use, which suits the
  // handshake-only and short-lived uses; a channel carries one record after the other,
  // and a malloc, zeroing and free of two ~17 KiB buffers per record cost about 10 % of
  // the request/response rate. It keeps them; its owner frees them when it goes quiet
  // (releaseBuffers).
  SSL_clear_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
}

size_t TlsChannel::readCiphertext(size_t max, Drained& drained, boost::system::error_code& ec) {
  asio::mutable_buffer bufs[2];
  size_t count = in_.prepare(max, bufs);
  size_t n = readAvailable(socket(), std::span<const asio::mutable_buffer>(bufs, count), drained, ec);
  in_.commit(n);
  return n;
}

bool TlsChannel::recordBuffered() const {
  if (SSL_pending(ssl_.get()) > 0) return true;
  constexpr size_t kHeader = 5;  // type, legacy version, length (RFC 8446 §5.1)
  unsigned char header[kHeader];
  if (in_.peek(reinterpret_cast<char*>(header), kHeader) < kHeader) return false;
  size_t length = (static_cast<size_t>(header[3]) << 8) | header[4];
  // An oversized length is SSL_read's to reject (record_overflow) now, not after 64 KiB.
  constexpr size_t kMaxCiphertext = (1 << 14) + 256;
  return length > kMaxCiphertext || in_.size() >= kHeader + length;
}

int TlsChannel::decrypt(uint8_t* out, size_t size, std::string& error) {
  if (!recordBuffered()) return 0;
  SSL* ssl = ssl_.get();
  clearTlsErrors();
  int n = SSL_read(ssl, out, static_cast<int>(size));
  if (n > 0) return n;
  int err = SSL_get_error(ssl, n);
  if (err == SSL_ERROR_WANT_READ) return 0;
  error = err == SSL_ERROR_ZERO_RETURN ? std::string("peer closed the connection") : tlsError("read: TLS error");
  return -1;
}

bool TlsChannel::encrypt(const uint8_t* data, size_t size, std::string& error) {
  // The BIO accepts everything, so one SSL_write turns the whole batch into records.
  clearTlsErrors();
  int n = SSL_write(ssl_.get(), data, static_cast<int>(size));
  if (n <= 0 || static_cast<size_t>(n) != size) {
    error = tlsError("write: TLS error");
    return false;
  }
  return true;
}

TlsChannel::Drain TlsChannel::drain(boost::system::error_code& ec) {
  while (!out_.empty()) {
    size_t n = writeSome(socket(), out_, ec);
    if (ec == asio::error::would_block) {
      ec.clear();
      return Drain::kBlocked;
    }
    if (ec) return Drain::kFailed;
    out_.consume(n);
  }
  return Drain::kDone;
}

void TlsChannel::releaseBuffers() { SSL_free_buffers(ssl_.get()); }

}  // namespace ferry::net
