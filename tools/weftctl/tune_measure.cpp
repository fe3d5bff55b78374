// weftctl tune measure: for each world size, starts that many ranks on this host (forked from
// weftctl before anything touches a device, so each child starts its device afresh), and each
// rank times the op (the GEMV + AllReduce, the GEMM + All-to-All or the embedding-bag +
// All-to-All) with every path forced (one
// communicator per path, as weft-bench does) over the sweep. Rank 0 reports its medians through a
// pipe; the parent keeps each shape's fastest path and writes the rows (sweep.cpp turns the
// points into rows).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/gpus_visible.hpp"
#include "common/log.hpp"
#include "runtime/backend.hpp"
#include "runtime/comm.hpp"
#include "runtime/config.hpp"
#include "runtime/unique_id.hpp"
#include "sweep.hpp"
#include "tune.hpp"
#include "weft/version.h"

namespace weftctl {

namespace {

using weft::Code;
using weft::Error;
using Clock = std::chrono::steady_clock;

const bool kCpu = std::string(WEFT_BUILD_GPU) == "cpu";
weft::dev::DType dtypeOf(const std::string& name) {
  if (name == "float32") return weft::dev::DType::kFloat32;
  if (name == "float16") return weft::dev::DType::kFloat16;
  if (name == "bfloat16") return weft::dev::DType::kBFloat16;
  throw Error(Code::kInvalidArgument, "--dtype: '" + name + "' is not float32, float16 or bfloat16");
}

// Heap memory holding `bytes` of a repeating pattern (0x3c bytes: about 1 in half precision and
// 0.01 in bfloat16 and float32), so that no path runs on zeros.
void* patterned(weft::Comm& comm, uint64_t bytes) {
  void* p = comm.memAlloc(bytes);
  const std::vector<uint8_t> chunk(std::min<uint64_t>(bytes, 16 << 20), 0x3c);
  for (uint64_t at = 0; at < bytes; at += chunk.size())
    weft::copyToDevice(static_cast<uint8_t*>(p) + at, chunk.data(), std::min<uint64_t>(chunk.size(), bytes - at));
  return p;
}

// The rows each rank sends to each destination: an even split, the remainder one row each to the
// first destinations (so no rank receives more than tokens + nranks - 1 rows: run()'s capacity).
std::vector<int64_t> evenSplit(uint64_t tokens, int nranks) {
  std::vector<int64_t> counts(nranks, static_cast<int64_t>(tokens / nranks));
  for (uint64_t d = 0; d < tokens % static_cast<uint64_t>(nranks); ++d) ++counts[d];
  return counts;
}

// The embedding's bags: every rank owns `tables` tables of kEmbeddingRows rows (each rank the same
// number, as DLRM shards them), and each bag pools kBagRows rows drawn evenly from its table.
const uint64_t kEmbeddingRows = kCpu ? 64 : 100000, kBagRows = kCpu ? 4 : 32;

// An embedding point's lookups in one block: indices, then offsets, then table offsets (int64).
struct Lookups {
  uint64_t indices, offsets, tableOffsets;
  Lookups(const SweepPoint& p, int nranks) {
    const uint64_t bags = p.dims[1] * p.dims[0] * static_cast<uint64_t>(nranks);
    indices = bags * kBagRows;
    offsets = bags + 1;
    tableOffsets = p.dims[1] + 1;
  }
  uint64_t bytes() const { return (indices + offsets + tableOffsets) * sizeof(int64_t); }
};

// The bytes of the sweep's largest input, weights and output (the GEMM's recv holds a rank's
// tokens and one row per rank more: run() passes that capacity; the embedding's input is its
// lookups).
struct Footprint {
  uint64_t in = 0, w = 0, out = 0;
  Footprint(weft::FusedOp op, const std::vector<SweepPoint>& points, weft::dev::DType dt, int nranks) {
    const uint64_t es = weft::dev::dtypeSize(dt);
    const bool gemv = op == weft::FusedOp::kGemvAllReduce;
    for (const SweepPoint& p : points) {
      if (op == weft::FusedOp::kEmbeddingAllToAll) {  // local_batch, tables, dim
        in = std::max(in, Lookups(p, nranks).bytes());
        w = std::max(w, p.dims[1] * kEmbeddingRows * p.dims[2] * es);
        out = std::max(out, p.dims[0] * p.dims[1] * static_cast<uint64_t>(nranks) * p.dims[2] * es);
        continue;
      }
      in = std::max(in, p.dims[0] * (gemv ? p.dims[2] : p.dims[1]) * es);
      w = std::max(w, p.dims[1] * p.dims[2] * es);
      out = std::max(out, (gemv ? p.dims[0] * p.dims[1] : (p.dims[0] + nranks) * p.dims[2]) * es);
    }
  }
  uint64_t heap() const { return ((in + w + out) * 5 / 4 + (64 << 20)) >> 20 << 20; }
};

// The ops of the sweep's points, over heap blocks made for its largest shape.
class PointOps {
 public:
  PointOps(weft::Comm& comm, weft::FusedOp op, const Footprint& f, weft::dev::DType dt, int nranks)
      : comm_(comm), op_(op), dt_(dt), nranks_(nranks) {
    in_ = patterned(comm, f.in);
    w_ = patterned(comm, f.w);
    out_ = comm.memAlloc(f.out);
    counts_ = static_cast<int64_t*>(comm.memAlloc(nranks * sizeof(int64_t)));
  }
  // Sets the point's inputs up (the GEMM's send counts, the embedding's lookups); then run()
  // issues its op.
  void prepare(const SweepPoint& p) {
    point_ = p;
    if (op_ == weft::FusedOp::kEmbeddingAllToAll) return prepareLookups(p);
    if (op_ != weft::FusedOp::kGemmAllToAll) return;
    const std::vector<int64_t> counts = evenSplit(p.dims[0], nranks_);
    weft::copyToDevice(counts_, counts.data(), counts.size() * sizeof(int64_t));
  }
  weft::Code run() {
    const SweepPoint& p = point_;
    if (op_ == weft::FusedOp::kGemvAllReduce)
      return comm_.gemvAllReduce(in_, w_, out_, static_cast<uint32_t>(p.dims[0]), p.dims[1], p.dims[2], dt_, nullptr);
    if (op_ == weft::FusedOp::kEmbeddingAllToAll) {
      const Lookups l(p, nranks_);
      const auto* lookups = static_cast<const int64_t*>(in_);
      const weft::dev::EmbeddingArgs a{static_cast<const uint8_t*>(w_),
                                       lookups + l.indices + l.offsets,
                                       lookups,
                                       lookups + l.indices,
                                       nullptr,
                                       p.dims[1],
                                       p.dims[0],
                                       p.dims[1] * static_cast<uint64_t>(nranks_),
                                       p.dims[1] * static_cast<uint64_t>(comm_.rank()),
                                       p.dims[2],
                                       /*mean=*/false,
                                       /*check=*/true};
      return comm_.embeddingAllToAll(a, out_, dt_, nullptr);
    }
    const weft::dev::GemmArgs g{static_cast<const uint8_t*>(in_),
                                static_cast<const uint8_t*>(w_),
                                counts_,
                                nullptr,
                                nullptr,
                                p.dims[0],
                                p.dims[1],
                                p.dims[2],
                                p.dims[0] + static_cast<uint64_t>(nranks_),
                                1};
    return comm_.gemmAllToAll(g, out_, dt_, nullptr);
  }

 private:
  // Every bag pools kBagRows rows of its table, spread by a multiplicative hash so that the rows a
  // bag reads are not adjacent.
  void prepareLookups(const SweepPoint& p) {
    const Lookups l(p, nranks_);
    std::vector<int64_t> host(l.indices + l.offsets + l.tableOffsets);
    for (uint64_t i = 0; i < l.indices; ++i)
      host[i] = static_cast<int64_t>((i * 0x9e3779b97f4a7c15ull >> 17) % kEmbeddingRows);
    for (uint64_t b = 0; b < l.offsets; ++b) host[l.indices + b] = static_cast<int64_t>(b * kBagRows);
    for (uint64_t t = 0; t < l.tableOffsets; ++t)
      host[l.indices + l.offsets + t] = static_cast<int64_t>(t * kEmbeddingRows);
    weft::copyToDevice(in_, host.data(), host.size() * sizeof(int64_t));
  }

  weft::Comm& comm_;
  weft::FusedOp op_;
  weft::dev::DType dt_;
  void* in_ = nullptr;
  void* w_ = nullptr;
  void* out_ = nullptr;
  int nranks_ = 1;
  int64_t* counts_ = nullptr;
  SweepPoint point_;
};

// One rank of a world of `nranks`: every path over every point, one line per (path, point) on
// `report` (rank 0 only): "PATH INDEX MICROSECONDS", after "per_gpu N" per communicator. Every rank issues the same ops
// in the same order (the count is fixed, never adapted to what one rank saw), as collectives need.
void measureRank(const TuneMeasureOptions& o, weft::FusedOp op, const std::vector<SweepPoint>& points,
                 const std::vector<weft::UniqueId>& ids, int rank, int nranks, FILE* report) {
  weft::selectDevice(rank);
  const weft::dev::DType dt = dtypeOf(o.dtype);
  const Footprint footprint(op, points, dt, nranks);
  const std::vector<weft::OpPath>& paths = measuredPaths(op);
  for (size_t i = 0; i < paths.size(); ++i) {
    const char* path = weft::pathName(paths[i]);
    const weft::Settings s = weft::Settings::resolve(
        {{pathSettingName(op), path}, {"heap_bytes", std::to_string(footprint.heap())}, {"service", "off"}});
    std::unique_ptr<weft::Comm> comm = weft::Comm::create(ids[i], rank, nranks, s);
    PointOps ops(*comm, op, footprint, dt, nranks);
    // The rows' per_gpu: how the communicator found the ranks placed (one GPU each, or sharing).
    if (report) std::fprintf(report, "per_gpu %d\n", comm->pathPlacement().perGpu);
    for (size_t at = 0; at < points.size(); ++at) {
      ops.prepare(points[at]);
      auto once = [&] {
        const weft::Code c = ops.run();
        if (c != weft::Code::kSuccess)
          throw Error(c, std::string(pathSettingName(op)) + " " + path + ": the op failed");
      };
      for (int warm = 0; warm < 2; ++warm) once();
      weft::deviceSynchronize(o.timeoutS);
      std::vector<double> perOp;
      for (int sample = 0; sample < o.samples; ++sample) {
        const auto start = Clock::now();
        for (int it = 0; it < o.iters; ++it) once();
        weft::deviceSynchronize(o.timeoutS);
        perOp.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o.iters);
      }
      std::sort(perOp.begin(), perOp.end());
      if (report) std::fprintf(report, "%s %zu %.3f\n", path, at, perOp[perOp.size() / 2]);
    }
    if (report) std::fflush(report);
    comm->finalize();
  }
}

// Forks the ranks of one world size; returns rank 0's report lines. Throws if a rank fails or the
// run passes o.timeoutS (its ranks are then killed).
std::string runWorld(const TuneMeasureOptions& o, weft::FusedOp op, const std::vector<SweepPoint>& points, int nranks) {
  const weft::Settings s = weft::Settings::resolve();
  std::vector<weft::UniqueId> ids;
  for (size_t i = 0; i < measuredPaths(op).size(); ++i)
    ids.push_back(weft::createUniqueId(s.getString("bootstrap_addr"), s.getString("bootstrap_ifname")));
  int pipeFds[2];
  if (pipe(pipeFds) != 0) throw Error(Code::kSystem, "tune measure: pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  // Ranks that share a GPU get their share of its SMs under MPS, as weftrun gives them, unless the
  // caller chose one.
  const int mpsShare = weft::mpsSharePercent(nranks, kCpu ? 0 : weft::nvidiaGpusVisible());
  if (mpsShare > 0 && !std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
    std::fprintf(stderr,
                 "weftctl: tune measure: %d ranks share the GPUs: each gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d\n",
                 nranks, mpsShare);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) throw Error(Code::kSystem, "tune measure: fork failed");
    if (pid == 0) {
      close(pipeFds[0]);
      // Every kernel loaded before any runs: ranks that share a GPU would otherwise load a kernel
      // at its first launch, which can wait behind another rank's spinning one (as init warns).
      setenv("CUDA_MODULE_LOADING", "EAGER", 0);
      if (mpsShare > 0) setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(mpsShare).c_str(), 0);
      FILE* report = rank == 0 ? fdopen(pipeFds[1], "w") : nullptr;
      int status = 0;
      try {
        measureRank(o, op, points, ids, rank, nranks, report);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "weftctl: tune measure: rank %d of %d: %s\n", rank, nranks, e.what());
        status = 1;
      }
      if (report) std::fclose(report);
      std::fflush(stderr);
      _exit(status);
    }
    pids.push_back(pid);
  }
  close(pipeFds[1]);
  for (const weft::UniqueId& id : ids) weft::takeListener(id);  // the ranks hold their own copies
  std::string lines;
  const auto until = Clock::now() + std::chrono::duration<double>(o.timeoutS);
  bool timedOut = false;
  for (char buf[4096];;) {
    pollfd pfd{pipeFds[0], POLLIN, 0};
    const int left =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (left <= 0 || poll(&pfd, 1, left) == 0) {
      timedOut = true;
      break;
    }
    const ssize_t got = read(pipeFds[0], buf, sizeof buf);
    if (got <= 0) break;
    lines.append(buf, static_cast<size_t>(got));
  }
  close(pipeFds[0]);
  if (timedOut)
    for (pid_t pid : pids) kill(pid, SIGKILL);
  std::string failed;
  for (size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (timedOut)
    throw Error(Code::kTimeout, "tune measure: " + std::to_string(nranks) + " ranks did not finish within --timeout " +
                                    std::to_string(o.timeoutS) + " s");
  if (!failed.empty())
    throw Error(Code::kSystem, "tune measure: " + std::to_string(nranks) + " ranks: rank(s) " + failed +
                                   " failed (their messages are above)");
  return lines;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &utc);
  return buf;
}

// The model, asked of a child (the parent must not start a device before it forks the ranks).
std::string modelOfThisMachine() {
  int fds[2];
  if (pipe(fds) != 0) throw Error(Code::kSystem, "tune measure: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw Error(Code::kSystem, "tune measure: fork failed");
  if (pid == 0) {
    close(fds[0]);
    const std::string model = weft::gpuModel();
    const ssize_t wrote = write(fds[1], model.data(), model.size());
    _exit(wrote == static_cast<ssize_t>(model.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string model;
  char buf[256];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) model.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (model.empty()) throw Error(Code::kSystem, "tune measure: no device answers for its model (weftctl info)");
  return model;
}

}  // namespace

int runTuneMeasure(const TuneMeasureOptions& given) {
  TuneMeasureOptions o = given;
  if (o.out.empty()) throw Error(Code::kInvalidArgument, "--out: where to write the table (or '-' for stdout)");
  if (o.ranks.empty()) throw Error(Code::kInvalidArgument, "--ranks: the world sizes to measure (e.g. 1,2,4)");
  const weft::FusedOp op = measuredOp(o);
  if (dtypeOf(o.dtype) == weft::dev::DType::kFloat32 && op == weft::FusedOp::kGemmAllToAll)
    throw Error(Code::kInvalidArgument, "--dtype: the GEMM takes float16 or bfloat16");
  if (o.iters == 0) o.iters = kCpu ? 3 : 200;  // a GPU sample must outlast the 200 us poll of its end
  const std::vector<SweepPoint> points = sweepOf(o, op, kCpu);
  const std::string model = modelOfThisMachine();
  // Checked after the arguments above, so that a bad one is named first.
  if (o.commit.empty()) {
    // The rows say which code chose their paths: a build of a modified tree cannot say.
    o.commit = weft::buildCommit();
    if (o.commit.empty())
      throw Error(Code::kInvalidArgument,
                  "--commit: this build does not know its commit (it was not built in a git checkout); name "
                  "the commit the rows were measured at");
    if (!commitOk(o.commit))
      throw Error(Code::kInvalidArgument, "--commit: this build is of a tree with uncommitted changes (" + o.commit +
                                              "); commit them, or name the commit the rows stand for");
  }
  if (!commitOk(o.commit))
    throw Error(Code::kInvalidArgument, "--commit: '" + o.commit + "' is not 7 to 40 hex digits");
  const std::string measured = today() + "@" + o.commit;
  std::vector<PathRowsFor> worlds;
  for (int nranks : o.ranks) {
    std::fprintf(stderr, "weftctl: tune measure: %s, %d rank(s), %zu shapes x %zu paths on %s\n", weft::opName(op),
                 nranks, points.size(), measuredPaths(op).size(), model.c_str());
    worlds.push_back(parseReport(runWorld(o, op, points, nranks), op, points, nranks));
  }
  const std::string table = writeTable(o, op, model, measured, points, worlds);
  if (o.out == "-") {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  std::ofstream file(o.out, std::ios::trunc);
  if (!(file << table) || !file.flush()) throw Error(Code::kSystem, "--out: cannot write '" + o.out + "'");
  std::fprintf(stderr, "weftctl: tune measure: wrote %s; use it with WEFT_PATH_TABLE_FILE=%s on every rank\n",
               o.out.c_str(), o.out.c_str());
  return 0;
}

}  // namespace weftctl
