// Embedding-bag + All-to-All on GPUs only (its cases on every backend are
// tests/ops/test_embedding.cpp): the op captured into a CUDA graph and replayed; an index out of
// range fails the op on every rank, reported when the stream drains; each rank runs the path its
// setting and the path table choose. Skipped (and reported so) without GPUs.
#include <cstdlib>
#include <string>
#include <vector>

#include "common/gpus_visible.hpp"
#include "gpu_support.hpp"
#include "ops/embedding_cases.hpp"
#include "page_rows.hpp"
#include "runtime/backend.hpp"
#include "runtime/config.hpp"
#include "runtime/path_table.hpp"

namespace weft::test {
namespace {

class GpuEmbedding : public OnEveryBackend {};

TEST_P(GpuEmbedding, GraphCaptureAndReplay) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 1 << 20);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 3, 64, WEFT_BFLOAT16, 0, false};
    const EmbeddingOnBackend in(embeddingInputs(c, rank));
    const cudaGraphExec_t exec = captureGraph(streamOf(r), [&] { WEFT_ASSERT_OK(runEmbedding(r, c, rank, in)); });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 3; ++replay) {
      poisonBytes(r.heap, recvBytes(c));
      WEFT_CUDA_OK(cudaGraphLaunch(exec, streamOf(r)));
      WEFT_CUDA_OK(cudaStreamSynchronize(streamOf(r)));
      EXPECT_TRUE(receivedEmbedding(r, c, rank)) << "replay " << replay;
    }
    WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    closeRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

TEST_P(GpuEmbedding, AnIndexOutOfRangeFailsTheOpOnEveryRank) {
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    OpRank r = openRank(rank, n, id, 1 << 20);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 2, 8, WEFT_FLOAT32, 0, false};
    EmbeddingInputs host = embeddingInputs(c, rank);
    if (rank == n - 1) {  // into bag (table 0, sample 0), bound for rank 0
      host.indices.insert(host.indices.begin(), -3);
      for (size_t b = 1; b < host.offsets.size(); ++b) ++host.offsets[b];
    }
    const EmbeddingOnBackend in(host);
    WEFT_ASSERT_OK(runEmbedding(r, c, rank, in));
    EXPECT_EQ(cudaStreamSynchronize(streamOf(r)), cudaSuccess) << "the stream drains";
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
    EXPECT_EQ(async, WEFT_ERR_INVALID_ARGUMENT) << weft_get_last_error(nullptr);
    closeFailedRank(r);
  };
  EXPECT_TRUE(runRanks(ranks(), body));
}

// The path each rank ran, from its status page (kRowPooledFirst: unfused), for embedding_path
// fused and unfused, and auto: what the path table says for this GPU model, ranks and ranks per
// GPU (its per_gpu rows tell ranks that share a GPU apart), except through the host proxy, where
// the runtime runs fused. The persistent engine runs fused whatever the setting: it has no kernel
// of the rank's own process to pool.
TEST_P(GpuEmbedding, RunsThePathItsSettingAndTheTableChoose) {
  const uint64_t seed = freshSeed();
  const char* transport = std::getenv("WEFT_TRANSPORT");
  const bool viaProxy = transport && std::string(transport) == "proxy";
  const PathTable table = PathTable::load(Settings::resolve().getString("path_table_file"));
  const int perGpu = sharingGpus() ? ranksPerGpu(ranks(), gpusPresent()) : 1;
  for (const std::string path : {"auto", "fused", "unfused"}) {
    char tmpl[] = "/tmp/weft-gpu-embedding-XXXXXX";
    const std::string dir = std::string(mkdtemp(tmpl)) + "/pages";
    const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
      setenv("WEFT_EMBEDDING_PATH", path.c_str(), 1);
      setenv("WEFT_STATUS_DIR", dir.c_str(), 1);
      OpRank r = openRank(rank, n, id, 1 << 20);
      ASSERT_NE(r.comm, nullptr);
      const EmbeddingCase c{seed, n, 3, 64, WEFT_BFLOAT16, 0, false};
      const OpShape shape{{3, static_cast<uint64_t>(c.tables(rank)), 64}};
      const OpPath autoPath = viaProxy && n > 1
                                  ? OpPath::kFused
                                  : table.choose(FusedOp::kEmbeddingAllToAll, {gpuModel(), n, perGpu}, shape).path;
      const bool unfused = gEngine == "launched" && (path == "auto" ? autoPath == OpPath::kUnfused : path == "unfused");
      embeddingCase(r, c, rank);
      const PageRows ops = rowsOnPage(dir, rank, dev::OpKind::kEmbeddingAllToAll, status::kRowPooledFirst);
      EXPECT_EQ(ops.all, 1) << "embedding ops on this rank's page in " << dir;
      EXPECT_EQ(ops.flagged, unfused ? 1 : 0) << "embedding ops that pooled first (the unfused path)";
      closeRank(r);
    };
    EXPECT_TRUE(runRanks(ranks(), body)) << "embedding_path " << path;
  }
}

WEFT_INSTANTIATE_ON_EVERY_BACKEND(GpuEmbedding);

}  // namespace
}  // namespace weft::test
