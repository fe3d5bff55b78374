// The vendor BLAS behind the fused ops' `blas` paths: where weft's fused kernel loses, the GEMV
// runs as cuBLAS's and weft's AllReduce follows (batch 9-64, where cuBLAS's GEMM kernels beat weft's
// k-split register stream), or the GEMM runs as cuBLAS's and the GEMM + All-to-All routes its rows
// (few tokens, deep k). CUDA builds link cuBLAS (where CMake finds it); HIP builds have no
// vendor BLAS (Debian, where weft builds, packages no hipBLAS or rocBLAS), so `built()` is false
// there and the path falls back to weft's own GEMV. Host code; not compiled for the CPU backend.
#pragma once

#include <cstdint>
#include <memory>

#include "dtype_device.hpp"
#include "gpu_host.hpp"

namespace weft::gpu {

class VendorBlas {
 public:
  // Whether this build has a vendor BLAS.
  static bool built();
  // Whether the BLAS takes the shape (its sizes are 32-bit).
  static bool fits(uint64_t batch, uint64_t n, uint64_t k);
  // A handle on the current device with a workspace of its own, so that the BLAS allocates nothing
  // while a graph is being captured. kNotSupported where built() is false.
  static Outcome create(std::unique_ptr<VendorBlas>* out);
  ~VendorBlas();
  VendorBlas(const VendorBlas&) = delete;
  VendorBlas& operator=(const VendorBlas&) = delete;

  // y[batch, n] = x[batch, k] . w[n, k]^T (row-major, w in torch's Linear layout), float32
  // accumulation, on `stream` (or into the graph it captures). The caller checked fits().
  Outcome gemv(const void* x, const void* w, void* y, uint64_t batch, uint64_t n, uint64_t k, dev::DType dt,
               void* stream);
  // out[tokens, h] = a[tokens, k] . w[k, h] (row-major, as the GEMM + All-to-All takes them),
  // float32 accumulation, on `stream`. The caller checked fits(tokens, h, k).
  Outcome gemm(const void* a, const void* w, void* out, uint64_t tokens, uint64_t k, uint64_t h, dev::DType dt,
               void* stream);

 private:
  VendorBlas() = default;
  [[maybe_unused]] void* handle_ = nullptr;  // unused in builds without a vendor BLAS
  [[maybe_unused]] void* workspace_ = nullptr;
};

}  // namespace weft::gpu
