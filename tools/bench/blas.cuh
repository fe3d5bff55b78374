// cuBLAS for the baselines, through the wrapper weft's own blas paths use (device/blas_host.hpp):
// one handle with a workspace of its own, so that cuBLAS allocates nothing while a graph is being
// captured, and the same cublasGemmEx calls, so a baseline and weft's blas path run the same
// cuBLAS kernel for a shape.
#pragma once

#include <memory>
#include <string>

#include "common.cuh"
#include "device/blas_host.hpp"

namespace weft::bench {

class Blas {
 public:
  explicit Blas(cudaStream_t stream) : stream_(stream) {
    const gpu::Outcome o = gpu::VendorBlas::create(&blas_);
    if (!o) die("cuBLAS: " + o.message);
  }
  // y[batch, n] = x[batch, k] . w[n, k]^T, row-major.
  void gemv(const void* x, const void* w, void* y, uint64_t batch, uint64_t n, uint64_t k, dev::DType dt) const {
    ok(blas_->gemv(x, w, y, batch, n, k, dt, stream_));
  }
  // out[tokens, h] = a[tokens, k] . w[k, h], row-major.
  void gemm(const void* a, const void* w, void* out, uint64_t tokens, uint64_t k, uint64_t h, dev::DType dt) const {
    ok(blas_->gemm(a, w, out, tokens, k, h, dt, stream_));
  }

 private:
  static void ok(const gpu::Outcome& o) {
    if (!o) die(o.message);
  }
  cudaStream_t stream_;
  std::unique_ptr<gpu::VendorBlas> blas_;
};

}  // namespace weft::bench
