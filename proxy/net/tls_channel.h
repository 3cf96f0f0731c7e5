#pragma once
// TLS over buffer chains: after Asio's ssl::stream has done the handshake, the channel
// takes its SSL object and its socket and lets the stream go (with it Asio's two 17 KiB
// record buffers and its BIO pair, ~51 KiB per connection that nothing uses after the
// handshake). The SSL object is driven through a BIO of our own over two BufferChains, so
// that one read() brings in several records and every record of a write batch leaves in
// one writev(), instead of a system call and two extra copies per 16 KiB record through
// Asio's BIO pair. The owner (H2Connection) decides when to read, decrypt, encrypt and
// write; everything runs on its worker's thread.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/system/error_code.hpp>

#include "proxy/identity/openssl_util.h"
#include "proxy/net/buffer_chain.h"
#include "proxy/net/socket_io.h"

namespace ferry::net {

// What the handshake (net/mtls.h) runs on and hands over.
using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

class TlsChannel {
 public:
  // `tls` has completed its handshake. The channel keeps its SSL object and socket and
  // destroys the rest; bytes that arrived with the handshake's end (the peer's first
  // frames) move over from Asio's BIO.
  explicit TlsChannel(std::unique_ptr<TlsStream> tls);
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  SSL* ssl() { return ssl_.get(); }
  boost::asio::ip::tcp::socket& socket() { return socket_; }

  // One read of ciphertext into the input chain (readAvailable: up to `max` bytes,
  // `drained` says what is left); returns the bytes read.
  size_t readCiphertext(size_t max, Drained& drained, boost::system::error_code& ec);
  // Whether SSL_read has a whole record to work on (or plaintext left from one): asking it
  // without one only gets SSL_ERROR_WANT_READ, at the cost of a trip through its state
  // machine per message.
  bool recordBuffered() const;
  // Plaintext out of the buffered records: the bytes written to `out` (> 0); 0 when a
  // record is still incomplete; -1 when the connection ended, with `error` saying why
  // (the peer's close_notify, or a TLS error with OpenSSL's queue).
  int decrypt(uint8_t* out, size_t size, std::string& error);
  // Encrypts all of `data` into the output chain, as records (one SSL_write). False with
  // `error` set when TLS failed.
  bool encrypt(const uint8_t* data, size_t size, std::string& error);
  bool hasCiphertextOut() const { return !out_.empty(); }

  enum class Drain { kDone, kBlocked, kFailed };
  // Writes the output chain while the socket takes it (gathered writes); kFailed with `ec`.
  Drain drain(boost::system::error_code& ec);

  // Gives OpenSSL's record buffers back (it allocates them again with the next record;
  // it keeps them if they hold anything): for a connection that went quiet.
  void releaseBuffers();

 private:
  friend struct ChannelBio;  // the BIO over in_ / out_, defined in the .cc
  identity::SslPtr ssl_;
  boost::asio::ip::tcp::socket socket_;
  BufferChain in_;   // ciphertext read from the socket, not yet decrypted
  BufferChain out_;  // ciphertext SSL_write produced, not yet on the socket
};

// What OpenSSL's error queue holds, after `what` ("read: TLS error: ...").
std::string tlsError(std::string_view what);

}  // namespace ferry::net
