// Embedding-bag + All-to-All on 1, 2 and 4 GPUs under both engines, with 1-3 tables per rank:
// every dtype, sum and mean, weighted and not, dims 4 to 1024 (12: a lane group with lanes that
// hold no chunk of the row); an index out of range fails the op on every rank; the op captured
// into a CUDA graph and replayed. Skipped (and reported so) without GPUs.
#include <vector>

#include "gpu_support.hpp"
#include "support/embedding_data.hpp"
#include "support/multirank.hpp"
#include "support/oracle.hpp"

namespace weft::test {
namespace {

// One rank's inputs in device memory.
struct DeviceInputs : DeviceCopies {
  void* weights = nullptr;
  int64_t* tableOffsets = nullptr;
  int64_t* offsets = nullptr;
  int64_t* indices = nullptr;
  float* sampleWeights = nullptr;

  explicit DeviceInputs(const EmbeddingInputs& in) {
    weights = copy(in.weights);
    tableOffsets = copy(in.tableOffsets);
    offsets = copy(in.offsets);
    indices = copy(in.indices);
    sampleWeights = copy(in.sampleWeights);
  }
};

weft_result_t runCase(Rank& r, const EmbeddingCase& c, int rank, const DeviceInputs& in) {
  return weft_embedding_alltoall(r.comm, in.weights, in.tableOffsets, c.tables(rank), in.indices, in.offsets,
                                 c.sampleWeights ? in.sampleWeights : nullptr, static_cast<weft_pool_mode_t>(c.mode),
                                 r.heap, c.localBatch, c.totalTables(), c.tableBase(rank), c.dim, c.dtype, r.stream);
}

size_t recvBytes(const EmbeddingCase& c) { return c.localBatch * c.totalTables() * c.dim * dtypeBytes(c.dtype); }

class GpuEmbedding : public GpusAndEngine {};

TEST_P(GpuEmbedding, EveryDtypeModeAndDim) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUp(rank, n, id, 8 << 20);
    ASSERT_NE(r.comm, nullptr);
    uint64_t s = seed;
    for (weft_dtype_t dt : {WEFT_FLOAT32, WEFT_FLOAT16, WEFT_BFLOAT16})
      for (int64_t dim : {4, 12, 128, 1024})
        for (int mode : {0, 1}) {
          EmbeddingCase c{++s, n, 1 + static_cast<int64_t>(s % 7), dim, dt, mode, mode == 1};
          SCOPED_TRACE(::testing::Message() << dtypeName(dt) << " dim " << dim << " mode " << mode << " seed " << s);
          const DeviceInputs in(embeddingInputs(c, rank));
          WEFT_CUDA_OK(cudaMemset(r.heap, 0xff, recvBytes(c)));
          WEFT_ASSERT_OK(runCase(r, c, rank, in));
          WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
          EXPECT_TRUE(checkEmbedding(toHost(r.heap, recvBytes(c)).data(), c, rank));
        }
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

TEST_P(GpuEmbedding, GraphCaptureAndReplay) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUp(rank, n, id, 1 << 20);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 3, 64, WEFT_BFLOAT16, 0, false};
    const DeviceInputs in(embeddingInputs(c, rank));
    const cudaGraphExec_t exec = captureGraph(r.stream, [&] { WEFT_ASSERT_OK(runCase(r, c, rank, in)); });
    ASSERT_NE(exec, nullptr);
    for (int replay = 0; replay < 3; ++replay) {
      WEFT_CUDA_OK(cudaMemset(r.heap, 0xff, recvBytes(c)));
      WEFT_CUDA_OK(cudaGraphLaunch(exec, r.stream));
      WEFT_CUDA_OK(cudaStreamSynchronize(r.stream));
      EXPECT_TRUE(checkEmbedding(toHost(r.heap, recvBytes(c)).data(), c, rank)) << "replay " << replay;
    }
    WEFT_CUDA_OK(cudaGraphExecDestroy(exec));
    tearDown(r);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

TEST_P(GpuEmbedding, AnIndexOutOfRangeFailsTheOpOnEveryRank) {
  WEFT_REQUIRE_GPUS(gpus());
  const uint64_t seed = freshSeed();
  const RankBody body = [&](int rank, int n, const weft_unique_id_t& id) {
    Rank r = setUp(rank, n, id, 1 << 20);
    ASSERT_NE(r.comm, nullptr);
    const EmbeddingCase c{seed, n, 2, 8, WEFT_FLOAT32, 0, false};
    EmbeddingInputs host = embeddingInputs(c, rank);
    if (rank == n - 1) {  // into bag (table 0, sample 0), bound for rank 0
      host.indices.insert(host.indices.begin(), -3);
      for (size_t b = 1; b < host.offsets.size(); ++b) ++host.offsets[b];
    }
    const DeviceInputs in(host);
    WEFT_ASSERT_OK(runCase(r, c, rank, in));
    EXPECT_EQ(cudaStreamSynchronize(r.stream), cudaSuccess) << "the stream drains";
    weft_result_t async = WEFT_SUCCESS;
    WEFT_ASSERT_OK(weft_comm_get_async_error(r.comm, &async));
    EXPECT_EQ(async, WEFT_ERR_INVALID_ARGUMENT) << weft_get_last_error(nullptr);
    WEFT_ASSERT_OK(weft_comm_destroy(r.comm));
    cudaFree(r.input);
    cudaStreamDestroy(r.stream);
  };
  EXPECT_TRUE(runRanks(gpus(), body));
}

WEFT_INSTANTIATE_GPUS_AND_ENGINES(GpuEmbedding);

}  // namespace
}  // namespace weft::test
