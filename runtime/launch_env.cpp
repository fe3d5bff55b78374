#include "launch_env.hpp"

#include "common/error.hpp"
#include "config.hpp"

namespace weft {

namespace {

struct RankVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* localSize;  // ranks on this node, when the launcher says (nullptr if it does not)
};

constexpr RankVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", nullptr},
};

std::string get(const Getenv& env, const char* name) {
  const char* v = env(name);
  return v ? v : "";
}

int intVar(const Getenv& env, const char* name) {
  const int64_t v = parseInteger(name, get(env, name), false);
  if (v < 0 || v > (1 << 24)) throw Error(Code::kInvalidArgument, std::string(name) + ": out of range");
  return static_cast<int>(v);
}

std::string jobKey(const Getenv& env) {
  for (const char* v : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})
    if (!get(env, v).empty()) return std::string(v) + "=" + get(env, v) + "/" + get(env, "SLURM_STEP_ID");
  return "";
}

}  // namespace

std::string firstHostOfNodelist(const std::string& nodelist) {
  std::string first = nodelist.substr(0, nodelist.find_first_of(",["));
  size_t bracket = nodelist.find('[');
  size_t comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) return first;
  size_t end = nodelist.find_first_of(",-]", bracket + 1);
  return first + nodelist.substr(bracket + 1, end - bracket - 1);
}

LaunchInfo launchFromEnv(const Getenv& env) {
  LaunchInfo info;
  const RankVars* found = nullptr;
  for (const auto& l : kLaunchers)
    if (env(l.rank) && env(l.size)) {
      found = &l;
      break;
    }
  if (!found)
    throw Error(Code::kInvalidArgument,
                "environment: no launcher found (RANK/WORLD_SIZE, OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or "
                "SLURM_PROCID/NTASKS)");
  info.launcher = found->launcher;
  info.rank = intVar(env, found->rank);
  info.nranks = intVar(env, found->size);
  if (info.nranks < 1 || info.rank >= info.nranks)
    throw Error(Code::kInvalidArgument, std::string(found->rank) + ": " + std::to_string(info.rank) + " is not below " +
                                            found->size + " = " + std::to_string(info.nranks));

  std::string addr = get(env, "WEFT_BOOTSTRAP_ADDR");
  if (addr.empty()) addr = get(env, "MASTER_ADDR");
  if (addr.empty() && !get(env, "SLURM_STEP_NODELIST").empty())
    addr = firstHostOfNodelist(get(env, "SLURM_STEP_NODELIST"));
  if (addr.empty() && !get(env, "SLURM_JOB_NODELIST").empty())
    addr = firstHostOfNodelist(get(env, "SLURM_JOB_NODELIST"));
  if (addr.empty()) {
    const bool oneNode = found->localSize && env(found->localSize) && intVar(env, found->localSize) == info.nranks;
    if (!oneNode && info.nranks > 1)
      throw Error(Code::kInvalidArgument, "WEFT_BOOTSTRAP_ADDR: set it (or MASTER_ADDR) to the host of rank 0");
    addr = "127.0.0.1";
  }

  const std::string key = jobKey(env);
  int port = 0;
  if (!get(env, "WEFT_BOOTSTRAP_PORT").empty())
    port = intVar(env, "WEFT_BOOTSTRAP_PORT");
  else if (!get(env, "MASTER_PORT").empty())
    port = intVar(env, "MASTER_PORT") + 1;
  else if (!key.empty())
    port = kDerivedPortLow + static_cast<int>(secretFromText(key)[0] | (secretFromText(key)[1] << 8)) %
                                 (kDerivedPortEnd - kDerivedPortLow);
  else
    throw Error(Code::kInvalidArgument, "WEFT_BOOTSTRAP_PORT: set it (or MASTER_PORT); no job id to derive it from");
  if (port <= 0 || port > 65535)
    throw Error(Code::kInvalidArgument, "WEFT_BOOTSTRAP_PORT: " + std::to_string(port) + " is not a port");

  info.id.root = net::resolveHost(addr, port, "WEFT_BOOTSTRAP_ADDR");
  const std::string secret = get(env, "WEFT_BOOTSTRAP_SECRET");
  info.id.secret = secretFromText(secret.empty() ? "weft/" + key + "/" + info.id.root.str() : secret);
  return info;
}

}  // namespace weft
