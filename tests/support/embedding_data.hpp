// Test data for the embedding-bag + All-to-All op: every rank's tables, bags and weights, made
// from a seed so that any rank can rebuild any other rank's, and the float64 reference of what
// a rank must receive. Tables per rank differ (1 + rank % 3), so do their row counts and bag sizes
// (empty bags included).
#pragma once

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace weft::test {

struct EmbeddingCase {
  uint64_t seed = 0;
  int nranks = 1;
  int64_t localBatch = 1;
  int64_t dim = 4;
  weft_dtype_t dtype = WEFT_FLOAT32;
  int mode = 0;  // 0 sum, 1 mean
  bool sampleWeights = false;

  int64_t tables(int rank) const { return 1 + rank % 3; }
  int64_t tableBase(int rank) const;
  int64_t totalTables() const { return tableBase(nranks); }
  int64_t globalBatch() const { return localBatch * nranks; }
};

// One rank's inputs, in host memory (copy them to the device for the GPU suite).
struct EmbeddingInputs {
  std::vector<int64_t> tableOffsets;  // [tables + 1]
  std::vector<uint8_t> weights;       // [rows, dim] in the case's dtype
  std::vector<int64_t> offsets;       // [tables * globalBatch + 1]
  std::vector<int64_t> indices;
  std::vector<float> sampleWeights;  // alongside indices, or empty
};

EmbeddingInputs embeddingInputs(const EmbeddingCase& c, int rank);

// recv ([localBatch, totalTables, dim]) of `rank` must match the float64 pooling of every rank's
// bags for its samples, within float32 accumulation and the dtype's rounding.
::testing::AssertionResult checkEmbedding(const void* recv, const EmbeddingCase& c, int rank);

}  // namespace weft::test
