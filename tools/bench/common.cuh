// What the weft-bench modules share: dtypes, random device data, CUDA checks and the timed loops.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bench.hpp"
#include "device/dtype_device.hpp"
#include "device/testdata_device.hpp"
#include "common/build_info.hpp"

namespace weft::bench {

struct Type {
  weft_dtype_t weft;
  ncclDataType_t nccl;
  dev::DType dev;
  int bytes;
};

inline Type typeOf(const std::string& name) {
  if (name == "float") return {WEFT_FLOAT32, ncclFloat32, dev::DType::kFloat32, 4};
  if (name == "half") return {WEFT_FLOAT16, ncclFloat16, dev::DType::kFloat16, 2};
  return {WEFT_BFLOAT16, ncclBfloat16, dev::DType::kBFloat16, 2};
}

static __global__ void fillKernel(void* out, dev::DType t, uint64_t seed, int rank, uint64_t n) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x)
    dev::storeFromFloat(out, i, t, dev::testValue(seed, rank, i));
}

// Relative error of one rounding to the type (unit roundoff).
inline double rounding(const Type& t) {
  return t.bytes == 4                    ? std::ldexp(1.0, -24)
         : t.dev == dev::DType::kFloat16 ? std::ldexp(1.0, -11)
                                         : std::ldexp(1.0, -8);
}

// `text` as a JSON string, quotes included: a GPU's name or a variable's value may hold anything.
inline std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
      out += code;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// A report's rows as a JSON array in o.json (nothing when it is empty). Every object starts with
// what all reports share (op, graph, ranks, dtype, and where it ran: the GPU model, the transport
// the environment asks for (not a config file's), the baseline's collective and NCCL's path
// settings, the UTC date and the build's commit), so that a kept file says what it measured (scripts/results-table.py makes the README's
// table from such files); add(f) appends one, f(stream) writing the rest of its fields as
// `, "key": value`.
class JsonRows {
 public:
  JsonRows(const Context& c, const Options& o, const std::string& op) : c_(c), o_(o), op_(op) {
    if (o.json.empty()) return;
    out_.open(o.json);
    cudaDeviceProp prop{};
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) gpu_ = prop.name;
    const char* transport = std::getenv("WEFT_TRANSPORT");
    const char* nodeRanks = std::getenv("WEFT_NODE_RANKS");
    transport_ = transport && *transport ? transport : "auto";
    if (nodeRanks && *nodeRanks) transport_ += ", node_ranks " + std::string(nodeRanks);
    if (transport_ != "auto" || (nodeRanks && *nodeRanks)) {
      const char* backend = std::getenv("WEFT_PROXY_BACKEND");
      transport_ += std::string(", proxy_backend ") + (backend && *backend ? backend : "auto");
    }
    // The NCCL settings that choose its path (its socket transport, for the proxy's rows).
    for (const char* var : {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NET", "NCCL_NVLS_ENABLE"})
      if (const char* v = std::getenv(var); v && *v)
        ncclEnv_ += (ncclEnv_.empty() ? "" : " ") + std::string(var) + "=" + v;
    const std::time_t now = std::time(nullptr);
    char day[16];
    std::strftime(day, sizeof day, "%Y-%m-%d", std::gmtime(&now));
    date_ = day;
    if (out_) out_ << "[";
  }
  ~JsonRows() {
    if (out_) out_ << "\n]\n";
  }
  template <typename F>
  void add(F&& fields) {
    if (!out_) return;
    out_ << (first_ ? "\n" : ",\n") << "  {\"op\": " << jsonString(op_)
         << ", \"graph\": " << (o_.graph ? "true" : "false") << ", \"ranks\": " << c_.nranks
         << ", \"dtype\": " << jsonString(o_.dtype) << ", \"gpu\": " << jsonString(gpu_)
         << ", \"baseline\": " << jsonString(o_.baseline) << ", \"nccl_env\": " << jsonString(ncclEnv_)
         << ", \"transport\": " << jsonString(transport_) << ", \"date\": " << jsonString(date_)
         << ", \"commit\": " << jsonString(weft::buildCommit());
    fields(out_);
    out_ << "}";
    first_ = false;
  }

 private:
  const Context& c_;
  const Options& o_;
  std::string op_, gpu_, transport_, ncclEnv_, date_;
  std::ofstream out_;
  bool first_ = true;
};

inline void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

// Elements of weft's output (`count` of t, device) that differ from the baseline's by more than
// tolerance x (|baseline element| + the baseline's rms).
inline int64_t differing(const Type& t, const void* weftOut, const void* baseOut, uint64_t count, double tolerance) {
  std::vector<uint8_t> a(count * t.bytes), b(count * t.bytes);
  cuda(cudaMemcpy(a.data(), weftOut, a.size(), cudaMemcpyDeviceToHost), "copy weft's output");
  cuda(cudaMemcpy(b.data(), baseOut, b.size(), cudaMemcpyDeviceToHost), "copy the baseline's output");
  double rms = 0;
  for (uint64_t i = 0; i < count; ++i) rms += std::pow(dev::loadAsFloat(b.data(), i, t.dev), 2);
  rms = std::sqrt(rms / std::max<uint64_t>(count, 1));
  int64_t n = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const double x = dev::loadAsFloat(a.data(), i, t.dev), y = dev::loadAsFloat(b.data(), i, t.dev);
    n += !(std::fabs(x - y) <= tolerance * (std::fabs(y) + rms));
  }
  return n;
}

// Median of `us`, which it reorders.
inline double median(std::vector<double>& us) {
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

template <typename F>
double eagerUs(Context& c, int warmup, int iters, F&& op, double* hostUs) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev) cuda(cudaEventCreate(&e), "cudaEventCreate");
  cuda(cudaEventRecord(ev[0], c.stream), "record");
  double host = 0;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    op();
    host += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    cuda(cudaEventRecord(ev[i + 1], c.stream), "record");
  }
  if (hostUs) *hostUs = host / iters;
  cuda(cudaStreamSynchronize(c.stream), "sync");
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "elapsed");
    us[i] = ms * 1000.0;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return median(us);
}

// `iters` calls captured into one graph; the warm-up replays it once (when asked for), then each of
// kReplays timed replays gives a time per op.
template <typename F>
double graphUs(Context& c, int warmup, int iters, F&& op, double* hostUs) {
  constexpr int kReplays = 7;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < iters; ++i) op();
  cuda(cudaStreamEndCapture(c.stream, &graph), "end capture");
  cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate the graph");
  if (warmup > 0) cuda(cudaGraphLaunch(exec, c.stream), "warm-up replay");
  cudaEvent_t start, stop;
  cuda(cudaEventCreate(&start), "cudaEventCreate");
  cuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> us(kReplays);
  double host = 0;
  for (double& u : us) {
    cuda(cudaEventRecord(start, c.stream), "record");
    const auto t0 = std::chrono::steady_clock::now();
    cuda(cudaGraphLaunch(exec, c.stream), "replay");
    host += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    cuda(cudaEventRecord(stop, c.stream), "record");
    cuda(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    u = ms * 1000.0 / iters;
  }
  if (hostUs) *hostUs = host / (kReplays * iters);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(us);
}

// Median microseconds per call of `op` on the context's stream, timed with events: per call
// (eager), or per replay of a graph of o.iters calls divided by o.iters (-G). *hostUs (if given)
// receives the host's mean time per call.
template <typename F>
double medianUs(Context& c, const Options& o, F&& op, double* hostUs = nullptr) {
  return o.graph ? graphUs(c, o.warmup, o.iters, op, hostUs) : eagerUs(c, o.warmup, o.iters, op, hostUs);
}

// One of a row's timings: the op, where its median goes, and (if wanted) its host time per call.
struct Timed {
  std::function<void()> op;
  double* us;
  double* hostUs = nullptr;
};
// Times every op of a row twice, the second pass in the reverse order, and keeps each one's lower
// median, with the host time of the same pass: minutes of GPU work move its clock, which otherwise
// favours whatever is timed first (the order alone moved a GEMM timing by up to 6%:
// docs/archive/perf-journal-2026-11.md).
inline void timeBothWays(Context& c, const Options& o, const std::vector<Timed>& timings) {
  for (const Timed& t : timings) *t.us = std::numeric_limits<double>::infinity();
  const size_t n = timings.size();
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < n; ++i) {
      const Timed& t = timings[pass == 0 ? i : n - 1 - i];
      double hostUs = 0;
      const double us = medianUs(c, o, t.op, t.hostUs ? &hostUs : nullptr);
      if (us >= *t.us) continue;
      *t.us = us;
      if (t.hostUs) *t.hostUs = hostUs;
    }
}

}  // namespace weft::bench
