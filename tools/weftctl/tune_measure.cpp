// weftctl tune measure: for each world size, starts that many ranks on this host (forked from
// weftctl before anything touches a device, so each child starts its device afresh), and each
// rank times the GEMV + AllReduce with every path forced (one communicator per path, as weft-bench
// does) over the sweep. Rank 0 reports its medians through a pipe; the parent keeps each shape's
// fastest path and writes the rows (sweep.cpp turns the points into rows).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "common/error.hpp"
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
constexpr weft::OpPath kGemvPaths[] = {weft::OpPath::kFused, weft::OpPath::kFusedRsag, weft::OpPath::kUnfused,
                                       weft::OpPath::kBlas};

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

// One rank of a world of `nranks`: every path over every point, one line per (path, point) on
// `report` (rank 0 only): "PATH INDEX MICROSECONDS". Every rank issues the same ops in the same
// order (the count is fixed, never adapted to what one rank saw), as collectives need.
void measureRank(const TuneMeasureOptions& o, const std::vector<GemvPoint>& points,
                 const std::vector<weft::UniqueId>& ids, int rank, int nranks, FILE* report) {
  weft::selectDevice(rank);
  const weft::dev::DType dt = dtypeOf(o.dtype);
  const uint64_t es = weft::dev::dtypeSize(dt);
  uint64_t xBytes = 0, wBytes = 0, yBytes = 0;
  for (const GemvPoint& p : points) {
    xBytes = std::max(xBytes, p.batch * p.kLocal * es);
    wBytes = std::max(wBytes, p.n * p.kLocal * es);
    yBytes = std::max(yBytes, p.batch * p.n * es);
  }
  const uint64_t heap = ((xBytes + wBytes + yBytes) * 5 / 4 + (64 << 20)) >> 20 << 20;
  for (size_t i = 0; i < std::size(kGemvPaths); ++i) {
    const char* path = weft::pathName(kGemvPaths[i]);
    const weft::Settings s =
        weft::Settings::resolve({{"gemv_path", path}, {"heap_bytes", std::to_string(heap)}, {"service", "off"}});
    std::unique_ptr<weft::Comm> comm = weft::Comm::create(ids[i], rank, nranks, s);
    void* x = patterned(*comm, xBytes);
    void* w = patterned(*comm, wBytes);
    void* y = comm->memAlloc(yBytes);
    for (size_t at = 0; at < points.size(); ++at) {
      const GemvPoint& p = points[at];
      auto op = [&] {
        const weft::Code c = comm->gemvAllReduce(x, w, y, static_cast<uint32_t>(p.batch), p.n, p.kLocal, dt, nullptr);
        if (c != weft::Code::kSuccess) throw Error(c, std::string("gemv_path ") + path + ": the op failed");
      };
      for (int warm = 0; warm < 2; ++warm) op();
      weft::deviceSynchronize(o.timeoutS);
      std::vector<double> perOp;
      for (int sample = 0; sample < o.samples; ++sample) {
        const auto start = Clock::now();
        for (int it = 0; it < o.iters; ++it) op();
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
std::string runWorld(const TuneMeasureOptions& o, const std::vector<GemvPoint>& points, int nranks) {
  const weft::Settings s = weft::Settings::resolve();
  std::vector<weft::UniqueId> ids;
  for (size_t i = 0; i < std::size(kGemvPaths); ++i)
    ids.push_back(weft::createUniqueId(s.getString("bootstrap_addr"), s.getString("bootstrap_ifname")));
  int pipeFds[2];
  if (pipe(pipeFds) != 0) throw Error(Code::kSystem, "tune measure: pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) throw Error(Code::kSystem, "tune measure: fork failed");
    if (pid == 0) {
      close(pipeFds[0]);
      FILE* report = rank == 0 ? fdopen(pipeFds[1], "w") : nullptr;
      int status = 0;
      try {
        measureRank(o, points, ids, rank, nranks, report);
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
  dtypeOf(o.dtype);
  if (o.commit.empty()) o.commit = WEFTCTL_COMMIT;
  if (!commitOk(o.commit))
    throw Error(Code::kInvalidArgument, "--commit: '" + o.commit +
                                            "' is not 7 to 40 hex digits (this build does not know its commit: it "
                                            "was not configured in a git checkout)");
  if (o.iters == 0) o.iters = kCpu ? 3 : 200;  // a GPU sample must outlast the 200 us poll of its end
  const std::vector<GemvPoint> points = gemvSweep(o, kCpu);
  const std::string model = modelOfThisMachine();
  const std::string measured = today() + "@" + o.commit;
  std::vector<PathRowsFor> worlds;
  for (int nranks : o.ranks) {
    std::fprintf(stderr, "weftctl: tune measure: %d rank(s), %zu shapes x %zu paths on %s\n", nranks, points.size(),
                 std::size(kGemvPaths), model.c_str());
    worlds.push_back(PathRowsFor{nranks, parseReport(runWorld(o, points, nranks), points)});
  }
  const std::string table = writeTable(o, model, measured, points, worlds);
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
