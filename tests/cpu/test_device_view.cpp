// weft_comm_get_device_view: the view kernels written outside weft use (weft.h). On the CPU
// backend the peer bases are host addresses: a rank stores straight into a peer's block through
// them, publishes with the same release/acquire pair weft.triton uses, and a failure it records in
// the status words is reported by weft_comm_get_async_error in weft's words.
#include <cstring>
#include <string>

#include "support/multirank.hpp"

namespace weft::test {
namespace {

TEST(DeviceView, PeerBasesAddressEveryRanksCopyOfABlock) {
  const RankBody body = [](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    void* block = nullptr;
    void* sum = nullptr;
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 4096, &block));
    WEFT_ASSERT_OK(weft_mem_alloc(comm, 64, &sum));
    std::memset(block, 0, 4096);
    // An AllReduce completes only once every rank has entered it: every rank's block is zeroed.
    const auto barrier = [&] { return weft_allreduce(comm, sum, sum, 1, WEFT_FLOAT32, nullptr); };
    WEFT_ASSERT_OK(barrier());
    weft_device_view_t v{};
    v.size = sizeof v;
    WEFT_ASSERT_OK(weft_comm_get_device_view(comm, &v));
    ASSERT_EQ(v.rank, rank);
    ASSERT_EQ(v.nranks, n);
    ASSERT_GT(v.timeout_ns, 0u);
    auto* mine = static_cast<uint8_t*>(v.peer_bases[rank]);
    const uint64_t offset = static_cast<uint8_t*>(block) - mine;
    ASSERT_LT(offset, v.heap_bytes);
    // Slot `rank` of every rank's block gets rank + 1, then flag word 511 counts the writers.
    for (int r = 0; r < n; ++r) {
      auto* theirs = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(v.peer_bases[r]) + offset);
      theirs[rank] = rank + 1;
      __atomic_fetch_add(&theirs[511], 1, __ATOMIC_RELEASE);
    }
    auto* words = static_cast<uint64_t*>(block);
    for (int spins = 0; __atomic_load_n(&words[511], __ATOMIC_ACQUIRE) < static_cast<uint64_t>(n); ++spins)
      ASSERT_LT(spins, 1 << 30) << "peers never wrote";
    for (int r = 0; r < n; ++r) EXPECT_EQ(words[r], static_cast<uint64_t>(r + 1));
    WEFT_ASSERT_OK(barrier());           // no rank frees its block while a peer may still write into it
    EXPECT_EQ(v.status, v.status_host);  // the CPU backend's device is the host
    EXPECT_EQ(v.status_host->abort, 0u);
    EXPECT_EQ(v.status_host->error, 0u);
    WEFT_ASSERT_OK(weft_mem_free(comm, sum));
    WEFT_ASSERT_OK(weft_mem_free(comm, block));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(3, body));
}

TEST(DeviceView, AFailureRecordedOutsideWeftIsTheCommunicatorsAsyncError) {
  const RankBody body = [](int rank, int n, const weft_unique_id_t& id) {
    weft_comm_t comm = initRank(rank, n, id);
    ASSERT_NE(comm, nullptr);
    weft_device_view_t v{};
    v.size = sizeof v;
    WEFT_ASSERT_OK(weft_comm_get_device_view(comm, &v));
    uint32_t none = 0;
    ASSERT_TRUE(__atomic_compare_exchange_n(&v.status_host->error, &none, WEFT_DEVICE_STATUS_TIMEOUT, false,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    v.status_host->record.ticket = WEFT_DEVICE_TICKET_EXTERNAL;
    v.status_host->record.item = 7;
    v.status_host->record.peer = (rank + 1) % n;
    v.status_host->record.what = WEFT_DEVICE_WAIT_EXTERNAL;
    v.status_host->record.status = WEFT_DEVICE_STATUS_TIMEOUT;
    v.status_host->record.expected = 4;
    v.status_host->record.observed = 3;
    __atomic_store_n(&v.status_host->record_valid, 1u, __ATOMIC_RELEASE);
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(comm, &async));
    EXPECT_EQ(async, WEFT_ERR_TIMEOUT);
    EXPECT_EQ(std::string(weft_get_last_error(comm)),
              "timed out in a kernel outside weft's engine (program 7) waiting on rank " +
                  std::to_string((rank + 1) % n) + " for its signal: expected >= 4, saw 3");
    WEFT_ASSERT_OK(weft_comm_abort(comm));
    EXPECT_EQ(v.status_host->abort, 1u);
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

TEST(DeviceView, ProxyPeersAreNamedAndRefused) {
  const RankBody body = [](int rank, int n, const weft_unique_id_t& id) {
    weft_config_t config = WEFT_CONFIG_INITIALIZER;
    config.transport = "proxy";
    weft_comm_t comm = initRank(rank, n, id, &config);
    ASSERT_NE(comm, nullptr);
    weft_device_view_t v{};
    v.size = sizeof v;
    EXPECT_TRUE(failsWith(weft_comm_get_device_view(comm, &v), WEFT_ERR_NOT_SUPPORTED,
                          "rank " + std::to_string(1 - rank) + " is reached through the host proxy"));
    WEFT_ASSERT_OK(weft_comm_destroy(comm));
  };
  EXPECT_TRUE(runRanks(2, body));
}

}  // namespace
}  // namespace weft::test
