#pragma once
// The replay tier's stand-in API server (tests/k8s/replay/README.md): a TLS server on
// 127.0.0.1 that answers each request with bytes recorded from a real kube-apiserver by
// tests/k8s/record_wire.py, verbatim or derived from them (re-chunked, truncated, paced,
// another status line) where a real server cannot produce a case on demand.
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace ferry::k8s::replay {

// One recorded exchange: what record_wire.py wrote for one GET.
struct Recorded {
  std::string target;              // the request the recorder made
  std::string raw;                 // every byte of the response, framing included
  std::vector<size_t> read_sizes;  // the size of each recv() while recording
  // Parsed from raw:
  std::string head;                // status line and headers, ending in "\r\n\r\n"
  int status = 0;
  bool chunked = false;
  std::vector<std::string> chunks;  // chunk payloads, as framed by the server
  std::string body;                 // the payload (chunks joined)
  // A watch body's events, one JSON text each (the server ends each with "\n").
  std::vector<std::string> lines() const;
};

// The fixture directory of the replay tier (tests/k8s/replay/fixtures in the source tree).
std::string fixtureDir();
// The exchanges of one recorded case in order; empty when the case was not recorded.
std::vector<Recorded> loadCase(const std::string& name);

// A response: its bytes and how they are written.
struct Reply {
  std::string bytes;
  std::vector<size_t> segments;  // sizes of successive writes; the rest goes in one write
  std::chrono::milliseconds gap{0};  // pause between writes ("slow chunks")
  bool cut = false;   // after the bytes, drop the TCP connection without a TLS close
  bool hang = false;  // after the bytes, stay open and silent until the test ends
};

// Recorded bytes exactly, written in the sizes they were read in while recording.
Reply verbatim(const Recorded& r);
// The recorded head with a new body framed as the given chunks (and the last chunk).
// Derived: the chunk boundaries are ours, the bytes inside them the server's.
Reply rechunked(const Recorded& r, const std::vector<std::string>& chunks, bool final_chunk = true);
// The body cut into chunks of `size` bytes (an event split over many chunks).
std::vector<std::string> splitEvery(const std::string& body, size_t size);
// The recorded response with another status line and extra headers ("Retry-After: 7\r\n").
Reply withStatus(const Recorded& r, int code, const std::string& reason, const std::string& extra_headers);
// A 200 whose body never comes: the header of `r` (a watch), then silence.
Reply headerThenSilence(const Recorded& r);

struct Request {
  std::string target;
  std::string authorization;
  // The value of a query parameter ("" when absent).
  std::string param(const std::string& name) const;
  std::string path() const { return target.substr(0, target.find('?')); }
};

class ReplayServer {
 public:
  // Replies by request index; requests past the script hang (an idle watch).
  using Responder = std::function<Reply(size_t index, const Request& request)>;
  // Several informers at once: each path's recordings in order (a LIST's pages, its WATCH),
  // verbatim; a path past its recordings, or not named, hangs (an idle watch).
  static Responder byPath(std::map<std::string, std::vector<Recorded>> recorded);

  explicit ReplayServer(boost::asio::io_context& io);
  ~ReplayServer();
  void respond(Responder responder);
  std::string url() const;          // https://127.0.0.1:PORT
  const std::string& caPem() const;  // trust anchor for the server's certificate
  const std::vector<Request>& requests() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ferry::k8s::replay
