// One embedding-bag + All-to-All case on any backend: a rank's inputs in the backend's memory, the
// op on them, and what it received against the float64 reference (tests/support/embedding_data.hpp).
#pragma once

#include "support/embedding_data.hpp"
#include "support/multirank.hpp"
#include "support/op_rank.hpp"
#include "support/oracle.hpp"

namespace weft::test {

struct EmbeddingOnBackend : BackendCopies {
  void* weights = nullptr;
  int64_t* tableOffsets = nullptr;
  int64_t* offsets = nullptr;
  int64_t* indices = nullptr;
  float* sampleWeights = nullptr;

  explicit EmbeddingOnBackend(const EmbeddingInputs& in) {
    weights = copy(in.weights);
    tableOffsets = copy(in.tableOffsets);
    offsets = copy(in.offsets);
    indices = copy(in.indices);
    sampleWeights = copy(in.sampleWeights);
  }
};

inline size_t recvBytes(const EmbeddingCase& c) { return c.localBatch * c.totalTables() * c.dim * dtypeBytes(c.dtype); }

// The op into r.heap, on r's stream.
inline weft_result_t runEmbedding(OpRank& r, const EmbeddingCase& c, int rank, const EmbeddingOnBackend& in) {
  return weft_embedding_alltoall(r.comm, in.weights, in.tableOffsets, c.tables(rank), in.indices, in.offsets,
                                 c.sampleWeights ? in.sampleWeights : nullptr, static_cast<weft_pool_mode_t>(c.mode),
                                 r.heap, c.localBatch, c.totalTables(), c.tableBase(rank), c.dim, c.dtype, r.stream);
}

inline ::testing::AssertionResult receivedEmbedding(const OpRank& r, const EmbeddingCase& c, int rank) {
  return checkEmbedding(download(r.heap, recvBytes(c)).data(), c, rank);
}

// Case `c` on fresh inputs into a poisoned r.heap, waited for and checked.
inline void embeddingCase(OpRank& r, const EmbeddingCase& c, int rank) {
  SCOPED_TRACE(::testing::Message() << dtypeName(c.dtype) << " batch " << c.localBatch << " dim " << c.dim << " mode "
                                    << c.mode << (c.sampleWeights ? " weighted" : "") << " seed " << c.seed);
  const EmbeddingOnBackend in(embeddingInputs(c, rank));
  poisonBytes(r.heap, recvBytes(c));
  WEFT_ASSERT_OK(runEmbedding(r, c, rank, in));
  ASSERT_TRUE(finish(r));
  EXPECT_TRUE(receivedEmbedding(r, c, rank));
}

}  // namespace weft::test
