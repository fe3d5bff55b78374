// Host threads that poll and back off into short sleeps (the CPU backend's workers, the host
// proxy's threads, a caller waiting for its op) sleep with a timer slack of 1 us. Linux stretches
// every timed wait of a thread by its slack, 50 us by default: longer than the sleeps themselves
// (prim::relax's 20 us, the proxy's 5-50 us), so a signal that landed during one went unseen that
// much longer. Host code only; no GPU source includes it.
#pragma once

#include <sys/prctl.h>

namespace weft::dev {

constexpr unsigned long kPreciseSleepSlackNs = 1000;

// Gives the calling thread the 1 us slack. Returns the slack it had, to restore where the thread
// is not weft's own; -1 where the system does not say (then the slack is left alone).
inline long usePreciseSleeps() {
  const long had = prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
  if (had > 0) prctl(PR_SET_TIMERSLACK, kPreciseSleepSlackNs, 0UL, 0UL, 0UL);
  return had;
}

// Gives the thread back the slack usePreciseSleeps returned.
inline void restoreSleepSlack(long had) {
  if (had > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(had), 0UL, 0UL, 0UL);
}

}  // namespace weft::dev
