// weftd and CUDA MPS: kernels of different processes run on one GPU at the same time only under
// MPS, and the ranks' kernels wait on each other's, so ranks that share a GPU need it. weftd uses
// the MPS control daemon that the environment names (CUDA_MPS_PIPE_DIRECTORY, else
// /tmp/nvidia-mps) if one answers there, or starts one with pipe and log directories of its own
// under its runtime directory and quits it when it exits. Either way it says which (its log,
// weftctl status); ranks reach a daemon weftd started by exporting its pipe directory before CUDA
// starts in them.
#pragma once

#include <string>

namespace weft::service {

class Mps {
 public:
  // mode "auto" (use or start, as above; a GPU build's weftd) or "off" (neither). `dir`: weftd's
  // runtime directory. Never throws: what could not be done is said in describe().
  Mps(const std::string& mode, const std::string& dir);
  ~Mps();  // quits the control daemon it started (bounded by 10 s)
  Mps(const Mps&) = delete;
  Mps& operator=(const Mps&) = delete;

  // For status: which daemon, at which pipe directory, or why none.
  const std::string& describe() const { return what_; }
  // The pipe directory of the daemon in use ("" if none).
  const std::string& pipeDir() const { return pipeDir_; }

 private:
  std::string what_;
  std::string pipeDir_;
  bool started_ = false;
};

// Whether an MPS control daemon answers at `pipeDir` (its control socket accepts a connection).
bool mpsAnswers(const std::string& pipeDir);

}  // namespace weft::service
