#include "cpu_engine.hpp"

#include "../engine_device.hpp"
#include "../sleep_slack.hpp"

namespace weft::dev {

void CpuEngine::start(const CommView& view, int workers, uint64_t firstTicket) {
  view_ = view;
  threads_.reserve(workers);
  for (int i = 0; i < workers; ++i)
    threads_.emplace_back([this, firstTicket, i] {
      // Through the host proxy on 4 ranks the 50 us a sleep overshot was most of an op's time.
      usePreciseSleeps();
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
