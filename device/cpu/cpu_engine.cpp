#include "cpu_engine.hpp"

#include <sys/prctl.h>

#include "../engine_device.hpp"

namespace weft::dev {

void CpuEngine::start(const CommView& view, int workers, uint64_t firstTicket) {
  view_ = view;
  threads_.reserve(workers);
  for (int i = 0; i < workers; ++i)
    threads_.emplace_back([this, firstTicket, i] {
      // A worker that polls long backs off into sleeps of 20 us (prim::relax), and Linux stretches
      // a thread's timed waits by its timer slack, 50 us by default: a signal that landed during
      // one went unseen for 70 us. Through the host proxy on 4 ranks those gaps were most of an
      // op's time. A slack of 1 us keeps the sleeps what they ask for; these threads are weft's.
      prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
      OpDesc desc;
      runWorker(SoloCoop{}, view_, firstTicket, i, &desc);
    });
}

void CpuEngine::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace weft::dev
