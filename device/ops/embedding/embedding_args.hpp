// The embedding-bag + All-to-All's arguments as the caller gives them (weft.h), for host code that
// builds the op without its device code.
#pragma once

#include <cstdint>

namespace weft::dev {

struct EmbeddingArgs {
  const uint8_t* weights;
  const int64_t* tableOffsets;  // [numTables + 1]
  const int64_t* indices;
  const int64_t* offsets;         // [numTables * globalBatch + 1]
  const float* perSampleWeights;  // null: weight 1
  uint64_t numTables, localBatch, totalTables, tableBase, dim;
  bool mean, check;
};

}  // namespace weft::dev
