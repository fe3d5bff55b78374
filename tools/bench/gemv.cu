// weft-bench gemv_allreduce: weft's GEMV + AllReduce (as the path table runs it, and with each
// path forced) against cuBLAS GEMV + NCCL AllReduce (with --baseline weft: + weft's AllReduce, for
// ranks that share a GPU) in the same run, on the same stream, plus the GEMV alone and the
// AllReduce alone, so that max(compute, comm) can be read off. Each shape is n rows of w with k
// columns split over the ranks (k_local = k / nranks).
#include <cmath>
#include <cstdio>

#include "blas.cuh"

namespace weft::bench {

namespace {
size_t l2Bytes() {
  int device = 0, bytes = 0;
  cuda(cudaGetDevice(&device), "cudaGetDevice");
  cuda(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device), "cudaDeviceGetAttribute(L2CacheSize)");
  return static_cast<size_t>(bytes);
}
}  // namespace

std::vector<GemvRow> runGemv(Context& c, const Options& o) {
  const Type t = typeOf(o.dtype);
  const Blas blas(c.stream);
  const bool weftBaseline = o.baseline == "weft";
  // weft's GEMV alone: the same op on a communicator of this rank only, so no exchange.
  int64_t maxBatch = 0;
  for (int64_t b : o.gemvBatch) maxBatch = std::max(maxBatch, b);
  const Solo solo(maxBatch * o.gemvN * t.bytes);
  // weft with each path forced, for the path table (conf/path_table.tsv).
  const size_t yMax = maxBatch * o.gemvN * t.bytes;
  const char* setting = "WEFT_GEMV_PATH";
  const Peers fusedComm(c, setting, "fused", yMax), rsagComm(c, setting, "fused_rsag", yMax),
      unfusedComm(c, setting, "unfused", yMax), blasComm(c, setting, "blas", yMax);
  const Peers* forced[] = {&fusedComm, &rsagComm, &unfusedComm, &blasComm};
  std::vector<GemvRow> rows;
  for (int64_t k : o.gemvK)
    for (int64_t batch : o.gemvBatch) {
      if (k % c.nranks)
        die("--k: " + std::to_string(k) + " does not split over " + std::to_string(c.nranks) + " ranks");
      GemvRow r{batch, o.gemvN, k};
      const int64_t kl = k / c.nranks, n = o.gemvN;
      void *x, *baseY;
      const size_t wBytes = n * kl * t.bytes;
      cuda(cudaMalloc(&x, batch * kl * t.bytes), "cudaMalloc x");
      cuda(cudaMalloc(&baseY, batch * n * t.bytes), "cudaMalloc y");
      // NCCL reduces in place; weft's AllReduce writes into the symmetric heap.
      void* baseOut = baseY;
      if (weftBaseline && weft_mem_alloc(c.weft, batch * n * t.bytes, &baseOut) != WEFT_SUCCESS)
        die(std::string("weft_mem_alloc (the baseline's y): ") + weft_get_last_error(nullptr));
      // w, and with --cold-w copies of it that together hold three times L2: each op then takes
      // the next copy, which the ops since its last use have evicted.
      const size_t copies =
          o.coldW ? std::max<size_t>(2, (3 * l2Bytes() + wBytes - 1) / std::max<size_t>(wBytes, 1)) : 1;
      std::vector<void*> ws(copies);
      for (void*& p : ws) cuda(cudaMalloc(&p, wBytes), "cudaMalloc w");
      const uint64_t seed = 0x6e770000 + rows.size();
      fillKernel<<<1024, 256, 0, c.stream>>>(x, t.dev, seed, c.rank, batch * kl);
      fillKernel<<<1024, 256, 0, c.stream>>>(ws[0], t.dev, seed + 1, c.rank, n * kl);
      for (size_t i = 1; i < copies; ++i)
        cuda(cudaMemcpyAsync(ws[i], ws[0], wBytes, cudaMemcpyDeviceToDevice, c.stream), "cudaMemcpyAsync w");
      size_t turn = 0;
      auto nextW = [&] { return ws[turn++ % copies]; };
      auto weftOp = [&](weft_comm_t comm, void* y) {
        if (weft_gemv_allreduce(comm, x, nextW(), y, batch, n, kl, t.weft, c.stream) != WEFT_SUCCESS)
          die(std::string("weft: ") + weft_get_last_error(nullptr));
      };
      auto weft = [&] { weftOp(c.weft, c.weftRecv); };
      auto gemv = [&] { blas.gemv(x, nextW(), baseY, batch, n, kl, t.dev); };
      auto allReduce = [&] {
        if (weftBaseline) {
          if (weft_allreduce(c.weft, baseY, baseOut, batch * n, t.weft, c.stream) != WEFT_SUCCESS)
            die(std::string("weft AllReduce: ") + weft_get_last_error(nullptr));
        } else if (ncclAllReduce(baseY, baseY, batch * n, t.nccl, ncclSum, c.nccl, c.stream) != ncclSuccess) {
          die("ncclAllReduce failed");
        }
      };
      auto baseline = [&] {
        gemv();
        allReduce();
      };
      if (o.check) {
        weft();
        for (const Peers* p : forced) weftOp(p->comm, p->heap);
        baseline();
        cuda(cudaStreamSynchronize(c.stream), "sync");
        // The baseline rounds every rank's partial to the dtype, then sums in the dtype; float32:
        // cuBLAS and weft sum in different orders. Every path is checked.
        const double tol = 2 * (c.nranks + 1) * std::max(rounding(t), 1e-5);
        r.diff = differing(t, c.weftRecv, baseOut, batch * n, tol);
        for (const Peers* p : forced) r.diff += differing(t, p->heap, baseOut, batch * n, tol);
      }
      timeBothWays(c, o,
                   {{weft, &r.weftUs, &r.hostUs},
                    {[&] { weftOp(fusedComm.comm, fusedComm.heap); }, &r.fusedUs},
                    {[&] { weftOp(rsagComm.comm, rsagComm.heap); }, &r.rsagUs},
                    {[&] { weftOp(unfusedComm.comm, unfusedComm.heap); }, &r.unfusedUs},
                    {[&] { weftOp(blasComm.comm, blasComm.heap); }, &r.blasUs},
                    {baseline, &r.baseUs},
                    {gemv, &r.gemvUs},
                    {[&] { weftOp(solo.comm, solo.heap); }, &r.weftGemvUs},
                    {allReduce, &r.allReduceUs}});
      r.wBytes = static_cast<double>(wBytes);
      rows.push_back(r);
      cudaFree(x);
      for (void* p : ws) cudaFree(p);
      cudaFree(baseY);
      if (weftBaseline) weft_mem_free(c.weft, baseOut);
    }
  return rows;
}

void reportGemv(const Context& c, const Options& o, const std::vector<GemvRow>& rows) {
  if (c.rank != 0) return;
  std::printf("# weft-bench gemv_allreduce, %d ranks, dtype %s, %s, w %s; baseline: cuBLAS GEMV + %s AllReduce\n",
              c.nranks, o.dtype.c_str(), o.graph ? "graph mode" : "eager",
              o.coldW ? "cold (a copy per op, 3x L2 in all)" : "hot (one copy: in L2 where it fits)",
              o.baseline == "weft" ? "weft" : "NCCL");
  // weft_us: weft_gemv_allreduce as the path table runs it; fused_us / rsag_us / unfused_us /
  // blas_us: each path forced (fused, fused_rsag, unfused, blas); speedup: the baseline over weft_us; gemv_us: cuBLAS's
  // GEMV alone; weft_gemv: weft's (the op on one rank); w_TB/s: weft's GEMV streaming w;
  // weft/gemv: weft_us over cuBLAS's GEMV; #diff: elements off the baseline, over every path.
  std::printf("%6s %6s %6s %9s %9s %9s %10s %9s %9s %8s %9s %9s %9s %7s %9s %6s %8s\n", "batch", "n", "k", "weft_us",
              "fused_us", "rsag_us", "unfused_us", "blas_us", "base_us", "speedup", "gemv_us", "weft_gemv", "allred_us",
              "w_TB/s", "weft/gemv", "#diff", "host_us");
  JsonRows json(c, o, "gemv_allreduce");
  for (const GemvRow& r : rows) {
    std::printf(
        "%6lld %6lld %6lld %9.2f %9.2f %9.2f %10.2f %9.2f %9.2f %8.2f %9.2f %9.2f %9.2f %7.2f %9.2f %6lld %8.2f\n",
        (long long)r.batch, (long long)r.n, (long long)r.k, r.weftUs, r.fusedUs, r.rsagUs, r.unfusedUs, r.blasUs,
        r.baseUs, r.baseUs / r.weftUs, r.gemvUs, r.weftGemvUs, r.allReduceUs, r.wBytes / (r.weftGemvUs * 1e6),
        r.weftUs / r.gemvUs, (long long)r.diff, r.hostUs);
    json.add([&](std::ostream& j) {
      j << ", \"batch\": " << r.batch << ", \"n\": " << r.n << ", \"k\": " << r.k << ", \"weft_us\": " << r.weftUs
        << ", \"fused_us\": " << r.fusedUs << ", \"rsag_us\": " << r.rsagUs << ", \"unfused_us\": " << r.unfusedUs
        << ", \"blas_us\": " << r.blasUs << ", \"baseline_us\": " << r.baseUs << ", \"gemv_us\": " << r.gemvUs
        << ", \"weft_gemv_us\": " << r.weftGemvUs << ", \"allreduce_us\": " << r.allReduceUs
        << ", \"differing\": " << r.diff;
    });
  }
  std::fflush(stdout);
}

}  // namespace weft::bench
