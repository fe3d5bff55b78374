// The timed loops, the checks and the report of weft-bench.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "bench.hpp"
#include "common.cuh"
#include "device/dtype_device.hpp"
#include "device/testdata_device.hpp"

namespace weft::bench {

namespace {

__global__ void emptyKernel() {}

double rounded(const Type& t, uint64_t seed, int rank, uint64_t i) {
  uint32_t tmp = 0;
  dev::storeFromFloat(&tmp, 0, t.dev, dev::testValue(seed, rank, i));
  return dev::loadAsFloat(&tmp, 0, t.dev);
}

// Elements of `out` (on the device) that differ from the reference beyond the dtype's rounding.
int64_t wrongElements(const Context& c, const Options& o, const Type& t, const void* out, uint64_t count,
                      uint64_t seed) {
  std::vector<uint8_t> host(count * t.bytes);
  cuda(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDefault), "copy result");
  const double eps = rounding(t);
  int64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const double got = dev::loadAsFloat(host.data(), i, t.dev);
    if (o.op == "alltoall") {
      const uint64_t per = count / c.nranks, src = i / per;
      wrong += got != rounded(t, seed, static_cast<int>(src), c.rank * per + i % per);
      continue;
    }
    double want = 0, mag = 0;
    for (int r = 0; r < c.nranks; ++r) {
      const double x = rounded(t, seed, r, i);
      want += x;
      mag += std::fabs(x);
    }
    wrong += !(std::fabs(got - want) <= eps * std::fabs(want) + 1e-6 * mag + 1e-7);
  }
  return wrong;
}

}  // namespace

std::vector<Row> runSizes(Context& c, const Options& o) {
  const Type t = typeOf(o.dtype);
  const bool a2a = o.op == "alltoall";
  std::vector<Row> rows;
  for (double b = static_cast<double>(o.minBytes); b <= static_cast<double>(o.maxBytes) * 1.0001; b *= o.factor) {
    Row r;
    const uint64_t unit = static_cast<uint64_t>(t.bytes) * (a2a ? c.nranks : 1);
    r.count = static_cast<uint64_t>(b) / unit * (a2a ? c.nranks : 1);
    r.bytes = r.count * t.bytes;
    if (r.count == 0) continue;
    const uint64_t seed = 0x5eed0000 + rows.size();
    fillKernel<<<1024, 256, 0, c.stream>>>(c.send, t.dev, seed, c.rank, r.count);
    const uint64_t per = r.count / c.nranks;
    auto weftOp = [&] {
      weft_result_t res = a2a ? weft_alltoall(c.weft, c.send, c.weftRecv, per, t.weft, c.stream)
                              : weft_allreduce(c.weft, c.send, c.weftRecv, r.count, t.weft, c.stream);
      if (res != WEFT_SUCCESS) die(std::string("weft: ") + weft_get_last_error(nullptr));
    };
    auto ncclOp = [&] {
      ncclResult_t res;
      if (a2a) {
        ncclGroupStart();
        for (int p = 0; p < c.nranks; ++p) {
          ncclSend(static_cast<char*>(c.send) + p * per * t.bytes, per, t.nccl, p, c.nccl, c.stream);
          ncclRecv(static_cast<char*>(c.ncclRecv) + p * per * t.bytes, per, t.nccl, p, c.nccl, c.stream);
        }
        res = ncclGroupEnd();
      } else {
        res = ncclAllReduce(c.send, c.ncclRecv, r.count, t.nccl, ncclSum, c.nccl, c.stream);
      }
      if (res != ncclSuccess) die(std::string("nccl: ") + ncclGetErrorString(res));
    };
    const bool baseline = c.nccl != nullptr;  // --baseline none: weft alone
    if (o.check) {
      weftOp();
      if (baseline) ncclOp();
      cuda(cudaStreamSynchronize(c.stream), "sync");
      r.weftWrong = wrongElements(c, o, t, c.weftRecv, r.count, seed);
      if (baseline) r.ncclWrong = wrongElements(c, o, t, c.ncclRecv, r.count, seed);
    }
    std::vector<Timed> timed{{weftOp, &r.weftUs, &r.weftHostUs}};
    if (baseline) timed.push_back({ncclOp, &r.ncclUs});
    timeBothWays(c, o, timed);
    const double busFactor = a2a ? (c.nranks - 1.0) / c.nranks : 2.0 * (c.nranks - 1.0) / c.nranks;
    r.weftBusBw = r.bytes / (r.weftUs * 1e3) * busFactor;
    r.ncclBusBw = baseline ? r.bytes / (r.ncclUs * 1e3) * busFactor : 0;
    rows.push_back(r);
  }
  return rows;
}

// An op with nothing to move, through the queue (submit, stream write, engine, stream wait),
// against an empty kernel launch.
Row runEmpty(Context& c, const Options& o) {
  Row r;
  timeBothWays(c, o,
               {{[&] {
                   if (weft_allreduce(c.weft, nullptr, nullptr, 0, WEFT_FLOAT32, c.stream) != WEFT_SUCCESS)
                     die(weft_get_last_error(nullptr));
                 },
                 &r.weftUs, &r.weftHostUs},
                {[&] { emptyKernel<<<1, 1, 0, c.stream>>>(); }, &r.ncclUs}});
  return r;
}

void report(const Context& c, const Options& o, const std::vector<Row>& rows) {
  if (c.rank != 0) return;
  std::printf("# weft-bench %s, %d ranks, dtype %s, %s, %d warm-up; baseline: %s\n", o.op.c_str(), c.nranks,
              o.dtype.c_str(),
              o.graph ? ("graph mode: " + std::to_string(o.iters) + " ops per graph, median of 7 replays").c_str()
                      : ("eager: median of " + std::to_string(o.iters) + " ops").c_str(),
              o.warmup,
              o.op == "empty"        ? "empty kernel launch"
              : o.baseline == "none" ? "none (base columns 0)"
                                     : "NCCL");
  std::printf("%12s %12s %11s %9s %11s %9s %8s %7s %7s %8s\n", "bytes", "count", "weft_us", "weft_bw", "base_us",
              "base_bw", "speedup", "#wrong", "#b_wrg", "host_us");
  JsonRows json(c, o, o.op);
  for (const Row& r : rows) {
    std::printf("%12llu %12llu %11.2f %9.2f %11.2f %9.2f %8.2f %7lld %7lld %8.2f\n", (unsigned long long)r.bytes,
                (unsigned long long)r.count, r.weftUs, r.weftBusBw, r.ncclUs, r.ncclBusBw,
                r.ncclUs > 0 ? r.ncclUs / r.weftUs : 0.0, (long long)r.weftWrong, (long long)r.ncclWrong, r.weftHostUs);
    json.add([&](std::ostream& j) {
      j << ", \"bytes\": " << r.bytes << ", \"weft_us\": " << r.weftUs << ", \"baseline_us\": " << r.ncclUs
        << ", \"weft_busbw\": " << r.weftBusBw << ", \"baseline_busbw\": " << r.ncclBusBw
        << ", \"weft_host_us\": " << r.weftHostUs << ", \"weft_wrong\": " << r.weftWrong
        << ", \"baseline_wrong\": " << r.ncclWrong;
    });
  }
  std::fflush(stdout);
}

}  // namespace weft::bench
