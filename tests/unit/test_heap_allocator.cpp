#include <gtest/gtest.h>

#include "runtime/heap_allocator.hpp"

namespace weft {
namespace {

TEST(HeapAllocator, SameCallsGiveSameOffsets) {
  HeapAllocator a(4096, 1 << 20), b(4096, 1 << 20);
  for (uint64_t size : {100u, 5000u, 256u, 1u, 70000u}) EXPECT_EQ(a.allocate(size), b.allocate(size));
}

TEST(HeapAllocator, AlignsAndCoalesces) {
  HeapAllocator a(100, 100 + 4096);  // begin rounds up to 256
  auto x = a.allocate(1), y = a.allocate(300), z = a.allocate(256);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 256u);
  EXPECT_EQ(*y, 512u);
  EXPECT_EQ(*z, 1024u);
  EXPECT_TRUE(a.release(*y));
  EXPECT_FALSE(a.release(*y)) << "double free";
  EXPECT_FALSE(a.release(*x + 1)) << "not a block start";
  EXPECT_TRUE(a.release(*x));
  EXPECT_TRUE(a.release(*z));
  EXPECT_EQ(a.liveBlocks(), 0u);
  EXPECT_EQ(a.largestFree(), a.freeBytes()) << "everything coalesced back into one block";
  EXPECT_FALSE(a.allocate(a.freeBytes() + 1));
  EXPECT_FALSE(a.allocate(0));
}

TEST(HeapAllocator, BlockHoldingUsesTheRequestedSize) {
  HeapAllocator a(0, 1 << 16);
  auto x = a.allocate(1000);
  ASSERT_TRUE(x);
  EXPECT_EQ(a.blockHolding(*x, 1000), x);
  EXPECT_EQ(a.blockHolding(*x + 999, 1), x);
  EXPECT_EQ(a.blockHolding(*x + 10, 0), x);
  EXPECT_FALSE(a.blockHolding(*x, 1001));
  EXPECT_FALSE(a.blockHolding(*x + 1000, 0));
  EXPECT_FALSE(a.blockHolding(*x + 4096, 1));
}

}  // namespace
}  // namespace weft
