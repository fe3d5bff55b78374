// weft-bench embedding_alltoall: weft's op as the path table runs it, and with each path forced
// (fused: each bag pooled into its destination; unfused: pooled into a buffer, then sent), against
// a pooling kernel + NCCL all-to-all (or, with --baseline weft, weft's own All-to-All) in the same
// run, on the same stream, plus pooling alone, the all-to-all alone and a device-to-device copy
// (the bandwidth pooling should approach). Every rank owns the same number of tables; bags have
// exactly `pooling` indices, drawn uniformly from their table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "common.cuh"
#include "device/coop_device.hpp"
#include "device/ops/embedding/embedding_pool_device.hpp"
#include "device/ops/partition_device.hpp"

namespace weft::bench {

namespace {

struct EmbedShape {
  int64_t tables, rows, dim, globalBatch, pooling;
};
constexpr EmbedShape kShapes[] = {{8, 1 << 20, 128, 4096, 32}, {16, 500000, 256, 16384, 64}};

__global__ void fillIndices(int64_t* idx, uint64_t n, int64_t rows, uint64_t seed) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x) {
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    idx[i] = static_cast<int64_t>(x % static_cast<uint64_t>(rows));
  }
}
__global__ void fillRamp(int64_t* v, uint64_t n, int64_t step) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x)
    v[i] = static_cast<int64_t>(i) * step;
}

// The unfused baseline's first half, with weft's own pooling code (so the comparison is of the
// fusion, not of two pooling kernels): bag (t, s) pooled into send[s / lb][s % lb][t][:], the
// layout an all-to-all of equal blocks wants. Blocks take kBagsPerBlock bags of one destination at
// a time; launch as many as are resident.
constexpr uint64_t kBagsPerBlock = 32;

__global__ void poolKernel(dev::EmbeddingArgs a, dev::DType dt, int nranks, uint8_t* send) {
  const dev::BlockCoop c{nullptr, nullptr};
  const uint64_t perDest = a.numTables * a.localBatch, steps = dev::ceilDiv(perDest, kBagsPerBlock);
  const uint64_t rowBytes = a.dim * dev::dtypeSize(dt);
  for (uint64_t i = blockIdx.x; i < nranks * steps; i += gridDim.x) {
    const int dest = static_cast<int>(i / steps);
    const uint64_t lo = i % steps * kBagsPerBlock, hi = std::min(perDest, lo + kBagsPerBlock);
    dev::poolBags(
        c, dt, a, a.localBatch * nranks, dest, lo, hi,
        [&](uint64_t b) { return send + (dest * perDest + b) * rowBytes; }, [](uint64_t, int64_t, int64_t) {});
  }
}

int residentBlocks(int threads) {
  int perSm = 0, sms = 0, device = 0;
  cuda(cudaGetDevice(&device), "cudaGetDevice");
  cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, poolKernel, threads, 0), "occupancy");
  return perSm * sms;
}

}  // namespace

std::vector<EmbedRow> runEmbedding(Context& c, const Options& o) {
  const Type t = typeOf(o.dtype);
  std::vector<EmbedRow> rows;
  uint64_t recvMax = 0;
  for (const EmbedShape& s : kShapes)
    recvMax = std::max<uint64_t>(recvMax, s.globalBatch / c.nranks * s.tables * c.nranks * s.dim * t.bytes);
  std::unique_ptr<Peers> fusedComm, unfusedComm;
  if (o.forcedPaths) {
    fusedComm = std::make_unique<Peers>(c, "WEFT_EMBEDDING_PATH", "fused", recvMax);
    unfusedComm = std::make_unique<Peers>(c, "WEFT_EMBEDDING_PATH", "unfused", recvMax);
  }
  for (const EmbedShape& s : kShapes) {
    EmbedRow r{s.tables, s.rows, s.dim, s.globalBatch, s.pooling};
    const int64_t lb = s.globalBatch / c.nranks, total = s.tables * c.nranks;
    const uint64_t nIdx = s.tables * s.globalBatch * s.pooling;
    void *w, *send, *baseRecv, *big;
    int64_t *tableOffsets, *offsets, *indices;
    cuda(cudaMalloc(&w, s.tables * s.rows * s.dim * t.bytes), "cudaMalloc tables");
    cuda(cudaMalloc(&indices, nIdx * 8), "cudaMalloc indices");
    cuda(cudaMalloc(&offsets, (s.tables * s.globalBatch + 1) * 8), "cudaMalloc offsets");
    cuda(cudaMalloc(&tableOffsets, (s.tables + 1) * 8), "cudaMalloc table offsets");
    const uint64_t recvBytes = lb * total * s.dim * t.bytes;
    cuda(cudaMalloc(&send, recvBytes), "cudaMalloc send");
    // weft's All-to-All writes into the symmetric heap.
    if (o.baseline == "weft") {
      if (weft_mem_alloc(c.weft, recvBytes, &baseRecv) != WEFT_SUCCESS)
        die(std::string("weft_mem_alloc (the baseline's recv): ") + weft_get_last_error(nullptr));
    } else {
      cuda(cudaMalloc(&baseRecv, recvBytes), "cudaMalloc recv");
    }
    const uint64_t copyBytes = uint64_t{1} << 30;
    cuda(cudaMalloc(&big, 2 * copyBytes), "cudaMalloc copy buffers");
    fillKernel<<<1024, 256, 0, c.stream>>>(w, t.dev, 0xe3b0 + rows.size(), c.rank, s.tables * s.rows * s.dim);
    fillIndices<<<1024, 256, 0, c.stream>>>(indices, nIdx, s.rows, 0x5eed + c.rank);
    fillRamp<<<64, 256, 0, c.stream>>>(offsets, s.tables * s.globalBatch + 1, s.pooling);
    fillRamp<<<1, 64, 0, c.stream>>>(tableOffsets, s.tables + 1, s.rows);
    auto weftOn = [&](weft_comm_t comm, void* recv) {
      if (weft_embedding_alltoall(comm, w, tableOffsets, s.tables, indices, offsets, nullptr, WEFT_POOL_SUM, recv, lb,
                                  total, s.tables * c.rank, s.dim, t.weft, c.stream) != WEFT_SUCCESS)
        die(std::string("weft: ") + weft_get_last_error(nullptr));
    };
    const dev::EmbeddingArgs args{static_cast<const uint8_t*>(w),
                                  tableOffsets,
                                  indices,
                                  offsets,
                                  nullptr,
                                  static_cast<uint64_t>(s.tables),
                                  static_cast<uint64_t>(lb),
                                  static_cast<uint64_t>(total),
                                  static_cast<uint64_t>(s.tables * c.rank),
                                  static_cast<uint64_t>(s.dim),
                                  /*mean=*/false,
                                  /*check=*/true};
    const int poolBlocks = residentBlocks(256);
    auto pool = [&] {
      poolKernel<<<poolBlocks, 256, 0, c.stream>>>(args, t.dev, c.nranks, static_cast<uint8_t*>(send));
    };
    const uint64_t block = lb * s.tables * s.dim;  // elements to each rank
    auto allToAll = [&] {
      if (o.baseline == "weft") {
        if (weft_alltoall(c.weft, send, baseRecv, block, t.weft, c.stream) != WEFT_SUCCESS)
          die(std::string("weft all-to-all: ") + weft_get_last_error(nullptr));
        return;
      }
      ncclGroupStart();
      for (int p = 0; p < c.nranks; ++p) {
        ncclSend(static_cast<char*>(send) + p * block * t.bytes, block, t.nccl, p, c.nccl, c.stream);
        ncclRecv(static_cast<char*>(baseRecv) + p * block * t.bytes, block, t.nccl, p, c.nccl, c.stream);
      }
      if (ncclGroupEnd() != ncclSuccess) die("NCCL all-to-all failed");
    };
    auto baseline = [&] {
      pool();
      allToAll();
    };
    auto copy = [&] {
      cuda(cudaMemcpyAsync(static_cast<char*>(big) + copyBytes, big, copyBytes, cudaMemcpyDeviceToDevice, c.stream),
           "copy");
    };
    if (o.check) {
      std::vector<const void*> outputs{c.weftRecv};
      weftOn(c.weft, c.weftRecv);
      for (const Peers* p : {fusedComm.get(), unfusedComm.get()})
        if (p) {
          weftOn(p->comm, p->heap);
          outputs.push_back(p->heap);
        }
      baseline();
      cuda(cudaStreamSynchronize(c.stream), "sync");
      std::vector<uint8_t> a(recvBytes), b(recvBytes);
      cuda(cudaMemcpy(b.data(), baseRecv, recvBytes, cudaMemcpyDefault), "copy the baseline's recv");
      r.diff = 0;
      for (const void* got : outputs) {
        cuda(cudaMemcpy(a.data(), got, recvBytes, cudaMemcpyDefault), "copy weft's recv");
        // weft: [sample][src * tables + t][:]; baseline: [src][sample][t][:].
        for (int64_t src = 0; src < c.nranks; ++src)
          for (int64_t sl = 0; sl < lb; ++sl)
            for (int64_t tt = 0; tt < s.tables; ++tt)
              for (int64_t e = 0; e < s.dim; ++e) {
                const double x = dev::loadAsFloat(a.data(), (sl * total + src * s.tables + tt) * s.dim + e, t.dev);
                const double y = dev::loadAsFloat(b.data(), ((src * lb + sl) * s.tables + tt) * s.dim + e, t.dev);
                r.diff += !(std::fabs(x - y) <= 1e-2 * (std::fabs(y) + 1.0));
              }
      }
    }
    if (o.forcedPaths)
      timeBothWays(c, o,
                   {{[&] { weftOn(c.weft, c.weftRecv); }, &r.weftUs, &r.hostUs},
                    {[&] { weftOn(fusedComm->comm, fusedComm->heap); }, &r.fusedUs},
                    {[&] { weftOn(unfusedComm->comm, unfusedComm->heap); }, &r.unfusedUs},
                    {baseline, &r.baseUs},
                    {pool, &r.poolUs},
                    {allToAll, &r.allToAllUs}});
    else
      timeBothWays(c, o,
                   {{[&] { weftOn(c.weft, c.weftRecv); }, &r.weftUs, &r.hostUs},
                    {baseline, &r.baseUs},
                    {pool, &r.poolUs},
                    {allToAll, &r.allToAllUs}});
    // The copy is always timed eagerly: a graph's memcpy node moved 2.77 TB/s where the eager copy
    // moved 4.25 (H200), and the target is the better of the two.
    const double copyUs = eagerUs(c, o.warmup, o.iters, copy, nullptr);
    r.copyGBs = 2.0 * copyBytes / (copyUs * 1e3);
    r.poolGBs = static_cast<double>(nIdx) * s.dim * t.bytes / (r.poolUs * 1e3);
    rows.push_back(r);
    if (o.baseline == "weft")
      weft_mem_free(c.weft, baseRecv);
    else
      cudaFree(baseRecv);
    for (void* p :
         {w, send, big, static_cast<void*>(indices), static_cast<void*>(offsets), static_cast<void*>(tableOffsets)})
      cudaFree(p);
  }
  return rows;
}

void reportEmbedding(const Context& c, const Options& o, const std::vector<EmbedRow>& rows) {
  if (c.rank != 0) return;
  std::printf(
      "# weft-bench embedding_alltoall, %d ranks, dtype %s, %s; baseline: pooling kernel + %s all-to-all\n"
      "# weft_us: the path table's choice; fused_us / unfused_us: each path forced (each bag pooled into its "
      "destination; every bag pooled into a buffer, then sent); speedup: the baseline over weft_us\n",
      c.nranks, o.dtype.c_str(), o.graph ? "graph mode" : "eager", o.baseline == "weft" ? "weft" : "NCCL");
  std::printf("%6s %8s %5s %6s %4s %9s %9s %10s %10s %8s %9s %9s %9s %9s %7s\n", "tables", "rows", "dim", "batch",
              "pool", "weft_us", "fused_us", "unfused_us", "base_us", "speedup", "pool_us", "a2a_us", "pool_GBs",
              "copy_GBs", "#diff");
  JsonRows json(c, o, "embedding_alltoall");
  for (const EmbedRow& r : rows) {
    // A path not timed (--forced-paths 0) reads "-".
    auto us = [](double v) {
      char text[32] = "-";
      if (v > 0) std::snprintf(text, sizeof text, "%.2f", v);
      return std::string(text);
    };
    std::printf("%6lld %8lld %5lld %6lld %4lld %9.2f %9s %10s %10.2f %8.2f %9.2f %9.2f %9.0f %9.0f %7lld\n",
                (long long)r.tables, (long long)r.rows, (long long)r.dim, (long long)r.batch, (long long)r.pooling,
                r.weftUs, us(r.fusedUs).c_str(), us(r.unfusedUs).c_str(), r.baseUs, r.baseUs / r.weftUs, r.poolUs,
                r.allToAllUs, r.poolGBs, r.copyGBs, (long long)r.diff);
    json.add([&](std::ostream& j) {
      j << ", \"tables\": " << r.tables << ", \"dim\": " << r.dim << ", \"batch\": " << r.batch
        << ", \"pooling\": " << r.pooling << ", \"weft_us\": " << r.weftUs << ", \"fused_us\": " << r.fusedUs
        << ", \"unfused_us\": " << r.unfusedUs << ", \"baseline_us\": " << r.baseUs << ", \"pool_us\": " << r.poolUs
        << ", \"alltoall_us\": " << r.allToAllUs << ", \"copy_GBs\": " << r.copyGBs << ", \"differing\": " << r.diff;
    });
  }
  std::fflush(stdout);
}

}  // namespace weft::bench
