// GPU test helpers: how many GPUs the machine has (read without initialising CUDA, so the parent
// can still fork ranks), device buffers, and the CHECK for CUDA calls.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#define WEFT_CUDA_OK(call)                                                 \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_); \
  } while (0)

namespace weft::test {

// Counts /dev/nvidiaN; CUDA must not be initialised before fork.
int gpusPresent();

// Skips the test unless `n` GPUs are present.
#define WEFT_REQUIRE_GPUS(n)                                                                          \
  do {                                                                                                \
    if (::weft::test::gpusPresent() < (n))                                                            \
      GTEST_SKIP() << "needs " << (n) << " GPU(s), this machine has " << ::weft::test::gpusPresent(); \
  } while (0)

// Host bytes to a device pointer and back.
void toDevice(void* dst, const std::vector<uint8_t>& src);
std::vector<uint8_t> toHost(const void* src, size_t bytes);

// Kernels used to interleave the caller's own work with weft ops on one stream.
void launchScale(float* out, const float* in, float factor, size_t n, cudaStream_t s);
void launchFill(float* out, float value, size_t n, cudaStream_t s);

}  // namespace weft::test
