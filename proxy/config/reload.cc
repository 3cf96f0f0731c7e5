#include "proxy/config/reload.h"

namespace ferry::config {

namespace {

// Named when `next` differs from `running` in a member no table row covers: a change that
// cannot be reloaded safely, so it waits for a restart (and the table needs the row).
constexpr char kUnlistedKey[] = "(a key missing from the reload table)";

void note(std::vector<std::string>& keys, const char* key) {
  // Rows of one key (kubernetes.daemonset) follow each other: report it once.
  if (keys.empty() || keys.back() != key) keys.emplace_back(key);
}

}  // namespace

ConfigChange diffConfig(const Config& running, const Config& next) {
  ConfigChange change;
  Config covered = running;
#define FERRY_X(key, how, member)                                            \
  if (!(running.member == next.member)) {                                    \
    note(Reload::how == Reload::kLive ? change.live : change.restart, key);   \
  }                                                                          \
  covered.member = next.member;
  FERRY_CONFIG_KEYS(FERRY_X)
#undef FERRY_X
  if (!(covered == next)) change.restart.emplace_back(kUnlistedKey);
  return change;
}

void applyLive(Config& running, const Config& next) {
#define FERRY_X(key, how, member) \
  if (Reload::how == Reload::kLive) running.member = next.member;
  FERRY_CONFIG_KEYS(FERRY_X)
#undef FERRY_X
}

}  // namespace ferry::config
