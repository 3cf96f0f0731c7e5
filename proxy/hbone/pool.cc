#include "proxy/hbone/pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ferry::hbone {

std::string PoolKey::str() const {
  return absl::StrCat(source_id, "@", source_ip.to_string(), " -> ", destination_id, "@",
                      common::formatHostPort(destination));
}

void Pool::prune(Entry& entry) {
  auto& c = entry.connections;
  c.erase(std::remove_if(c.begin(), c.end(), [](const auto& conn) { return !conn->usable(); }),
          c.end());
}

void Pool::sweep() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    prune(it->second);
    if (it->second.connections.empty() && !it->second.connecting) {
      entries_.erase(it++);
    } else {
      ++it;
    }
  }
}

boost::asio::awaitable<absl::StatusOr<std::shared_ptr<H2Connection>>> Pool::acquire(
    const PoolKey& key, const Connector& connect) {
  // Keys of workloads that went away would otherwise stay forever.
  if (++acquires_ % kSweepEvery == 0) sweep();
  for (;;) {
    Entry& entry = entries_[key];
    prune(entry);
    for (const auto& conn : entry.connections) {
      if (conn->streamCapacity() > 0) co_return conn;
    }
    if (entry.connecting) {
      // Someone is already handshaking for this key: wait for it, then look again.
      auto event = entry.connecting;
      co_await event->wait();
      Entry& after = entries_[key];
      if (!after.last_error.ok() && after.connections.empty()) co_return after.last_error;
      continue;
    }
    auto event = std::make_shared<net::Event>(executor_);
    entry.connecting = event;
    ++handshakes_;
    auto result = co_await connect();
    // `entry` may have moved while we were suspended (the map rehashes): look it up again.
    Entry& done = entries_[key];
    done.connecting.reset();
    if (result.ok()) {
      done.last_error = absl::OkStatus();
      done.connections.push_back(*result);
    } else {
      done.last_error = result.status();
    }
    event->set();
    if (!result.ok()) co_return result.status();
    if ((*result)->streamCapacity() > 0) co_return *result;
  }
}

size_t Pool::drainSource(const common::IpAddress& source_ip) {
  size_t drained = 0;
  for (auto& [key, entry] : entries_) {
    if (key.source_ip != source_ip) continue;
    for (auto& c : entry.connections) {
      if (c->usable()) ++drained;
      c->drain();
    }
    prune(entry);
  }
  return drained;
}

size_t Pool::connectionCount() const {
  size_t n = 0;
  for (const auto& [k, e] : entries_) {
    for (const auto& c : e.connections) n += c->usable() ? 1 : 0;
  }
  return n;
}

void Pool::drainAll() {
  for (auto& [k, e] : entries_) {
    for (auto& c : e.connections) c->drain();
  }
}

}  // namespace ferry::hbone
