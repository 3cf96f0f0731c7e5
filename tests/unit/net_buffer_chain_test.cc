// BufferChain: the block queue behind H2Stream's send and receive buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "proxy/net/buffer_chain.h"

namespace ferry::net {
namespace {

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST(BufferChainTest, KeepsBytesInOrderAcrossBlocks) {
  BufferChain c;
  std::string data = pattern(3 * BufferChain::kBlockSize + 123);
  c.append(data.data(), 1000);
  c.append(data.data() + 1000, data.size() - 1000);
  EXPECT_EQ(c.size(), data.size());
  EXPECT_EQ(c.toString(), data);
  std::string out(5000, '\0');
  EXPECT_EQ(c.copyOut(out.data(), out.size()), 5000u);
  EXPECT_EQ(out, data.substr(0, 5000));
  EXPECT_EQ(c.toString(), data.substr(5000));
}

TEST(BufferChainTest, GatherCoversTheQueuedBytesAndSurvivesAppends) {
  BufferChain c;
  std::string data = pattern(BufferChain::kBlockSize + 10);
  c.append(data.data(), data.size());
  c.consume(7);
  boost::asio::const_buffer bufs[4];
  size_t n = c.gather(bufs, 4);
  ASSERT_EQ(n, 2u);
  c.append("more", 4);  // appending must not move what was gathered
  std::string got;
  for (size_t i = 0; i < n; ++i) got.append(static_cast<const char*>(bufs[i].data()), bufs[i].size());
  EXPECT_EQ(got, data.substr(7));
  c.consume(got.size());
  EXPECT_EQ(c.toString(), "more");
}

TEST(BufferChainTest, PeekCopiesTheFirstBytesAcrossBlocksWithoutConsuming) {
  BufferChain c;
  std::string data = pattern(BufferChain::kBlockSize + 10);
  c.append(data.data(), data.size());
  c.consume(BufferChain::kBlockSize - 3);  // the next 5 bytes span both blocks
  char head[5];
  ASSERT_EQ(c.peek(head, sizeof(head)), 5u);
  EXPECT_EQ(std::string(head, 5), data.substr(BufferChain::kBlockSize - 3, 5));
  EXPECT_EQ(c.size(), 13u);
  std::string all(100, '\0');
  EXPECT_EQ(c.peek(all.data(), all.size()), 13u);  // no more than is queued
  EXPECT_EQ(c.toString(), data.substr(BufferChain::kBlockSize - 3));
  BufferChain empty;
  EXPECT_EQ(empty.peek(head, sizeof(head)), 0u);
}

TEST(BufferChainTest, PrepareAndCommitReadStraightIntoTheChain) {
  BufferChain c;
  c.append("x", 1);
  boost::asio::mutable_buffer bufs[2];
  size_t n = c.prepare(BufferChain::kBlockSize, bufs);
  ASSERT_EQ(n, 2u);  // the rest of the first block and a fresh one
  EXPECT_EQ(bufs[0].size(), BufferChain::kBlockSize - 1);
  EXPECT_EQ(bufs[1].size(), 1u);
  std::string data = pattern(BufferChain::kBlockSize);
  std::memcpy(bufs[0].data(), data.data(), bufs[0].size());
  std::memcpy(bufs[1].data(), data.data() + bufs[0].size(), 1);
  c.commit(data.size());
  EXPECT_EQ(c.toString(), "x" + data);
  // A prepare without data (the socket would block) leaves the chain as it was.
  c.prepare(100, bufs);
  c.commit(0);
  EXPECT_EQ(c.size(), data.size() + 1);
}

TEST(BufferChainTest, AnEmptiedChainHoldsNoBlockAndBlocksAreReused) {
  size_t freed = 0;
  {
    BufferChain c;
    std::string data = pattern(2 * BufferChain::kBlockSize);
    c.append(data.data(), data.size());
    c.consume(data.size());
    EXPECT_TRUE(c.empty());
    EXPECT_EQ(BufferChain::blocks().in_use, 0u);
    freed = BufferChain::blocks().spare;  // both blocks went back to this thread's list
    EXPECT_GE(freed, 2u);
    c.append("y", 1);  // taken from the free list, not from malloc
    EXPECT_EQ(BufferChain::blocks().spare, freed - 1);
    EXPECT_EQ(BufferChain::blocks().in_use, 1u);
  }
  EXPECT_EQ(BufferChain::blocks().spare, freed);
  EXPECT_EQ(BufferChain::blocks().in_use, 0u);
  BufferChain::releaseFreeBlocks();
  EXPECT_EQ(BufferChain::blocks().spare, 0u);
}

}  // namespace
}  // namespace ferry::net
