// The status page on a GPU (issue: live inspection): the ops end on the caller's stream, and the
// status watch shows them run item by item and end, under both engines, as weftctl reads the page.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "gpu_support.hpp"
#include "runtime/status_read.hpp"
#include "support/multirank.hpp"

namespace weft::test {
namespace {

class GpuStatus : public OnEveryBackend {};

// This rank's page in `dir` (the test gives each run a directory of its own).
bool rankPage(const std::string& dir, int rank, status::Snapshot* out) {
  const status::Listing l = status::readDirectory(dir);
  for (const status::Snapshot& s : l.pages)
    if (s.header.rank == rank) {
      *out = s;
      return true;
    }
  return false;
}

// Many large AllReduces in flight on one stream, nothing synchronised: while they run, the page
// shows an op part done (items done between none and all), and in the end every op ended well.
TEST_P(GpuStatus, ItemsDoneAdvanceWhileOpsRunAndEveryOpEnds) {
  char tmpl[] = "/tmp/weft-gpu-status-XXXXXX";
  const std::string dir = std::string(mkdtemp(tmpl)) + "/pages";
  constexpr int kOps = 64;
  const int64_t count = int64_t{32} << 20;  // 64 MiB of bfloat16 per op
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    setenv("WEFT_STATUS_DIR", dir.c_str(), 1);
    setenv("WEFT_STATUS_INTERVAL_MS", "1", 1);
    Rank r = setUp(rank, n, id, count * 2);
    ASSERT_NE(r.comm, nullptr);
    WEFT_CUDA_OK(cudaMemset(r.heap, 0, count * 2));
    for (int i = 0; i < kOps; ++i)
      WEFT_ASSERT_OK(weft_allreduce(r.comm, r.heap, r.heap, count, WEFT_BFLOAT16, r.stream));
    status::Snapshot s;
    bool partial = false;
    uint64_t itemsSeen = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < until) {
      if (rankPage(dir, rank, &s)) {
        for (size_t i = 0; i < s.inFlight.size(); ++i) {
          const SlotProgress& p = s.progress[i];
          if (p.ticket != s.inFlight[i].ticket) continue;
          itemsSeen = std::max(itemsSeen, p.itemsDone);
          partial |=
              p.itemsDone > 0 && p.itemsDone < s.inFlight[i].nitems && p.startNs != 0 && s.rowState(i) == "running";
        }
        if (s.header.ended >= kOps) break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
    ASSERT_TRUE(rankPage(dir, rank, &s));
    EXPECT_EQ(s.header.ended, uint64_t{kOps}) << "every op seen to end";
    EXPECT_EQ(s.header.counters.ops[static_cast<int>(dev::OpKind::kAllReduce)], uint64_t{kOps});
    EXPECT_EQ(s.header.state, static_cast<uint32_t>(status::PageState::kRunning));
    EXPECT_TRUE(s.inFlight.empty());
    ASSERT_FALSE(s.history.empty());
    for (const status::OpRow& row : s.history) {
      EXPECT_EQ(row.status, static_cast<uint32_t>(dev::Status::kOk));
      EXPECT_GE(row.endNs, row.submitNs);
    }
    // One rank's ops are local copies, over before a look can land inside one.
    if (n > 1) {
      EXPECT_TRUE(partial) << "no op seen part done (most items seen: " << itemsSeen << ")";
    }
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path(), ec);
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuStatus);

}  // namespace
}  // namespace weft::test
