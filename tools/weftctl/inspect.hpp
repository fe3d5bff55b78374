// weftctl's live inspection: `queue` (every communicator's page on this node), `clean` (pages of
// dead processes), `diagnose` (why a job is stuck) and `metrics` (the counters for Prometheus), all
// read from the status pages
// (runtime/status_page.hpp). Each returns the process's exit status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/status_read.hpp"

namespace weftctl {

struct QueueOptions {
  std::string dir;
  std::string comm;  // a communicator id (or its leading hex digits); empty: every one
  int pid = 0;       // 0: every process
  bool json = false;
  double watch = 0;         // > 0: refresh every this many seconds
  uint64_t iterations = 0;  // with watch: stop after this many refreshes (0: at Ctrl-C)
};
int runQueue(const QueueOptions& o);
int runClean(const std::string& dir);

// Where the pages of a job's other nodes come from: each host runs `weftctl pages` (through `rsh`
// for hosts and a host file, through srun for a Slurm job), within timeoutS.
struct GatherOptions {
  std::string hostList;  // comma-separated
  std::string hostfile;
  std::string slurmJob;
  std::string rsh = "ssh -o BatchMode=yes";
  double timeoutS = 30;
  bool any() const { return !hostList.empty() || !hostfile.empty() || !slurmJob.empty(); }
};
// One listing per other host that answered (this host's pages are read from the directory, not
// gathered); the hosts that did not, with why, in *unreachable.
std::vector<weft::status::Listing> gatherRemote(const GatherOptions& o, std::vector<std::string>* unreachable);

struct DiagnoseOptions {
  std::string dir;
  std::string comm;
  bool json = false;
  GatherOptions gather;
};
int runDiagnose(const DiagnoseOptions& o);
// `weftctl pages`: this node's pages on stdout (status_read.hpp's encodePages), for diagnose.
int runPages(const std::string& dir);

struct MetricsOptions {
  std::string dir;
  std::string comm;
  int pid = 0;
};
// The pages' counters in the Prometheus text exposition format.
int runMetrics(const MetricsOptions& o);

// `weftctl status`: asks the node's weftd (service_dir's).
struct StatusOptions {
  std::string dir;
  bool json = false;
  double timeoutS = 5;
  std::vector<uint32_t> trustedUids;  // service_trust_uids
};
int runStatus(const StatusOptions& o);

// Shared by all of them.
std::string commHex(uint64_t id);
bool commMatches(uint64_t id, const std::string& wanted);
std::string jsonString(const std::string& s);
std::string secondsText(uint64_t ns);  // "12.3 s", "450 ms", "80 us"
// "allreduce of 100000 float32 (400000 B)"
std::string opText(const weft::status::OpRow& r);

}  // namespace weftctl
