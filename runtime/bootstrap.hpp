// Out-of-band exchange among the ranks of one communicator: a TCP star around rank 0. Used at init
// (validate the job, learn every rank's host and heap), and by the collective host calls
// (weft_mem_alloc/free, finalize). Not thread-safe: one collective call at a time per communicator.
#pragma once

#include <memory>
#include <vector>

#include "common/error.hpp"

#include "socket.hpp"
#include "unique_id.hpp"

namespace weft {

class Bootstrap {
 public:
  // Joins the job named by `id` as `rank` of `nranks`. Rank 0 listens (adopting the listener of
  // weft_get_unique_id when this process made the id); the others connect. Every rank presents
  // the secret; a rank whose nranks or rank disagrees, or that runs another weft build
  // (buildIdentity), fails the whole job with kInvalidUsage at every rank, rather than a timeout.
  // Throws weft::Error.
  static std::unique_ptr<Bootstrap> join(const UniqueId& id, int rank, int nranks, double timeoutS);

  // Every rank contributes `bytes`; `all` receives nranks * bytes in rank order.
  void allGather(const void* mine, size_t bytes, void* all);
  void barrier();
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

 private:
  Bootstrap(int rank, int nranks, double timeoutS) : rank_(rank), nranks_(nranks), timeoutS_(timeoutS) {}
  void joinAsRoot(const UniqueId& id);
  void joinAsPeer(const UniqueId& id);
  // Root only: tells every connected rank the job failed, then throws.
  [[noreturn]] void failJob(Code code, const std::string& why, net::Socket* extra);

  int rank_;
  int nranks_;
  double timeoutS_;
  net::Socket root_;                // peers: connection to rank 0
  std::vector<net::Socket> peers_;  // rank 0: connection to each rank
};

}  // namespace weft
