// The status pages of a job's other nodes, for `weftctl diagnose`: `weftctl pages` run on each
// node (through a remote shell for a host list, through srun for a Slurm job) prints its pages'
// consistent bytes, which are checked here as pages read from a local directory are.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "inspect.hpp"

namespace weftctl {

namespace st = weft::status;

namespace {

// A host name (or address) safe to put on a command line: letters, digits and . - _ : after an
// optional user name and @, as ssh takes it.
bool plainHost(const std::string& h) {
  const size_t at = h.find('@');
  const std::string user = at == std::string::npos ? "" : h.substr(0, at), host = h.substr(at + 1);
  auto plain = [](const std::string& s) {
    if (s.empty() || s.size() > 255 || s[0] == '-') return false;
    for (char c : s)
      if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' && c != ':') return false;
    return true;
  };
  return plain(host) && (at == std::string::npos || plain(user));
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `command` through the shell; its stdout, and its exit status (-1: it did not exit).
int run(const std::string& command, std::string* out) {
  std::fflush(stdout);
  FILE* p = popen(command.c_str(), "r");
  if (!p) return -1;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool capture(const std::string& command, std::string* out) { return run(command, out) == 0; }

// "timeout -k 2 S ": coreutils' timeout, so that a node that never answers ends the wait.
std::string bounded(double seconds) {
  char s[64];
  snprintf(s, sizeof s, "timeout -k 2 %g ", seconds);
  return s;
}

std::string thisHost() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

bool isThisHost(const std::string& userAndHost) {
  const std::string h = userAndHost.substr(userAndHost.find('@') + 1), me = thisHost();
  return h == me || h == me.substr(0, me.find('.')) || h == "localhost" || h == "127.0.0.1";
}

// The path of this weftctl, which the other nodes are expected to have too (one installation).
std::string selfPath() {
  char path[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string("weftctl");
}

std::vector<std::string> hostsOf(const GatherOptions& o) {
  std::vector<std::string> hosts;
  for (size_t at = 0; at <= o.hostList.size();) {
    const size_t end = std::min(o.hostList.find(',', at), o.hostList.size());
    if (end > at) hosts.push_back(o.hostList.substr(at, end - at));  // "a,,b" and "," name no empty host
    at = end + 1;
  }
  if (!o.hostfile.empty()) {
    std::ifstream f(o.hostfile);
    if (!f) throw weft::Error(weft::Code::kInvalidArgument, "--hostfile: cannot read " + o.hostfile);
    // One host a line, as Open MPI's and Slurm's host files: the first word; '#' starts a comment.
    for (std::string line; std::getline(f, line);) {
      line = line.substr(0, line.find('#'));
      const size_t a = line.find_first_not_of(" \t\r");
      if (a == std::string::npos) continue;
      hosts.push_back(line.substr(a, line.find_first_of(" \t\r", a) - a));
    }
  }
  if (!o.slurmJob.empty()) {
    for (char c : o.slurmJob)
      if (!isdigit(static_cast<unsigned char>(c)) && c != '_')
        throw weft::Error(weft::Code::kInvalidArgument, "--slurm-job: '" + o.slurmJob + "' is not a job id");
    std::string list;
    const std::string t = bounded(o.timeoutS);
    if (!capture(t + "squeue -h -j " + o.slurmJob + " -o %N 2>/dev/null", &list) || list.empty() ||
        list.find_first_not_of(" \n") == std::string::npos)
      throw weft::Error(weft::Code::kInvalidArgument,
                        "--slurm-job: squeue knows no running job " + o.slurmJob + " (or Slurm is not reachable)");
    list = list.substr(0, list.find('\n'));
    std::string names;
    if (!plainHost(list.substr(0, list.find_first_of("[,"))) ||
        !capture(t + "scontrol show hostnames " + quoted(list) + " 2>/dev/null", &names))
      throw weft::Error(weft::Code::kSystem, "--slurm-job: scontrol cannot expand the node list '" + list + "'");
    for (size_t at = 0; at < names.size();) {
      const size_t end = std::min(names.find('\n', at), names.size());
      if (end > at) hosts.push_back(names.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const std::string& h : hosts)
    if (!plainHost(h)) throw weft::Error(weft::Code::kInvalidArgument, "host '" + h + "' is not a plain host name");
  return hosts;
}

}  // namespace

int runPages(const std::string& dir) {
  if (isatty(STDOUT_FILENO)) {
    std::fprintf(stderr,
                 "weftctl pages: writes the pages' bytes for weftctl diagnose --hosts to read (a pipe), not for a "
                 "terminal; weftctl queue shows them\n");
    return 2;
  }
  std::vector<st::Refusal> refused;
  const std::string stream = st::encodePages(dir, &refused);
  for (const st::Refusal& r : refused)
    std::fprintf(stderr, "weftctl: refused %s/%s: %s\n", dir.c_str(), r.name.c_str(), r.why.c_str());
  return std::fwrite(stream.data(), 1, stream.size(), stdout) == stream.size() && std::fflush(stdout) == 0 ? 0 : 1;
}

std::vector<st::Listing> gatherRemote(const GatherOptions& o, std::vector<std::string>* unreachable) {
  std::vector<st::Listing> out;
  std::vector<std::string> done;
  const std::string self = quoted(selfPath()) + " pages";
  for (const std::string& h : hostsOf(o)) {
    // This node's pages are read from its directory; a Slurm job's node list is taken whole (this
    // node is one of them only inside the job, and srun reaches it as any other).
    if ((o.slurmJob.empty() && isThisHost(h)) || std::find(done.begin(), done.end(), h) != done.end()) continue;
    done.push_back(h);
    // Every wait is bounded: a node that does not answer in time is reported, not waited for.
    const std::string t = bounded(o.timeoutS);
    const std::string command =
        o.slurmJob.empty() ? t + o.rsh + " " + h + " " + quoted(self)
                           : t + "srun --jobid=" + o.slurmJob + " --overlap -N1 -n1 -w " + h + " --quiet " + self;
    std::string stream;
    const int status = run(command + " </dev/null", &stream);
    if (status != 0 && stream.empty()) {
      // timeout's 124 (137 after its kill): the node did not answer in time.
      char why[160];
      if (status == 124 || status == 137)
        snprintf(why, sizeof why, "no answer within %g s", o.timeoutS);
      else
        snprintf(why, sizeof why, "%s exited with status %d", o.slurmJob.empty() ? "the remote shell" : "srun", status);
      std::fprintf(stderr, "weftctl: %s: not gathered: %s (%s)\n", h.c_str(), why, command.c_str());
      unreachable->push_back(h + " (" + why + ")");
      continue;
    }
    st::Listing l = st::decodePages(stream, h);
    if (status != 0) l.refused.push_back({h, "its weftctl pages exited with status " + std::to_string(status)});
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace weftctl
