// weftctl: inspect and tune weft on this node. `weftctl info` prints the version, build options,
// devices, an hwloc topology summary and (-c) every setting with where its value came from.
// `weftctl tune show` prints the path table in effect and, given an op and a shape, the path a
// communicator takes for it and why; `weftctl tune measure` writes a table for this machine. `weftctl queue`, `clean`,
// `diagnose` and `metrics` read the communicators' status pages on this node (inspect.hpp); `weftctl status` asks the
// node's weftd.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "inspect.hpp"
#include "runtime/backend.hpp"
#include "runtime/config.hpp"
#include "runtime/service/paths.hpp"
#include "runtime/topology.hpp"
#include "transport/net/backend.hpp"
#include "tune.hpp"
#include "weft/version.h"

namespace {

void printInfo(bool settings) {
  std::printf("%s\n", weft::buildName().c_str());
  std::printf("build: backend=%s type=%s sanitizer=%s ucx=%s libfabric=%s\n", WEFT_BUILD_GPU, WEFT_BUILD_TYPE,
              *WEFT_BUILD_SANITIZE ? WEFT_BUILD_SANITIZE : "none", WEFTCTL_UCX, WEFTCTL_OFI);
  const weft::HostIdentity host = weft::localHost();
  std::printf("host: %s (id %016llx)\n", host.hostname.c_str(), static_cast<unsigned long long>(host.hash));
  std::printf("devices: %s\n", weft::deviceSummary().c_str());
  std::printf("topology: %s\n", weft::topologySummary().c_str());
  const weft::Settings s = weft::Settings::resolve();
  // The host proxy: the network back-ends this build has and what each finds here, and where a
  // rank's proxy thread runs (each rank also logs its PU at init, log_level=info).
  std::printf("proxy back-ends (proxy_backend=%s):\n", s.getString("proxy_backend").c_str());
  std::string backends = weft::transport::backendsSummary();
  for (size_t at = 0; at < backends.size();) {
    const size_t end = std::min(backends.find('\n', at), backends.size());
    std::printf("  %s\n", backends.substr(at, end - at).c_str());
    at = end + 1;
  }
  const int64_t lanes = s.getInt("proxy_lanes");
  std::printf("proxy lanes: %s\n",
              lanes > 0 ? (std::to_string(lanes) + " (proxy_lanes), the fewest any rank asks for").c_str()
                        : "auto (proxy_lanes 0): 1 to 4 where the back-end's writes are CPU copies (tcp, shm), by "
                          "the CPUs per rank of the host; 1 over an RDMA NIC; each rank logs how many at init");
  const int64_t cpu = s.getInt("proxy_cpu");
  std::printf("proxy thread: %s\n", cpu < 0
                                        ? "not bound (proxy_cpu -1): the OS places it; each rank logs its PU at init"
                                        : ("bound to PU " + std::to_string(cpu) + " (proxy_cpu)").c_str());
  if (!settings) return;
  if (!s.configFile().empty()) std::printf("config file: %s\n", s.configFile().c_str());
  std::printf("settings:\n");
  for (const auto& spec : weft::settingSpecs()) {
    const weft::SettingValue& v = s.value(spec.name);
    std::string from = weft::sourceName(v.source);
    if (!v.origin.empty() && v.source != weft::Source::kApi) from += " " + v.origin;
    std::printf("  %-20s = %-12s [%s]  %s (%s)\n", spec.name, ("\"" + v.text + "\"").c_str(), from.c_str(), spec.help,
                weft::envName(spec.name).c_str());
  }
}

// Decimal digits only, in [lo, hi]: CLI11's own conversion wraps "-1" and saturates past 2^64.
CLI::Validator wholeNumber(uint64_t lo, uint64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        errno = 0;
        const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE || v < lo || v > hi) return "'" + text + "' is not a whole number in " + range;
        return "";
      },
      "UINT in " + range);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weftctl: inspect and tune weft"};
  app.require_subcommand(1);
  bool showSettings = false;
  auto* info = app.add_subcommand("info", "Version, build, devices, topology and settings");
  info->add_flag("-c,--config", showSettings, "Also print every setting and who set it");
  auto* tune = app.add_subcommand("tune", "The path table in effect, what it chooses, and measuring a new one");
  tune->require_subcommand(1);
  weftctl::TuneShowOptions showOpts;
  auto* show = tune->add_subcommand("show", "The path table, and what an op of a shape would run and why");
  auto* showOp = show->add_option("--op", showOpts.op, "gemv_allreduce, gemm_alltoall or embedding_alltoall");
  show->add_option("--ranks", showOpts.ranks, "Communicator size")->needs(showOp)->check(wholeNumber(1, 1 << 20));
  show->add_option("--shape", showOpts.shape,
                   "The op's three sizes, comma-separated: batch,n,k_local (GEMV), tokens,k,h (GEMM), "
                   "local_batch,num_tables,dim (embedding)")
      ->needs(showOp);
  show->add_option("--per-gpu", showOpts.perGpu,
                   "The most ranks that share one GPU (default 1: a GPU each; under MPS, e.g. 2)")
      ->needs(showOp)
      ->check(wholeNumber(1, 1 << 20));
  show->add_option("--gpu", showOpts.gpu, "GPU model to read the table for (default: this machine's)");
  weftctl::TuneMeasureOptions measureOpts;
  auto* measure =
      tune->add_subcommand("measure", "Time every path of a fused op on this machine and write a path table for it");
  measure->add_option("--op", measureOpts.op, "gemv_allreduce (the default), gemm_alltoall or embedding_alltoall");
  measure
      ->add_option("--ranks", measureOpts.ranks,
                   "World sizes to measure, comma-separated (ranks share the GPUs round-robin; the rows "
                   "say how many shared one: per_gpu)")
      ->delimiter(',')
      ->check(wholeNumber(1, 64));
  measure->add_option("--out", measureOpts.out, "The table's file, '-' for stdout");
  measure->add_option("--batch", measureOpts.batches, "GEMV: batches (default: the backend's sweep)")
      ->delimiter(',')
      ->check(wholeNumber(1, 64));
  measure->add_option("--n", measureOpts.n, "GEMV: rows of w")->delimiter(',')->check(wholeNumber(1, 1 << 20));
  measure->add_option("--k", measureOpts.k, "GEMV: k_local, the columns of w on each rank; GEMM: k")
      ->delimiter(',')
      ->check(wholeNumber(1, 1 << 20));
  measure->add_option("--tokens", measureOpts.tokens, "GEMM: rows of a on each rank")
      ->delimiter(',')
      ->check(wholeNumber(1, 1 << 20));
  measure->add_option("--h", measureOpts.h, "GEMM: columns of w")->delimiter(',')->check(wholeNumber(1, 1 << 20));
  measure->add_option("--local-batch", measureOpts.localBatch, "Embedding: samples per rank")
      ->delimiter(',')
      ->check(wholeNumber(1, 1 << 20));
  measure->add_option("--tables", measureOpts.tables, "Embedding: tables per rank")
      ->delimiter(',')
      ->check(wholeNumber(1, 1024));
  measure->add_option("--dim", measureOpts.dim, "Embedding: elements per vector (4 to 1024, a multiple of 4)")
      ->delimiter(',')
      ->check(wholeNumber(4, 1024));
  measure->add_option("--dtype", measureOpts.dtype, "float32, float16 or bfloat16");
  measure->add_option("--iters", measureOpts.iters, "Ops per timed sample (default: 200 on a GPU, 3 on the CPU)")
      ->check(wholeNumber(1, 1000000));
  measure->add_option("--samples", measureOpts.samples, "Timed samples per path and shape")
      ->check(wholeNumber(1, 1000));
  measure->add_option("--commit", measureOpts.commit, "The commit the rows name (default: the build's)");
  measure->add_option("--timeout", measureOpts.timeoutS, "Seconds each world size may take")
      ->check(CLI::Range(1.0, 86400.0));
  // Live inspection. The directory is status_dir's (as the ranks resolve it) unless --dir says.
  weftctl::QueueOptions queueOpts;
  auto* queue = app.add_subcommand("queue", "Every communicator's status page on this node: queue, ops, failure");
  queue->add_option("--comm", queueOpts.comm, "Only this communicator (its id, or leading hex digits of it)");
  queue->add_option("--pid", queueOpts.pid, "Only this process's communicators")->check(CLI::PositiveNumber);
  queue->add_flag("--json", queueOpts.json, "JSON for scripts (one page a line)");
  queue->add_option("--watch", queueOpts.watch, "Refresh every SECONDS, like top, until Ctrl-C")
      ->check(CLI::Range(0.1, 3600.0));
  queue->add_option("--iterations", queueOpts.iterations, "With --watch: stop after this many refreshes")
      ->check(wholeNumber(1, 1000000000));
  queue->add_option("--dir", queueOpts.dir, "Status directory (default: status_dir's)");
  std::string cleanDir;
  auto* clean = app.add_subcommand("clean", "Remove the status pages of processes that are gone (yours only)");
  clean->add_option("--dir", cleanDir, "Status directory (default: status_dir's)");
  weftctl::DiagnoseOptions diag;
  auto* diagnose = app.add_subcommand("diagnose", "Explain why a job on this node is stuck, from its ranks' pages");
  diagnose->add_option("--comm", diag.comm, "Only this communicator (its id, or leading hex digits of it)");
  diagnose->add_flag("--json", diag.json,
                     "JSON for scripts: the cause, the ranks it names, the explanation, the nodes not gathered");
  diagnose->add_option("--dir", diag.dir, "Status directory (default: status_dir's)");
  // The job's other nodes: each runs `weftctl pages` (the same installation's path).
  diagnose->add_option("--hosts", diag.gather.hostList, "Also the pages of these hosts (comma list), through --rsh");
  diagnose->add_option("--hostfile", diag.gather.hostfile, "Also the pages of the hosts in this file (one a line)");
  diagnose->add_option("--slurm-job", diag.gather.slurmJob, "Also the pages of every node of this Slurm job (srun)");
  if (const char* rsh = getenv("WEFTCTL_RSH"); rsh && *rsh) diag.gather.rsh = rsh;
  diagnose->add_option("--rsh", diag.gather.rsh,
                       "Remote shell for --hosts and --hostfile (default: $WEFTCTL_RSH, else ssh -o BatchMode=yes)");
  diagnose->add_option("--timeout", diag.gather.timeoutS, "Seconds each node may take to answer")
      ->check(CLI::Range(1.0, 3600.0));
  std::string pagesDir;
  auto* pages = app.add_subcommand(
      "pages", "This node's status pages, in the byte format weftctl diagnose --hosts reads (for a pipe)");
  pages->add_option("--dir", pagesDir, "Status directory (default: status_dir's)");
  weftctl::MetricsOptions metricsOpts;
  auto* metrics = app.add_subcommand("metrics", "The pages' counters in the Prometheus text exposition format");
  metrics->add_option("--comm", metricsOpts.comm, "Only this communicator (its id, or leading hex digits of it)");
  metrics->add_option("--pid", metricsOpts.pid, "Only this process's communicators")->check(CLI::PositiveNumber);
  metrics->add_option("--dir", metricsOpts.dir, "Status directory (default: status_dir's)");
  weftctl::StatusOptions statusOpts;
  auto* status = app.add_subcommand("status", "The node's weftd: version, pid, uptime, MPS, clients, communicators");
  status->add_option("--dir", statusOpts.dir, "weftd's runtime directory (default: service_dir's)");
  status->add_flag("--json", statusOpts.json, "JSON for scripts");
  status->add_option("--timeout", statusOpts.timeoutS, "Seconds to wait for weftd's answer")
      ->check(CLI::Range(0.1, 600.0));
  CLI11_PARSE(app, argc, argv);
  try {
    if (*status) {
      const weft::Settings settings = weft::Settings::resolve();
      if (statusOpts.dir.empty()) statusOpts.dir = weft::service::directory(settings);
      statusOpts.trustedUids = weft::parseIdList("service_trust_uids", settings.getString("service_trust_uids"));
      return weftctl::runStatus(statusOpts);
    }
    if (*queue || *clean || *diagnose || *metrics || *pages) {
      const std::string dir = weft::status::directory(weft::Settings::resolve().getString("status_dir"));
      if (queueOpts.dir.empty()) queueOpts.dir = dir;
      if (metricsOpts.dir.empty()) metricsOpts.dir = dir;
      if (*queue) return weftctl::runQueue(queueOpts);
      if (*metrics) return weftctl::runMetrics(metricsOpts);
      if (*clean) return weftctl::runClean(cleanDir.empty() ? dir : cleanDir);
      if (*pages) return weftctl::runPages(pagesDir.empty() ? dir : pagesDir);
      if (diag.dir.empty()) diag.dir = dir;
      return weftctl::runDiagnose(diag);
    }
    if (*info) printInfo(showSettings);
    if (*show) return weftctl::runTuneShow(showOpts);
    if (*measure) return weftctl::runTuneMeasure(measureOpts);
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weftctl: %s\n", e.what());
    return 1;
  }
  return 0;
}
