#include "embedding_data.hpp"

#include <cmath>
#include <string>

#include "device/dtype_device.hpp"
#include "device/testdata_device.hpp"
#include "oracle.hpp"

namespace weft::test {

namespace {

double rounded(const EmbeddingCase& c, int rank, uint64_t i) { return roundedInput(c.dtype, c.seed, rank, i); }

}  // namespace

int64_t EmbeddingCase::tableBase(int rank) const {
  int64_t base = 0;
  for (int r = 0; r < rank; ++r) base += tables(r);
  return base;
}

EmbeddingInputs embeddingInputs(const EmbeddingCase& c, int rank) {
  EmbeddingInputs in;
  in.tableOffsets.push_back(0);
  for (int64_t t = 0; t < c.tables(rank); ++t)
    in.tableOffsets.push_back(in.tableOffsets.back() + 1 + static_cast<int64_t>(testDraw(c.seed, rank, 1, t, 50)));
  const int64_t rows = in.tableOffsets.back();
  in.weights.resize(rows * c.dim * dtypeBytes(c.dtype));
  fillInput(in.weights.data(), c.dtype, c.seed, rank, 0, rows * c.dim);
  in.offsets.push_back(0);
  for (int64_t t = 0; t < c.tables(rank); ++t) {
    const int64_t tableRows = in.tableOffsets[t + 1] - in.tableOffsets[t];
    for (int64_t s = 0; s < c.globalBatch(); ++s) {
      const uint64_t bag = t * c.globalBatch() + s;
      const uint64_t size = testDraw(c.seed, rank, 2, bag, 7);  // 0..6: empty bags included
      for (uint64_t j = 0; j < size; ++j) {
        in.indices.push_back(static_cast<int64_t>(testDraw(c.seed, rank, 3, in.indices.size(), tableRows)));
        if (c.sampleWeights) in.sampleWeights.push_back(dev::testValue(c.seed + 7, rank, in.indices.size()));
      }
      in.offsets.push_back(static_cast<int64_t>(in.indices.size()));
    }
  }
  return in;
}

::testing::AssertionResult checkEmbedding(const void* recv, const EmbeddingCase& c, int rank) {
  const auto dt = static_cast<dev::DType>(c.dtype);
  const double eps = roundingOf(c.dtype);
  uint64_t bad = 0;
  std::string first;
  for (int q = 0; q < c.nranks; ++q) {
    const EmbeddingInputs in = embeddingInputs(c, q);
    for (int64_t t = 0; t < c.tables(q); ++t)
      for (int64_t sl = 0; sl < c.localBatch; ++sl) {
        const int64_t bag = t * c.globalBatch() + rank * c.localBatch + sl;
        const int64_t lo = in.offsets[bag], hi = in.offsets[bag + 1];
        for (int64_t e = 0; e < c.dim; ++e) {
          double want = 0, mag = 0;
          for (int64_t j = lo; j < hi; ++j) {
            const double w = c.sampleWeights ? in.sampleWeights[j] : 1.0;
            const double x = w * rounded(c, q, (in.tableOffsets[t] + in.indices[j]) * c.dim + e);
            want += x;
            mag += std::fabs(x);
          }
          if (c.mode == 1 && hi > lo) want /= static_cast<double>(hi - lo), mag /= static_cast<double>(hi - lo);
          const uint64_t at = (sl * c.totalTables() + c.tableBase(q) + t) * c.dim + e;
          const double got = dev::loadAsFloat(recv, at, dt);
          if (!(std::fabs(got - want) <= eps * std::fabs(want) + 1e-6 * mag + 1e-7) && !bad++)
            first = "sample " + std::to_string(sl) + ", table " + std::to_string(c.tableBase(q) + t) + ", element " +
                    std::to_string(e) + ": got " + std::to_string(got) + ", want " + std::to_string(want);
        }
      }
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dtypeName(c.dtype) << " embedding All-to-All dim " << c.dim << " batch "
                                       << c.localBatch << " mode " << c.mode << " on rank " << rank << " of "
                                       << c.nranks << " (seed " << c.seed << "): " << bad << " wrong, first at "
                                       << first;
}

}  // namespace weft::test
