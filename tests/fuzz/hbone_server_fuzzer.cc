// The HBONE server after TLS: raw bytes from an authenticated peer into the server side of
// H2Connection (proxy/hbone/h2_connection.cc: nghttp2, HPACK, our callbacks, flow control,
// stream bookkeeping) and each complete request through the CONNECT rules
// (proxy/hbone/connect_request.cc) as serveStream judges it. The connection is driven through
// its frame layer (startFrames / receiveFrames / sendFrames) without a socket or TLS, so the
// fuzzer explores frames rather than handshakes.
//
// The input is what the client sends after the connection preface (which is added here):
// split at most kMaxPasses times, at the 4-byte marker "FYRP", into read passes, with the
// server's answers collected, streams' data written out and window given back in between,
// as the read and write loops do. Checks beyond the sanitizers: a request reaches the
// handler complete and within the header list cap.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>

#include "proxy/common/log.h"
#include "proxy/hbone/connect_request.h"
#include "proxy/hbone/h2_connection.h"
#include "proxy/workloads/file_source.h"

namespace asio = boost::asio;
using namespace ferry;
using hbone::H2Connection;
using hbone::H2Stream;

namespace {
constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr std::string_view kPassMarker = "FYRP";
constexpr size_t kMaxPasses = 16;
// What a 200 stream sends back per read pass: enough to cross a DATA frame and to meet the
// peer's flow-control window when the input shrinks it.
constexpr size_t kReplyBytes = 20 * 1024;

// The node as the seeds address it: a local HBONE workload on 10.77.1.11, a remote one.
constexpr std::string_view kWorkloads = R"(workloads:
  - {name: web-0, namespace: default, service_account: web, node: node-1, ips: [10.77.1.11], hbone: true}
  - {name: db-0, namespace: data, service_account: db, node: node-2, ips: [10.77.2.11], hbone: true}
)";

struct World {
  asio::io_context io;
  // The connection owns an SSL object only to hold its socket: it is never used here.
  asio::ssl::context tls{asio::ssl::context::tls_server};
  std::shared_ptr<const workloads::Registry> registry;
  common::IpAddress local_ip = asio::ip::make_address("10.77.1.11");
  std::vector<uint16_t> ferry_ports{15001, 15006, 15008, 15000, 15020, 15021};

  World() {
    common::setLogLevel(common::LogLevel::kOff);
    registry = *workloads::parseRegistry(kWorkloads, "fuzz-workloads.yaml", "node-1");
  }
};

World& world() {
  static World* w = new World();
  return *w;
}

// A relay parked on its socket takes DATA straight from the read pass (ReceiveSink), as
// proxy/session/relay.cc does: it writes some of it (here: up to 1000 bytes) and gives that
// window back at once.
struct DirectSink : hbone::ReceiveSink {
  void onReceived(H2Stream& stream) override {
    size_t n = std::min<size_t>(stream.received().size(), 1000);
    stream.received().consume(n);
    stream.consumed(n);
  }
};
DirectSink g_sink;

// What the streams' relays would do between read passes: write out what arrived (giving the
// window back), queue a reply, and end or reset their side as the client did.
void relay(std::vector<std::shared_ptr<H2Stream>>& accepted) {
  static const std::string reply(kReplyBytes, 'r');
  for (auto& stream : accepted) {
    if (stream->closed() || stream->resetCode()) {
      // What the relay does with bytes it will never write (the window comes back).
      stream->setReceiveSink(nullptr);
      stream->discardReceived();
      continue;
    }
    std::string got = stream->received().toString();
    stream->received().clear();
    stream->consumed(got.size());
    if (stream->sendSpace() > 0) stream->send(reply.data(), std::min(reply.size(), stream->sendSpace()));
    if (stream->receivedEof()) stream->sendEof();
    // A client that sends "reset" in its data gets the relay's answer to a reset upstream.
    if (got.find("reset") != std::string::npos) stream->reset(hbone::kH2ConnectError);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& w = world();
  auto conn = H2Connection::create(
      H2Connection::Role::kServer,
      std::make_unique<hbone::TlsStream>(hbone::Tcp::socket(w.io), w.tls), hbone::H2Options{});
  std::vector<std::shared_ptr<H2Stream>> accepted;
  conn->setRequestHandler([&w, &accepted](std::shared_ptr<H2Stream> stream) {
    // Only complete requests within the header list cap reach the handler.
    size_t header_bytes = 0;
    for (const auto& h : stream->headers()) header_bytes += h.name.size() + h.value.size() + 32;
    if (!stream->headersDone() || header_bytes > hbone::kServerMaxHeaderList) std::abort();
    auto verdict = hbone::parseConnect(stream->headers(), w.local_ip, w.ferry_ports);
    if (verdict.status != 200) {
      stream->respond(verdict.status);
      return;
    }
    stream->respond(200);
    stream->releaseHeaders();
    // Half of the relays are parked on their socket (direct delivery), half are busy.
    if (stream->id() % 4 == 1) stream->setReceiveSink(&g_sink);
    accepted.push_back(std::move(stream));
  });
  conn->startFrames();
  (void)conn->sendFrames();

  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool open = conn->receiveFrames(reinterpret_cast<const uint8_t*>(kPreface.data()), kPreface.size());
  for (size_t pass = 0; open && pass < kMaxPasses && !input.empty(); ++pass) {
    size_t cut = pass + 1 < kMaxPasses ? input.find(kPassMarker) : std::string_view::npos;
    std::string_view chunk = input.substr(0, cut);
    input = cut == std::string_view::npos ? std::string_view() : input.substr(cut + kPassMarker.size());
    open = conn->receiveFrames(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size());
    // Everything the session queued, as the write loop would send it (several batches).
    for (int batch = 0; batch < 64 && !conn->sendFrames().empty(); ++batch) {
    }
    if (open) relay(accepted);
  }
  for (int batch = 0; batch < 64 && !conn->sendFrames().empty(); ++batch) {
  }
  conn->close("end of input");
  accepted.clear();  // each stream holds its connection
  conn.reset();
  w.io.poll();  // nothing should be queued; run it so that nothing is left behind either
  w.io.restart();
  return 0;
}
