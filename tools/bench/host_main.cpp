// weft-bench on the CPU backend: weft's AllReduce and All-to-All (through the host proxy when
// WEFT_TRANSPORT=proxy, or between nodes) against MPI's in the same run, on the same ranks, so that
// the proxy path is measured without a GPU. Start it with mpirun; weft joins through the launcher's
// variables. Over loopback TCP on both sides:
//   WEFT_TRANSPORT=proxy UCX_TLS=tcp mpirun -n 2 --mca pml ob1 --mca btl tcp,self weft-bench allreduce
// Rows (rank 0): bytes per rank, median time per op of MPI and weft, their ratio (speedup: MPI time
// over weft time), each one's algorithm bandwidth, and the elements where weft's result differs
// from MPI's beyond float32 rounding of the sum.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace {

uint64_t parseBytes(const std::string& text) {
  size_t end = 0;
  const unsigned long long v = std::stoull(text, &end);
  const std::string suffix = text.substr(end);
  const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  if (shift < 0) throw std::invalid_argument("'" + text + "' is not a size (suffixes: K, M, G)");
  return v << shift;
}

void check(weft_result_t r, const char* what) {
  if (r == WEFT_SUCCESS) return;
  std::fprintf(stderr, "weft-bench: %s: %s: %s\n", what, weft_get_error_string(r), weft_get_last_error(nullptr));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// The median over ranks' per-op times of `iters` timed runs of op() (each rank's own median, then
// the slowest rank's), after `warmup` untimed ones; the ranks start each run together.
template <class Op>
double medianUs(int iters, int warmup, Op&& op) {
  for (int i = 0; i < warmup; ++i) op();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    op();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  double mine = us[us.size() / 2], worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::string op = "allreduce", minText = "1K", maxText = "64M";
  double factor = 4;
  int iters = 20, warmup = 3;
  CLI::App app{"weft-bench (CPU backend): weft against MPI, same run; start with mpirun"};
  app.add_option("op", op, "allreduce or alltoall")->check(CLI::IsMember({"allreduce", "alltoall"}));
  app.add_option("-b,--minbytes", minText, "Smallest size per rank (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", maxText, "Largest size per rank");
  app.add_option("-f,--stepfactor", factor, "Size multiplier")->check(CLI::Range(1.01, 1024.0));
  app.add_option("-n,--iters", iters, "Timed iterations per size")->check(CLI::Range(1, 100000));
  app.add_option("-w,--warmup", warmup, "Untimed iterations per size")->check(CLI::Range(0, 100000));
  CLI11_PARSE(app, argc, argv);

  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  uint64_t minBytes = 0, maxBytes = 0;
  try {
    minBytes = parseBytes(minText);
    maxBytes = parseBytes(maxText);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "weft-bench: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  const bool allReduce = op == "allreduce";
  weft_comm_t comm = nullptr;
  weft_config_t config = WEFT_CONFIG_INITIALIZER;
  config.heap_bytes = std::max<uint64_t>(maxBytes * (allReduce ? 1 : nranks), 1 << 20);
  check(weft_comm_init_env(&comm, &config), "weft_comm_init_env");
  // weft reads its job from the launcher's variables, MPI from its own: under weftrun each process
  // is an MPI job of one while weft's ranks are many, and every row would compare unlike sums.
  // Decided together, so that no rank goes on to wait for one that left.
  int weftRank = -1, weftRanks = -1;
  check(weft_comm_rank(comm, &weftRank), "weft_comm_rank");
  check(weft_comm_size(comm, &weftRanks), "weft_comm_size");
  int mismatch = weftRank != rank || weftRanks != nranks, anyMismatch = 0;
  MPI_Allreduce(&mismatch, &anyMismatch, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anyMismatch) {
    if (mismatch)
      std::fprintf(stderr,
                   "weft-bench: weft's job (rank %d of %d) is not MPI's (rank %d of %d): start weft-bench with "
                   "mpirun, which both read (the CPU build's weft-bench is an MPI program)\n",
                   weftRank, weftRanks, rank, nranks);
    weft_comm_destroy(comm);
    MPI_Finalize();
    return 2;
  }
  const uint64_t bufBytes = maxBytes * (allReduce ? 1 : nranks);
  void* heapOut = nullptr;
  check(weft_mem_alloc(comm, bufBytes, &heapOut), "weft_mem_alloc");
  std::vector<float> in(bufBytes / 4), mpiOut(bufBytes / 4);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 7 + rank * 13) % 101) / 101.0f - 0.5f;
  auto* out = static_cast<float*>(heapOut);

  if (rank == 0) {
    const char* transport = getenv("WEFT_TRANSPORT");
    std::printf("# weft-bench %s, %d ranks, float32; weft transport=%s; baseline MPI_%s\n", op.c_str(), nranks,
                transport ? transport : "auto", allReduce ? "Allreduce" : "Alltoall");
    std::printf("%12s %12s %12s %8s %10s %10s %8s\n", "bytes", "mpi_us", "weft_us", "speedup", "mpi_GB/s", "weft_GB/s",
                "wrong");
  }
  std::vector<uint64_t> sizes;
  for (double b = static_cast<double>(std::max<uint64_t>(minBytes, 4)); b <= static_cast<double>(maxBytes) * 1.0001;
       b *= factor)
    sizes.push_back(static_cast<uint64_t>(b) / 4 * 4);
  for (const uint64_t bytes : sizes) {
    const uint64_t count = bytes / 4;
    const int c = static_cast<int>(count);
    double mpiUs = 0, weftUs = 0;
    if (allReduce) {
      mpiUs = medianUs(iters, warmup,
                       [&] { MPI_Allreduce(in.data(), mpiOut.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
      weftUs = medianUs(iters, warmup, [&] {
        check(weft_allreduce(comm, in.data(), out, count, WEFT_FLOAT32, nullptr), "weft_allreduce");
      });
    } else {
      mpiUs = medianUs(iters, warmup,
                       [&] { MPI_Alltoall(in.data(), c, MPI_FLOAT, mpiOut.data(), c, MPI_FLOAT, MPI_COMM_WORLD); });
      weftUs = medianUs(iters, warmup, [&] {
        check(weft_alltoall(comm, in.data(), out, count, WEFT_FLOAT32, nullptr), "weft_alltoall");
      });
    }
    // The sum's order differs between the two; a float32 sum of nranks terms agrees within that.
    const uint64_t n = allReduce ? count : count * nranks;
    long long wrong = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const float tol = allReduce ? 1e-6f * nranks * (1 + std::fabs(mpiOut[i])) : 0.0f;
      wrong += std::fabs(out[i] - mpiOut[i]) > tol;
    }
    long long wrongAll = 0;
    MPI_Reduce(&wrong, &wrongAll, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    const double moved = static_cast<double>(allReduce ? bytes : bytes * nranks);
    if (rank == 0)
      std::printf("%12llu %12.1f %12.1f %8.2f %10.3f %10.3f %8lld\n", static_cast<unsigned long long>(bytes), mpiUs,
                  weftUs, mpiUs / weftUs, moved / mpiUs / 1e3, moved / weftUs / 1e3, wrongAll);
  }
  check(weft_mem_free(comm, heapOut), "weft_mem_free");
  check(weft_comm_finalize(comm), "weft_comm_finalize");
  check(weft_comm_destroy(comm), "weft_comm_destroy");
  MPI_Finalize();
  return 0;
}
