#include "proxy/net/buffer_chain.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

namespace ferry::net {
namespace {

// Blocks a thread keeps after its queues emptied: a worker moving bulk data through a few
// streams cycles through about this many; more would only be memory nobody uses.
constexpr size_t kMaxFreeBlocks = 64;  // 4 MiB per thread

struct FreeList {
  std::vector<char*> blocks;
  ~FreeList();
};
thread_local FreeList t_free;

// Process-wide counts behind BufferChain::blocks(): one relaxed add per block taken or
// given back (a block carries 64 KiB, so this is nothing per byte).
std::atomic<int64_t> g_in_use{0};
std::atomic<int64_t> g_spare{0};

FreeList::~FreeList() {
  g_spare.fetch_sub(static_cast<int64_t>(blocks.size()), std::memory_order_relaxed);
  for (char* b : blocks) delete[] b;
}

}  // namespace

char* BufferChain::takeBlock() {
  g_in_use.fetch_add(1, std::memory_order_relaxed);
  if (t_free.blocks.empty()) return new char[kBlockSize];
  char* b = t_free.blocks.back();
  t_free.blocks.pop_back();
  g_spare.fetch_sub(1, std::memory_order_relaxed);
  return b;
}

void BufferChain::giveBlock(char* block) {
  g_in_use.fetch_sub(1, std::memory_order_relaxed);
  if (t_free.blocks.size() < kMaxFreeBlocks) {
    t_free.blocks.push_back(block);
    g_spare.fetch_add(1, std::memory_order_relaxed);
  } else {
    delete[] block;
  }
}

BlockCounts BufferChain::blocks() {
  return {static_cast<uint64_t>(std::max<int64_t>(0, g_in_use.load(std::memory_order_relaxed))),
          static_cast<uint64_t>(std::max<int64_t>(0, g_spare.load(std::memory_order_relaxed)))};
}

void BufferChain::releaseFreeBlocks() {
  g_spare.fetch_sub(static_cast<int64_t>(t_free.blocks.size()), std::memory_order_relaxed);
  for (char* b : t_free.blocks) delete[] b;
  t_free.blocks.clear();
  t_free.blocks.shrink_to_fit();
}

BufferChain::~BufferChain() { releaseAll(); }

BufferChain::BufferChain(BufferChain&& other) noexcept
    : blocks_(std::move(other.blocks_)),
      head_(std::exchange(other.head_, 0)),
      tail_(std::exchange(other.tail_, 0)),
      size_(std::exchange(other.size_, 0)),
      spare_(std::exchange(other.spare_, nullptr)) {
  other.blocks_.clear();
}

BufferChain& BufferChain::operator=(BufferChain&& other) noexcept {
  if (this != &other) {
    releaseAll();
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
    head_ = std::exchange(other.head_, 0);
    tail_ = std::exchange(other.tail_, 0);
    size_ = std::exchange(other.size_, 0);
    spare_ = std::exchange(other.spare_, nullptr);
  }
  return *this;
}

void BufferChain::releaseAll() {
  for (char* b : blocks_) giveBlock(b);
  blocks_.clear();
  // An empty vector would keep its capacity: an idle stream holds nothing.
  blocks_.shrink_to_fit();
  if (spare_ != nullptr) giveBlock(std::exchange(spare_, nullptr));
  head_ = tail_ = size_ = 0;
}

void BufferChain::clear() { releaseAll(); }

void BufferChain::append(const char* data, size_t n) {
  while (n > 0) {
    if (blocks_.empty() || tail_ == kBlockSize) {
      blocks_.push_back(takeBlock());
      tail_ = 0;
    }
    size_t c = std::min(n, kBlockSize - tail_);
    std::memcpy(blocks_.back() + tail_, data, c);
    tail_ += c;
    size_ += c;
    data += c;
    n -= c;
  }
}

size_t BufferChain::prepare(size_t max, boost::asio::mutable_buffer out[2]) {
  size_t count = 0;
  if (!blocks_.empty() && tail_ < kBlockSize && max > 0) {
    size_t c = std::min(max, kBlockSize - tail_);
    out[count++] = boost::asio::mutable_buffer(blocks_.back() + tail_, c);
    max -= c;
  }
  if (max > 0) {
    if (spare_ == nullptr) spare_ = takeBlock();
    out[count++] = boost::asio::mutable_buffer(spare_, std::min(max, kBlockSize));
  }
  return count;
}

void BufferChain::commit(size_t n) {
  if (!blocks_.empty() && tail_ < kBlockSize) {
    size_t c = std::min(n, kBlockSize - tail_);
    tail_ += c;
    size_ += c;
    n -= c;
  }
  if (n > 0 && spare_ != nullptr) {
    blocks_.push_back(std::exchange(spare_, nullptr));
    tail_ = std::min(n, kBlockSize);
    size_ += tail_;
  }
  if (spare_ != nullptr) giveBlock(std::exchange(spare_, nullptr));
}

template <typename Visit>
void BufferChain::forEachSpan(Visit visit) const {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    size_t begin = i == 0 ? head_ : 0;
    size_t end = i + 1 == blocks_.size() ? tail_ : kBlockSize;
    if (end > begin && !visit(blocks_[i] + begin, end - begin)) return;
  }
}

size_t BufferChain::gather(boost::asio::const_buffer* out, size_t max_buffers) const {
  size_t count = 0;
  if (max_buffers == 0) return 0;
  forEachSpan([&](const char* p, size_t n) {
    out[count++] = boost::asio::const_buffer(p, n);
    return count < max_buffers;
  });
  return count;
}

void BufferChain::consume(size_t n) {
  n = std::min(n, size_);
  size_ -= n;
  if (size_ == 0) {
    releaseAll();
    return;
  }
  while (n > 0) {
    size_t end = blocks_.size() == 1 ? tail_ : kBlockSize;
    size_t c = std::min(n, end - head_);
    head_ += c;
    n -= c;
    if (head_ == end) {
      giveBlock(blocks_.front());
      blocks_.erase(blocks_.begin());
      head_ = 0;
    }
  }
}

size_t BufferChain::copyOut(char* dst, size_t n) {
  size_t done = peek(dst, n);
  consume(done);
  return done;
}

size_t BufferChain::peek(char* dst, size_t n) const {
  size_t done = 0;
  if (n == 0) return 0;
  forEachSpan([&](const char* p, size_t len) {
    size_t c = std::min(n - done, len);
    std::memcpy(dst + done, p, c);
    done += c;
    return done < n;
  });
  return done;
}

std::string BufferChain::toString() const {
  std::string out;
  out.reserve(size_);
  forEachSpan([&](const char* p, size_t n) {
    out.append(p, n);
    return true;
  });
  return out;
}

}  // namespace ferry::net
