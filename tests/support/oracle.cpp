#include "oracle.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "device/dtype_device.hpp"
#include "multirank.hpp"

namespace weft::test {

namespace {

dev::DType devType(weft_dtype_t dt) { return static_cast<dev::DType>(dt); }

}  // namespace

uint64_t testDraw(uint64_t seed, int rank, uint64_t what, uint64_t i, uint64_t n) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(rank) << 48) ^ (what << 40) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return n ? x % n : 0;
}

double roundingOf(weft_dtype_t dt) {
  return dt == WEFT_FLOAT32 ? std::ldexp(1.0, -24) : dt == WEFT_FLOAT16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

size_t dtypeBytes(weft_dtype_t dt) { return dev::dtypeSize(devType(dt)); }

const char* dtypeName(weft_dtype_t dt) {
  return dt == WEFT_FLOAT32 ? "float32" : dt == WEFT_FLOAT16 ? "float16" : "bfloat16";
}

double roundedInput(weft_dtype_t dt, uint64_t seed, int rank, uint64_t i) {
  uint32_t tmp = 0;
  dev::storeFromFloat(&tmp, 0, devType(dt), inputValue(seed, rank, i));
  return dev::loadAsFloat(&tmp, 0, devType(dt));
}

void fillInput(void* buf, weft_dtype_t dt, uint64_t seed, int rank, uint64_t first, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) dev::storeFromFloat(buf, i, devType(dt), inputValue(seed, rank, first + i));
}

void poison(void* buf, size_t bytes) { memset(buf, 0xff, bytes); }

::testing::AssertionResult checkAllReduce(const void* y, weft_dtype_t dt, uint64_t seed, int nranks, uint64_t count) {
  uint64_t bad = 0, firstBad = 0;
  double firstGot = 0, firstWant = 0, err2 = 0, ref2 = 0;
  for (uint64_t i = 0; i < count; ++i) {
    double want = 0, mag = 0;
    for (int r = 0; r < nranks; ++r) {
      const double x = roundedInput(dt, seed, r, i);
      want += x;
      mag += std::fabs(x);
    }
    const double got = dev::loadAsFloat(y, i, devType(dt));
    const double bound = roundingOf(dt) * std::fabs(want) + 1e-6 * mag + 1e-7;
    if (!(std::fabs(got - want) <= bound)) {
      if (!bad++) firstBad = i, firstGot = got, firstWant = want;
    }
    err2 += (got - want) * (got - want);
    ref2 += want * want;
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dtypeName(dt) << " AllReduce of " << count << " elements over " << nranks
                                       << " ranks (seed " << seed << "): " << bad << " wrong, first at " << firstBad
                                       << " (got " << firstGot << ", want " << firstWant << "), relative norm error "
                                       << std::sqrt(err2 / (ref2 > 0 ? ref2 : 1));
}

::testing::AssertionResult checkAllToAll(const void* recv, weft_dtype_t dt, uint64_t seed, int rank, int nranks,
                                         uint64_t countPerRank) {
  const size_t es = dtypeBytes(dt);
  if (countPerRank == 0) return ::testing::AssertionSuccess();
  std::vector<uint8_t> want(countPerRank * es);
  for (int src = 0; src < nranks; ++src) {
    fillInput(want.data(), dt, seed, src, static_cast<uint64_t>(rank) * countPerRank, countPerRank);
    const auto* got = static_cast<const uint8_t*>(recv) + src * countPerRank * es;
    if (memcmp(got, want.data(), want.size()) == 0) continue;
    uint64_t k = 0;
    while (memcmp(got + k * es, want.data() + k * es, es) == 0) ++k;
    return ::testing::AssertionFailure() << dtypeName(dt) << " All-to-All on rank " << rank << " of " << nranks
                                         << " (seed " << seed << "): block from rank " << src << " differs first at "
                                         << k << " of " << countPerRank;
  }
  return ::testing::AssertionSuccess();
}

uint64_t gemvWeightSeed(uint64_t seed) { return seed + 1; }

::testing::AssertionResult checkGemvAllReduce(const void* y, weft_dtype_t dt, uint64_t seed, int nranks, uint64_t batch,
                                              uint64_t n, uint64_t k) {
  std::vector<std::vector<double>> x(nranks), w(nranks);
  for (int r = 0; r < nranks; ++r) {
    for (uint64_t i = 0; i < batch * k; ++i) x[r].push_back(roundedInput(dt, seed, r, i));
    for (uint64_t i = 0; i < n * k; ++i) w[r].push_back(roundedInput(dt, gemvWeightSeed(seed), r, i));
  }
  uint64_t bad = 0;
  std::string first;
  for (uint64_t b = 0; b < batch; ++b)
    for (uint64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int r = 0; r < nranks; ++r)
        for (uint64_t i = 0; i < k; ++i) {
          const double t = x[r][b * k + i] * w[r][j * k + i];
          want += t;
          mag += std::fabs(t);
        }
      const double got = dev::loadAsFloat(y, b * n + j, devType(dt));
      // float32 sums of k terms, then (unfused) one rounding to dt per rank, then the output's.
      const double bound = roundingOf(dt) * std::fabs(want) +
                           (std::ldexp(1.0, -23) * (k + nranks) + nranks * roundingOf(dt)) * mag + 1e-7;
      if (!(std::fabs(got - want) <= bound) && !bad++)
        first = "y[" + std::to_string(b) + ", " + std::to_string(j) + "] = " + std::to_string(got) + ", want " +
                std::to_string(want);
    }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << dtypeName(dt) << " GEMV + AllReduce batch " << batch << " n " << n << " k "
                                       << k << " over " << nranks << " ranks (seed " << seed << "): " << bad
                                       << " wrong, first " << first;
}

}  // namespace weft::test
