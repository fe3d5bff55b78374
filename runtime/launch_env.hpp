// Communicator init from a launcher's environment, for weft_comm_init_env: torchrun (and weftrun)
// RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, Open MPI OMPI_COMM_WORLD_*, PMI_RANK / PMI_SIZE,
// and Slurm SLURM_PROCID / SLURM_NTASKS / SLURM_STEP_NODELIST.
//
// Rank 0's bootstrap address: WEFT_BOOTSTRAP_ADDR, else MASTER_ADDR, else the first node of the
// Slurm step, else 127.0.0.1 when the launcher says every rank is on one node.
// Port: WEFT_BOOTSTRAP_PORT, else MASTER_PORT + 1 (torch's TCPStore holds MASTER_PORT), else one
// derived from the job id, in [kDerivedPortLow, kDerivedPortEnd). Secret: WEFT_BOOTSTRAP_SECRET, else derived from the
// job id and address, which keeps jobs apart but is no defence against an attacker on the network.
#pragma once

#include <functional>
#include <string>

#include "unique_id.hpp"

namespace weft {

struct LaunchInfo {
  std::string launcher;  // "torchrun", "openmpi", "pmi" or "slurm"
  int rank = 0;
  int nranks = 0;
  UniqueId id;
};

// Ports derived from a job id: below Linux's ephemeral range (32768-60999 by default), where the
// kernel picks the local ports of outgoing connections, so none of those can already hold it.
constexpr int kDerivedPortLow = 20000, kDerivedPortEnd = 32768;

using Getenv = std::function<const char*(const char*)>;

// Throws kInvalidArgument naming the variable that is missing or malformed.
LaunchInfo launchFromEnv(const Getenv& getenv);

// First host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03".
std::string firstHostOfNodelist(const std::string& nodelist);

}  // namespace weft
