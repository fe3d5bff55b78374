// The persistent engine of the CPU backend: one OS thread per resident worker, each running the
// same worker loop a GPU thread block runs. The view (and everything it points to) must outlive
// stop().
#pragma once

#include <thread>
#include <vector>

#include "../comm_device.hpp"

namespace weft::dev {

class CpuEngine {
 public:
  CpuEngine() = default;
  CpuEngine(const CpuEngine&) = delete;
  CpuEngine& operator=(const CpuEngine&) = delete;
  ~CpuEngine() { join(); }

  // Starts `workers` threads polling the queue from ticket `firstTicket`.
  void start(const CommView& view, int workers, uint64_t firstTicket);
  // Waits for the workers to exit; the caller has set the queue's stop or abort word.
  void join();
  int workers() const { return static_cast<int>(threads_.size()); }

 private:
  CommView view_;
  std::vector<std::thread> threads_;
};

}  // namespace weft::dev
