// Every bad argument returns WEFT_ERR_INVALID_ARGUMENT or WEFT_ERR_INVALID_USAGE, names the
// argument in weft_get_last_error, and leaves the communicator working.
#include <chrono>
#include <climits>
#include <cstdlib>
#include <vector>

#include "support/multirank.hpp"
#include "support/oracle.hpp"

// C shims: in C any int converts to weft_dtype_t, which is what a bad caller does.
extern "C" weft_result_t allreduceWithRawDtype(weft_comm_t, const void*, void*, int64_t, int);
extern "C" weft_result_t alltoallWithRawDtype(weft_comm_t, const void*, void*, int64_t, int);

namespace weft::test {
namespace {

constexpr weft_result_t kArg = WEFT_ERR_INVALID_ARGUMENT;

// A correct AllReduce, to show the communicator still works after a rejected call.
void stillWorks(weft_comm_t comm, void* heap, int rank, int nranks, uint64_t seed) {
  std::vector<float> x(1000);
  fillInput(x.data(), WEFT_FLOAT32, seed, rank, 0, x.size());
  poison(heap, x.size() * 4);
  WEFT_ASSERT_OK(weft_allreduce(comm, x.data(), heap, x.size(), WEFT_FLOAT32, nullptr));
  EXPECT_TRUE(checkAllReduce(heap, WEFT_FLOAT32, seed, nranks, x.size()));
}

TEST(BadInput, EveryArgumentIsNamedAndTheCommunicatorKeepsWorking) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* heap = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 64 << 10, &heap));
    std::vector<float> host(16 << 10);
    float* h = host.data();
    auto* y = static_cast<float*>(heap);
    uint64_t s = seed;

    struct Case {
      const char* what;
      std::function<weft_result_t()> call;
      weft_result_t expected;
      const char* mention;
    };
    const std::vector<Case> cases = {
        {"NULL comm", [&] { return weft_allreduce(nullptr, h, y, 4, WEFT_FLOAT32, nullptr); }, kArg, "comm"},
        {"NULL sendbuf", [&] { return weft_allreduce(comm, nullptr, y, 4, WEFT_FLOAT32, nullptr); }, kArg, "sendbuf"},
        {"NULL recvbuf", [&] { return weft_allreduce(comm, h, nullptr, 4, WEFT_FLOAT32, nullptr); }, kArg, "recvbuf"},
        {"negative count", [&] { return weft_allreduce(comm, h, y, -1, WEFT_FLOAT32, nullptr); }, kArg, "count"},
        {"count overflow", [&] { return weft_allreduce(comm, h, y, INT64_MAX / 2, WEFT_FLOAT32, nullptr); }, kArg,
         "count"},
        {"invalid dtype", [&] { return allreduceWithRawDtype(comm, h, y, 4, 7); }, kArg, "dtype"},
        {"recvbuf outside the heap", [&] { return weft_allreduce(comm, h, h + 8, 4, WEFT_FLOAT32, nullptr); }, kArg,
         "recvbuf"},
        {"count past the allocation", [&] { return weft_allreduce(comm, h, y, 16 << 10 | 1, WEFT_FLOAT32, nullptr); },
         kArg, "recvbuf"},
        {"partial overlap", [&] { return weft_allreduce(comm, y + 1, y, 64, WEFT_FLOAT32, nullptr); }, kArg, "sendbuf"},
        {"a stream on the CPU backend",
         [&] { return weft_allreduce(comm, h, y, 4, WEFT_FLOAT32, reinterpret_cast<void*>(0x10)); }, kArg, "stream"},
        {"All-to-All NULL sendbuf", [&] { return weft_alltoall(comm, nullptr, y, 4, WEFT_FLOAT32, nullptr); }, kArg,
         "sendbuf"},
        {"All-to-All NULL recvbuf", [&] { return weft_alltoall(comm, h, nullptr, 4, WEFT_FLOAT32, nullptr); }, kArg,
         "recvbuf"},
        {"All-to-All negative count", [&] { return weft_alltoall(comm, h, y, -5, WEFT_BFLOAT16, nullptr); }, kArg,
         "count_per_rank"},
        {"All-to-All count overflow", [&] { return weft_alltoall(comm, h, y, INT64_MAX / 2, WEFT_FLOAT16, nullptr); },
         kArg, "count_per_rank"},
        {"All-to-All invalid dtype", [&] { return alltoallWithRawDtype(comm, h, y, 4, -1); }, kArg, "dtype"},
        {"All-to-All recvbuf outside the heap",
         [&] { return weft_alltoall(comm, h, h + 64, 4, WEFT_FLOAT32, nullptr); }, kArg, "recvbuf"},
        {"All-to-All count past the allocation",
         [&] { return weft_alltoall(comm, h, y, 8 << 10 | 1, WEFT_FLOAT32, nullptr); }, kArg, "recvbuf"},
        {"All-to-All in place", [&] { return weft_alltoall(comm, y, y, 4, WEFT_FLOAT32, nullptr); }, kArg, "sendbuf"},
        {"mem_alloc NULL ptr", [&] { return weft_mem_alloc(comm, 64, nullptr); }, kArg, "ptr"},
        {"mem_alloc 0 bytes",
         [&] {
           void* p;
           return weft_mem_alloc(comm, 0, &p);
         },
         kArg, "bytes"},
        {"mem_free NULL", [&] { return weft_mem_free(comm, nullptr); }, kArg, "ptr"},
        {"rank NULL", [&] { return weft_comm_rank(comm, nullptr); }, kArg, "rank"},
        {"size NULL", [&] { return weft_comm_size(comm, nullptr); }, kArg, "size"},
        {"async_error NULL", [&] { return weft_comm_get_async_error(comm, nullptr); }, kArg, "async_error"},
        {"version NULL", [&] { return weft_get_version(nullptr); }, kArg, "version"},
        {"device_view NULL", [&] { return weft_comm_get_device_view(comm, nullptr); }, kArg, "view"},
        {"device_view size unset",
         [&] {
           weft_device_view_t v{};
           return weft_comm_get_device_view(comm, &v);
         },
         kArg, "view: size is 0"},
        {"unique id NULL", [&] { return weft_get_unique_id(nullptr); }, kArg, "id"},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.what);
      EXPECT_TRUE(failsWith(c.call(), c.expected, c.mention));
      stillWorks(comm, heap, rank, n, ++s);
    }
    // A block that is not from weft_mem_alloc: every rank passes it, so the collective check agrees.
    EXPECT_TRUE(failsWith(weft_mem_free(comm, h), kArg, "ptr"));
    stillWorks(comm, heap, rank, n, ++s);

    WEFT_ASSERT_OK(weft_mem_free(comm, heap));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
    // Use after destroy: the handle is dead, never reused.
    int r = -1;
    EXPECT_TRUE(failsWith(weft_comm_rank(comm, &r), WEFT_ERR_INVALID_USAGE, "comm"));
    EXPECT_TRUE(failsWith(weft_allreduce(comm, h, h, 1, WEFT_FLOAT32, nullptr), WEFT_ERR_INVALID_USAGE, "comm"));
    EXPECT_TRUE(failsWith(weft_comm_destroy(comm), WEFT_ERR_INVALID_USAGE, "comm"));
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(BadInput, InitArgumentsAreChecked) {
  weft_unique_id_t id;
  WEFT_ASSERT_OK(weft_get_unique_id(&id));
  weft_comm_t comm = nullptr;
  EXPECT_TRUE(failsWith(weft_comm_init_rank(nullptr, 2, id, 0, nullptr), kArg, "comm"));
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 0, id, 0, nullptr), kArg, "nranks"));
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 2, id, 2, nullptr), kArg, "rank"));
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 2, id, -1, nullptr), kArg, "rank"));
  weft_unique_id_t junk{};
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 1, junk, 0, nullptr), kArg, "id"));
  weft_config_t bad = WEFT_CONFIG_INITIALIZER;
  bad.magic = 0;
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 1, id, 0, &bad), kArg, "config"));
  weft_config_t badTransport = WEFT_CONFIG_INITIALIZER;
  badTransport.transport = "carrier-pigeon";
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 1, id, 0, &badTransport), kArg, "transport"));
  setenv("WEFT_TIMEOUT_S", "soon", 1);
  EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, 1, id, 0, nullptr), kArg, "timeout_s"));
  unsetenv("WEFT_TIMEOUT_S");
  EXPECT_EQ(comm, nullptr);
  EXPECT_STREQ(weft_get_error_string(WEFT_ERR_TIMEOUT), "timeout");
}

// Ranks that disagree on nranks all fail fast with WEFT_ERR_INVALID_USAGE instead of timing out.
TEST(BadInput, MismatchedNranksFailsEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  const RankBody body = [&](int rank, int, const weft_unique_id_t& id) {
    weft_comm_t comm = nullptr;
    const int claimed = rank == 0 ? 2 : 3;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, claimed, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "nranks"));
    EXPECT_EQ(comm, nullptr);
  };
  EXPECT_TRUE(runRanks(2, body));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// Every rank must use the same heap size; a mismatch is caught at init, on every rank.
TEST(BadInput, MismatchedHeapSizeFailsEveryRank) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.heap_bytes = rank == 0 ? (64u << 20) : (32u << 20);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(failsWith(weft_comm_init_rank(&comm, n, id, rank, &config), WEFT_ERR_INVALID_USAGE, "heap_bytes"));
  };
  EXPECT_TRUE(runRanks(2, body));
}

// So must the one-shot AllReduce's wire format (a rank reading 8-byte lines from a peer that sends
// 128-byte ones would never see its flags); the error says which format each rank took.
TEST(BadInput, MismatchedOneShotProtocolFailsEveryRank) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_ONESHOT_PROTOCOL", rank == 0 ? "ll128" : "ll", 1);
    weft_comm_t comm = nullptr;
    EXPECT_TRUE(
        failsWith(weft_comm_init_rank(&comm, n, id, rank, nullptr), WEFT_ERR_INVALID_USAGE, "oneshot_protocol"));
    const std::string msg = weft_get_last_error(nullptr);
    EXPECT_NE(msg.find("uses 128-byte lines"), std::string::npos) << msg;
    EXPECT_NE(msg.find("uses 8-byte lines"), std::string::npos) << msg;
    EXPECT_EQ(comm, nullptr);
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(BadInput, HeapExhaustionIsOutOfMemory) {
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.heap_bytes = 8u << 20;
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    void* p = nullptr;
    EXPECT_TRUE(failsWith(weft_mem_alloc(comm, 9u << 20, &p), WEFT_ERR_OUT_OF_MEMORY, "heap_bytes"));
    EXPECT_EQ(p, nullptr);
    // Nothing leaked: the whole user part is still free.
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 4u << 20, &p));
    WEFT_ASSERT_OK(weft_mem_free(comm, p));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

// Ranks that ask for different sizes fail that very call, every one of them, with both sizes named;
// nothing stays allocated, so the next matching call gets the same block on every rank.
TEST(BadInput, MismatchedAllocSizesFailThatCallOnEveryRank) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* p = nullptr;
    EXPECT_TRUE(failsWith(weft_mem_alloc(comm, rank == 0 ? 4096 : 8192, &p), WEFT_ERR_INVALID_USAGE,
                          "rank 0 asked for 4096 bytes and rank 1 for 8192"));
    EXPECT_EQ(p, nullptr);
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 8192, &p));
    stillWorks(comm, p, rank, n, seed);
    WEFT_ASSERT_OK(weft_mem_free(comm, p));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
