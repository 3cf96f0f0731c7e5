#pragma once
// A byte queue made of fixed-size blocks that come from, and go back to, a per-thread free
// list. Appending never moves queued bytes (no reallocation copies, and a gathered write
// of the queued blocks stays valid while more bytes are appended); an empty queue holds no
// memory, so an idle stream costs nothing; and a busy worker reuses the same few blocks
// instead of asking malloc (and, for large buffers, the kernel's page faults) every time.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/asio/buffer.hpp>

#include "absl/container/inlined_vector.h"

namespace ferry::net {

// The process's blocks: held by queues now, and kept spare on the threads' free lists
// (ferry_buffer_blocks in /metrics: what buffered data costs, apart from the heap).
struct BlockCounts {
  uint64_t in_use = 0;
  uint64_t spare = 0;
};

class BufferChain {
 public:
  // One block: large enough for a 16 KiB TLS record's worth of DATA several times over,
  // small enough that malloc serves it from its heap rather than from mmap.
  static constexpr size_t kBlockSize = 64 * 1024;

  BufferChain() = default;
  ~BufferChain();
  BufferChain(BufferChain&& other) noexcept;
  BufferChain& operator=(BufferChain&& other) noexcept;
  BufferChain(const BufferChain&) = delete;
  BufferChain& operator=(const BufferChain&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void append(const char* data, size_t n);

  // Room for the next bytes, up to `max`, as at most two buffers (the rest of the last
  // block and a fresh one): read straight into them, then commit() what was read.
  size_t prepare(size_t max, boost::asio::mutable_buffer out[2]);
  void commit(size_t n);

  // Up to `max_buffers` buffers over the first queued bytes, for one gathered write.
  // They stay valid until consume() or clear(), whatever is appended meanwhile.
  size_t gather(boost::asio::const_buffer* out, size_t max_buffers) const;
  // Copies up to `n` bytes out and consumes them.
  size_t copyOut(char* dst, size_t n);
  // Copies up to `n` of the first bytes out and leaves them queued.
  size_t peek(char* dst, size_t n) const;
  void consume(size_t n);
  void clear();
  std::string toString() const;

  static BlockCounts blocks();
  // Frees the calling thread's spare blocks (after a burst, before the heap is trimmed:
  // up to 4 MiB per thread that a quiet node does not need).
  static void releaseFreeBlocks();

 private:
  char* takeBlock();
  static void giveBlock(char* block);
  void releaseAll();
  // Calls visit(data, size) for each non-empty run of queued bytes, in order, until it
  // returns false.
  template <typename Visit>
  void forEachSpan(Visit visit) const;

  // Queued bytes: from head_ in the first to tail_ in the last. Inline room for two blocks
  // (a small message, or one crossing a block boundary) so that a chain going from empty to
  // one message and back, once per message, never calls malloc for its list.
  absl::InlinedVector<char*, 2> blocks_;
  size_t head_ = 0;            // bytes already consumed in blocks_.front()
  size_t tail_ = 0;            // bytes used in blocks_.back()
  size_t size_ = 0;
  char* spare_ = nullptr;      // the fresh block of a prepare(), until commit()
};

}  // namespace ferry::net
