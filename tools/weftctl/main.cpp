// weftctl: inspect and tune weft on this node. `weftctl info` prints the version, build options,
// devices, an hwloc topology summary and (-c) every setting with where its value came from.
// `weftctl tune gemv` prints the GEMV + AllReduce tuning table in effect and, given a shape, the
// path a communicator of that size takes for it. `weftctl queue`, `clean`, `diagnose` and `metrics`
// read the communicators' status pages on this node (inspect.hpp); `weftctl status` asks the node's
// weftd.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "inspect.hpp"
#include "runtime/backend.hpp"
#include "runtime/config.hpp"
#include "runtime/gemv_tuning.hpp"
#include "runtime/service/paths.hpp"
#include "runtime/topology.hpp"
#include "transport/net/backend.hpp"
#include "weft/version.h"

namespace {

void printInfo(bool settings) {
  std::printf("weft %s\n", WEFT_VERSION_STRING);
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

std::string limit(uint64_t v) { return v == UINT64_MAX ? "*" : std::to_string(v); }

struct GemvShapeArgs {
  int ranks = 0;
  uint64_t batch = 0, n = 0, k = 0;
};

void printGemvTuning(const GemvShapeArgs& a) {
  const weft::Settings s = weft::Settings::resolve();
  const weft::GemvTuning t = weft::GemvTuning::load(s.getString("gemv_tuning_file"));
  const std::optional<weft::GemvPath> forced = weft::gemvPathSetting(s.getString("gemv_path"));
  std::printf("table: %s (%zu rows)\n", t.origin().c_str(), t.rows().size());
  std::printf("  %-6s %-6s %-10s %-8s %-10s %s\n", "line", "ranks", "batch_max", "n_max", "k_max", "path");
  for (const weft::GemvTuningRow& r : t.rows())
    std::printf("  %-6d %-6s %-10s %-8s %-10s %s\n", r.line, r.ranks ? std::to_string(r.ranks).c_str() : "*",
                limit(r.batchMax).c_str(), limit(r.nMax).c_str(), limit(r.kMax).c_str(), weft::gemvPathName(r.path));
  if (a.ranks == 0) return;
  std::printf("ranks %d, batch %llu, n %llu, k_local %llu: ", a.ranks, static_cast<unsigned long long>(a.batch),
              static_cast<unsigned long long>(a.n), static_cast<unsigned long long>(a.k));
  const weft::GemvTuningRow* r = t.match(a.ranks, a.batch, a.n, a.k);
  if (forced)
    std::printf("%s (gemv_path forces it)\n", weft::gemvPathName(*forced));
  else if (r)
    std::printf("%s (line %d)\n", weft::gemvPathName(r->path), r->line);
  else
    std::printf("fused (no row covers it: the default)\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weftctl: inspect and tune weft"};
  app.require_subcommand(1);
  bool showSettings = false;
  auto* info = app.add_subcommand("info", "Version, build, devices, topology and settings");
  info->add_flag("-c,--config", showSettings, "Also print every setting and who set it");
  auto* tune = app.add_subcommand("tune", "Tuning tables in effect and what they choose");
  tune->require_subcommand(1);
  GemvShapeArgs shape;
  auto* gemv =
      tune->add_subcommand("gemv", "GEMV + AllReduce: fused, fused_rsag, unfused or blas, per world size and shape");
  // The bounds of weft_gemv_allreduce (int64_t n and k_local, batch 1..64).
  const uint64_t kInt64Max = static_cast<uint64_t>(INT64_MAX);
  auto* ranks = gemv->add_option("--ranks", shape.ranks, "Communicator size")->check(wholeNumber(1, 1 << 20));
  gemv->add_option("--batch", shape.batch, "Rows of x")->needs(ranks)->check(wholeNumber(1, 64));
  gemv->add_option("--n", shape.n, "Rows of w (y's width)")->needs(ranks)->check(wholeNumber(1, kInt64Max));
  gemv->add_option("--k", shape.k, "k_local: columns of w on each rank")
      ->needs(ranks)
      ->check(wholeNumber(1, kInt64Max));
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
    if (*gemv) {
      if (shape.ranks && (!shape.batch || !shape.n || !shape.k))
        throw weft::Error(weft::Code::kInvalidArgument, "tune gemv: --ranks needs --batch, --n and --k");
      printGemvTuning(shape);
    }
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weftctl: %s\n", e.what());
    return 1;
  }
  return 0;
}
