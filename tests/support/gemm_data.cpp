#include "gemm_data.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "device/dtype_device.hpp"
#include "oracle.hpp"

namespace weft::test {

namespace {

// Cuts `total` into `parts` random pieces, about a third of them empty.
std::vector<int64_t> split(uint64_t seed, int rank, uint64_t what, int64_t total, int64_t parts) {
  std::vector<uint64_t> weight(parts);
  uint64_t sum = 0;
  for (int64_t p = 0; p < parts; ++p)
    sum += weight[p] = testDraw(seed, rank, what, p, 3) == 0 ? 0 : 1 + testDraw(seed, rank, what + 1, p, 9);
  std::vector<int64_t> out(parts, 0);
  if (sum == 0) weight[parts - 1] = sum = 1;
  int64_t given = 0;
  for (int64_t p = 0; p < parts; ++p) {
    out[p] = static_cast<int64_t>(static_cast<uint64_t>(total) * weight[p] / sum);
    given += out[p];
  }
  for (int64_t p = parts - 1; given < total; p = (p + parts - 1) % parts)
    if (weight[p]) {
      ++out[p];
      ++given;
    }
  return out;
}

uint64_t weightSeed(uint64_t seed) { return seed + 0x5eed; }

}  // namespace

int64_t GemmCase::tokens(int rank) const {
  return rank == 0 ? maxTokens : static_cast<int64_t>(testDraw(seed, rank, 1, 0, static_cast<uint64_t>(maxTokens) + 1));
}

std::vector<int64_t> GemmCase::sendCounts(int rank) const { return split(seed, rank, 2, tokens(rank), nranks); }

std::vector<int64_t> GemmCase::expertOffsets(int rank) const {
  std::vector<int64_t> ends = split(seed, rank, 4, tokens(rank), experts);
  for (size_t e = 1; e < ends.size(); ++e) ends[e] += ends[e - 1];
  return ends;
}

int64_t GemmCase::received(int rank) const {
  int64_t n = 0;
  for (int i = 0; i < nranks; ++i) n += sendCounts(i)[rank];
  return n;
}

GemmInputs gemmInputs(const GemmCase& c, int rank) {
  GemmInputs in;
  const size_t es = dtypeBytes(c.dtype);
  in.a.resize(c.tokens(rank) * c.k * es);
  fillInput(in.a.data(), c.dtype, c.seed, rank, 0, c.tokens(rank) * c.k);
  in.w.resize(c.experts * c.k * c.h * es);
  fillInput(in.w.data(), c.dtype, weightSeed(c.seed), rank, 0, c.experts * c.k * c.h);
  in.sendCounts = c.sendCounts(rank);
  in.expertOffsets = c.expertOffsets(rank);
  return in;
}

::testing::AssertionResult checkGemm(const void* recv, const int64_t* recvCounts, const GemmCase& c, int rank,
                                     int64_t capacity) {
  const auto dt = static_cast<dev::DType>(c.dtype);
  const size_t es = dtypeBytes(c.dtype);
  uint64_t bad = 0;
  std::string first;
  int64_t out = 0;  // row of recv
  for (int src = 0; src < c.nranks; ++src) {
    const std::vector<int64_t> counts = c.sendCounts(src), ends = c.expertOffsets(src);
    if (recvCounts && recvCounts[src] != counts[rank] && !bad++)
      first = "recv_counts[" + std::to_string(src) + "] = " + std::to_string(recvCounts[src]) + ", want " +
              std::to_string(counts[rank]);
    int64_t row = 0;
    for (int d = 0; d < rank; ++d) row += counts[d];
    if (counts[rank] == 0) continue;
    // The source's weights rounded once, [expert, column, k] so that a dot product reads them in
    // order: drawing each input per product made the deep-k cases take half a minute a check.
    std::vector<double> wt(static_cast<size_t>(c.experts * c.h * c.k)), arow(static_cast<size_t>(c.k));
    for (int64_t e = 0; e < c.experts; ++e)
      for (int64_t i = 0; i < c.k; ++i)
        for (int64_t j = 0; j < c.h; ++j)
          wt[(e * c.h + j) * c.k + i] = roundedInput(c.dtype, weightSeed(c.seed), src, (e * c.k + i) * c.h + j);
    for (int64_t r = row; r < row + counts[rank]; ++r, ++out) {
      int64_t e = 0;
      while (ends[e] <= r) ++e;
      for (int64_t i = 0; i < c.k; ++i) arow[i] = roundedInput(c.dtype, c.seed, src, r * c.k + i);
      for (int64_t j = 0; j < c.h; ++j) {
        const double* wj = wt.data() + (e * c.h + j) * c.k;
        double want = 0, mag = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          const double t = arow[i] * wj[i];
          want += t;
          mag += std::fabs(t);
        }
        const double got = dev::loadAsFloat(recv, out * c.h + j, dt);
        const double bound = roundingOf(c.dtype) * std::fabs(want) + std::ldexp(1.0, -22) * c.k * mag + 1e-7;
        if (!(std::fabs(got - want) <= bound) && !bad++)
          first = "recv[" + std::to_string(out) + ", " + std::to_string(j) + "] (rank " + std::to_string(src) +
                  "'s row " + std::to_string(r) + ") = " + std::to_string(got) + ", want " + std::to_string(want);
      }
    }
  }
  // Rows past the received ones are not touched (poison is all bits set).
  for (int64_t i = out * c.h * es; i < capacity * c.h * static_cast<int64_t>(es); ++i)
    if (static_cast<const uint8_t*>(recv)[i] != 0xff && !bad++)
      first = "byte " + std::to_string(i) + " past the rows received was written";
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dtypeName(c.dtype) << " GEMM + All-to-All into rank " << rank << " ("
                                       << c.nranks << " ranks, max tokens " << c.maxTokens << ", k " << c.k << ", h "
                                       << c.h << ", experts " << c.experts << ", seed " << c.seed << "): " << bad
                                       << " wrong, first " << first;
}

}  // namespace weft::test
