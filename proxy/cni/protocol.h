#pragma once
// What ferry-cni and ferryd say to each other on the node's enrolment socket
// (docs/install.md, "The CNI chain"): one request and one answer per connection, each a
// JSON object behind a 4-byte big-endian length. The version is in every message; a ferryd
// answers a version it does not speak with an error naming the versions it does, so that a
// plugin and a daemon of different releases fail loudly, never half-understand each other.
// Boost.JSON only: the plugin links it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::cni {

inline constexpr int kProtocolVersion = 1;
// A request carries a few names and addresses; anything this large is not one.
inline constexpr uint32_t kMaxMessageBytes = 64 * 1024;

enum class Verb { kAdd, kDel, kCheck };
const char* verbName(Verb verb);

struct Request;
// "<podNamespace>/<podName>": the pod's key, as ferryd's registry and logs name it.
std::string podKey(const Request& request);

struct Request {
  Verb verb = Verb::kAdd;
  std::string container_id;
  std::string netns;  // the sandbox's netns path (may be empty on DEL)
  std::string ifname;
  std::string pod_namespace, pod_name, pod_uid;  // from CNI_ARGS; uid may be empty
  std::vector<std::string> ips;                  // the pod's addresses (no prefix length)
  std::vector<std::string> host_interfaces;      // candidates for its host-side device
};

// enrolled: the programs are attached (ADD) or still are (CHECK). not_enrolled: the labels
// keep the pod out of the mesh (the plugin passes). released: DEL done. retry: ferryd
// cannot tell yet (it has not seen the pod); error: enrolment failed, `reason` says why.
enum class Verdict { kEnrolled, kNotEnrolled, kReleased, kRetry, kError };
const char* verdictName(Verdict verdict);

struct Answer {
  Verdict verdict = Verdict::kError;
  std::string reason;
  std::string device;  // the host-side device the programs are on (enrolled)
};

std::string encodeRequest(const Request& request);
std::string encodeAnswer(const Answer& answer);
// nullopt with `error` set: not JSON, another version, a missing or mistyped field.
std::optional<Request> decodeRequest(std::string_view text, std::string* error);
std::optional<Answer> decodeAnswer(std::string_view text, std::string* error);

// The 4-byte big-endian length that precedes each message.
std::string frameHeader(uint32_t length);
uint32_t frameLength(const unsigned char header[4]);

}  // namespace ferry::cni
