// weft-bench gemm_alltoall: weft's op as the path table runs it, and with each path forced (fused:
// weft's GEMM sending its tiles; blas: cuBLAS's GEMM, then the op routing its rows), against
// cuBLAS GEMM + NCCL all-to-all with splits in the same run, on the same stream, plus the GEMM
// alone (cuBLAS, and weft's own with every row kept on its rank) and the all-to-all alone, so that
// max(compute, comm) can be read off. Every rank has `tokens` rows, split unevenly (0.75x to 1.25x
// of an even share) over the destinations. The baseline is given the splits on the host for free;
// weft reads them from device memory. With --baseline weft (ranks that share a GPU, which NCCL
// refuses) the baseline's all-to-all is weft's, which moves equal blocks: every split is then even.
#include <cmath>
#include <cstdio>

#include "blas.cuh"

namespace weft::bench {

namespace {

// Rows rank `src` sends to each rank: shares of 3..5 (out of 4 on average), or all alike if
// `even`, cut to sum to `tokens`.
std::vector<int64_t> splitOf(int src, int nranks, int64_t tokens, bool even) {
  std::vector<int64_t> w(nranks), out(nranks);
  int64_t sum = 0, given = 0;
  for (int d = 0; d < nranks; ++d) sum += w[d] = even ? 1 : 3 + (src * 7 + d * 3) % 3;
  for (int d = 0; d < nranks; ++d) given += out[d] = tokens * w[d] / sum;
  out[src] += tokens - given;
  return out;
}

// The rows any rank's recv must hold for shape `s` on `n` ranks: what it receives, and at least
// its own tokens (weft's GEMM alone keeps every row on its rank).
int64_t capacityOf(const GemmShape& s, int n, bool even) {
  int64_t capacity = 0;
  for (int dst = 0; dst < n; ++dst) {
    int64_t into = 0;
    for (int src = 0; src < n; ++src) into += splitOf(src, n, s.tokens, even)[dst];
    capacity = std::max({capacity, into, s.tokens});
  }
  return capacity;
}

}  // namespace

std::vector<GemmRow> runGemm(Context& c, const Options& o) {
  const Type t = typeOf(o.dtype);
  if (t.bytes != 2) die("--dtype: the GEMM takes bf16 or half");
  const Blas blas(c.stream);
  const bool even = o.baseline == "weft";
  uint64_t recvMax = 0;
  for (const GemmShape& s : o.gemmShapes) {
    if (even && s.tokens % c.nranks)
      die("--shapes: " + std::to_string(s.tokens) + " tokens do not split evenly over " + std::to_string(c.nranks) +
          " ranks (--baseline weft: weft's all-to-all moves equal blocks)");
    recvMax = std::max<uint64_t>(recvMax, capacityOf(s, c.nranks, even) * s.h * t.bytes);
  }
  const Peers fusedComm(c, "WEFT_GEMM_PATH", "fused", recvMax), blasComm(c, "WEFT_GEMM_PATH", "blas", recvMax);
  std::vector<GemmRow> rows;
  for (const GemmShape& s : o.gemmShapes) {
    GemmRow r{s.tokens, s.k, s.h};
    const int n = c.nranks, me = c.rank;
    const std::vector<int64_t> send = splitOf(me, n, s.tokens, even);
    std::vector<int64_t> from(n), self(n, 0);
    const int64_t capacity = capacityOf(s, n, even);
    int64_t received = 0;
    for (int src = 0; src < n; ++src) received += from[src] = splitOf(src, n, s.tokens, even)[me];
    self[me] = s.tokens;
    if (static_cast<uint64_t>(capacity * s.h * t.bytes) > o.maxBytes) die("gemm_alltoall: -e is too small for recv");
    void *a, *w, *out, *baseRecv;
    int64_t *sendDev, *selfDev;
    cuda(cudaMalloc(&a, s.tokens * s.k * t.bytes), "cudaMalloc a");
    cuda(cudaMalloc(&w, s.k * s.h * t.bytes), "cudaMalloc w");
    cuda(cudaMalloc(&out, s.tokens * s.h * t.bytes), "cudaMalloc out");
    // weft's all-to-all writes into the symmetric heap.
    if (even) {
      if (weft_mem_alloc(c.weft, capacity * s.h * t.bytes, &baseRecv) != WEFT_SUCCESS)
        die(std::string("weft_mem_alloc (the baseline's recv): ") + weft_get_last_error(nullptr));
    } else {
      cuda(cudaMalloc(&baseRecv, capacity * s.h * t.bytes), "cudaMalloc baseline recv");
    }
    cuda(cudaMalloc(&sendDev, n * sizeof(int64_t)), "cudaMalloc send_counts");
    cuda(cudaMalloc(&selfDev, n * sizeof(int64_t)), "cudaMalloc send_counts");
    cuda(cudaMemcpy(sendDev, send.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice), "copy send_counts");
    cuda(cudaMemcpy(selfDev, self.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice), "copy send_counts");
    const uint64_t seed = 0x6e6d0000 + rows.size();
    fillKernel<<<1024, 256, 0, c.stream>>>(a, t.dev, seed, me, s.tokens * s.k);
    fillKernel<<<1024, 256, 0, c.stream>>>(w, t.dev, seed + 1, me, s.k * s.h);
    auto weftOn = [&](weft_comm_t comm, void* recv, const int64_t* counts) {
      if (weft_gemm_alltoall(comm, a, w, counts, recv, capacity, nullptr, s.tokens, s.k, s.h, t.weft, c.stream) !=
          WEFT_SUCCESS)
        die(std::string("weft: ") + weft_get_last_error(nullptr));
    };
    auto gemm = [&] { blas.gemm(a, w, out, s.tokens, s.k, s.h, t.dev); };
    auto allToAll = [&] {
      if (even) {
        if (weft_alltoall(c.weft, out, baseRecv, s.tokens / n * s.h, t.weft, c.stream) != WEFT_SUCCESS)
          die(std::string("weft all-to-all: ") + weft_get_last_error(nullptr));
        return;
      }
      const size_t row = s.h * t.bytes;
      int64_t sendAt = 0, recvAt = 0;
      if (ncclGroupStart() != ncclSuccess) die("ncclGroupStart");
      for (int p = 0; p < n; ++p) {
        if (send[p] && ncclSend(static_cast<uint8_t*>(out) + sendAt * row, send[p] * s.h, t.nccl, p, c.nccl,
                                c.stream) != ncclSuccess)
          die("ncclSend");
        if (from[p] && ncclRecv(static_cast<uint8_t*>(baseRecv) + recvAt * row, from[p] * s.h, t.nccl, p, c.nccl,
                                c.stream) != ncclSuccess)
          die("ncclRecv");
        sendAt += send[p];
        recvAt += from[p];
      }
      if (ncclGroupEnd() != ncclSuccess) die("ncclGroupEnd");
    };
    auto baseline = [&] {
      gemm();
      allToAll();
    };
    if (o.check) {
      weftOn(c.weft, c.weftRecv, sendDev);
      weftOn(fusedComm.comm, fusedComm.heap, sendDev);
      weftOn(blasComm.comm, blasComm.heap, sendDev);
      baseline();
      cuda(cudaStreamSynchronize(c.stream), "sync");
      r.diff = 0;
      for (void* got : {c.weftRecv, fusedComm.heap, blasComm.heap})
        r.diff += differing(t, got, baseRecv, received * s.h, 2 * rounding(t));  // two roundings
    }
    timeBothWays(c, o,
                 {{[&] { weftOn(c.weft, c.weftRecv, sendDev); }, &r.weftUs, &r.hostUs},
                  {[&] { weftOn(fusedComm.comm, fusedComm.heap, sendDev); }, &r.fusedUs},
                  {[&] { weftOn(blasComm.comm, blasComm.heap, sendDev); }, &r.blasUs},
                  {baseline, &r.baseUs},
                  {gemm, &r.gemmUs},
                  {[&] { weftOn(fusedComm.comm, fusedComm.heap, selfDev); }, &r.weftGemmUs},
                  {allToAll, &r.allToAllUs}});
    rows.push_back(r);
    if (even)
      weft_mem_free(c.weft, baseRecv);
    else
      cudaFree(baseRecv);
    for (void* p : {a, w, out, static_cast<void*>(sendDev), static_cast<void*>(selfDev)}) cudaFree(p);
  }
  return rows;
}

void reportGemm(const Context& c, const Options& o, const std::vector<GemmRow>& rows) {
  if (c.rank != 0) return;
  std::printf(
      "# weft-bench gemm_alltoall, %d ranks, dtype %s, %s; baseline: cuBLAS GEMM + %s\n"
      "# weft_us: the path table's choice; fused_us / blas_us: each path forced (weft's GEMM sending its tiles; "
      "cuBLAS's GEMM, then weft routing its rows); speedup: the baseline over weft_us\n"
      "# weft_gemm: weft's op with every row kept on its rank (its GEMM alone); fused/max: fused_us over "
      "max(gemm_us, a2a_us)\n",
      c.nranks, o.dtype.c_str(), o.graph ? "graph mode" : "eager",
      o.baseline == "weft" ? "weft's all-to-all (even splits)" : "NCCL all-to-all (splits)");
  std::printf("%6s %6s %6s %9s %9s %9s %9s %8s %9s %9s %8s %9s %9s %8s %6s %8s\n", "tokens", "k", "h", "weft_us",
              "fused_us", "blas_us", "base_us", "speedup", "gemm_us", "weftgemm", "w/cublas", "a2a_us", "fused/max",
              "TFLOP/s", "#diff", "host_us");
  JsonRows json(c, o, "gemm_alltoall");
  for (const GemmRow& r : rows) {
    std::printf("%6lld %6lld %6lld %9.2f %9.2f %9.2f %9.2f %8.2f %9.2f %9.2f %8.2f %9.2f %9.2f %8.1f %6lld %8.2f\n",
                (long long)r.tokens, (long long)r.k, (long long)r.h, r.weftUs, r.fusedUs, r.blasUs, r.baseUs,
                r.baseUs / r.weftUs, r.gemmUs, r.weftGemmUs, r.gemmUs / r.weftGemmUs, r.allToAllUs,
                r.fusedUs / std::max(r.gemmUs, r.allToAllUs), r.flops() / (r.weftGemmUs * 1e6), (long long)r.diff,
                r.hostUs);
    json.add([&](std::ostream& j) {
      j << ", \"tokens\": " << r.tokens << ", \"k\": " << r.k << ", \"h\": " << r.h << ", \"weft_us\": " << r.weftUs
        << ", \"fused_us\": " << r.fusedUs << ", \"blas_us\": " << r.blasUs << ", \"baseline_us\": " << r.baseUs
        << ", \"gemm_us\": " << r.gemmUs << ", \"weft_gemm_us\": " << r.weftGemmUs
        << ", \"alltoall_us\": " << r.allToAllUs << ", \"differing\": " << r.diff;
    });
  }
  std::fflush(stdout);
}

}  // namespace weft::bench
