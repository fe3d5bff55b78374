// weftd's reaper: stops nothing, only waits. The loop raises a rank's stop or abort word and hands
// the engine here, with everything its workers may still touch; a thread of the job's own joins
// the workers, so the loop never waits on a worker finishing its op, and one job's slow workers
// delay no other job's. A job with a ticket is reported done (fd() becomes readable, takeDone()
// names it) once its workers have exited: weftd answers a detach only then. What the workers
// touched is then handed back to the loop (takeJoined), which frees it when no kernel of weftd's
// runs (a GPU frees memory only once the work of the whole context has ended).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::service {

class Reaper {
 public:
  struct Job {
    // Waits for workers told to stop; false where they did not stop (a GPU kernel that did not
    // leave): `keep` is then never let go, since they may still touch it. May be empty (the
    // ticket is done at once).
    std::function<bool()> join;
    std::vector<std::shared_ptr<void>> keep;  // what the workers may touch until joined
    uint64_t ticket = 0;                      // 0: nobody waits for it
  };

  // Throws weft::Error (kSystem) where its descriptor cannot be made.
  Reaper();
  // Waits for every job handed over (their stop or abort words are raised).
  ~Reaper();
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Where no thread can be started (out of threads), joins on the caller's thread instead.
  void retire(Job job);
  // Readable while tickets are done and not yet taken (an eventfd).
  int fd() const { return eventFd_; }
  // The tickets done since the last call; never blocks.
  std::vector<uint64_t> takeDone();
  // What the workers of the jobs joined since the last call touched, theirs no more; never blocks.
  std::vector<std::shared_ptr<void>> takeJoined();
  // Jobs handed over and not yet joined.
  size_t pending() const;
  // Jobs whose workers did not stop (their memory is kept for good).
  size_t stuck() const;

 private:
  void finish(Job& job);
  void joinFinished();  // joins the threads whose job is done (they are about to exit)

  mutable std::mutex mu_;
  std::vector<uint64_t> done_;
  std::vector<std::shared_ptr<void>> joined_;  // the `keep` of jobs whose workers have exited
  std::vector<std::thread::id> finished_;      // threads whose job is done, to be joined
  std::vector<std::thread> threads_;
  size_t busy_ = 0;
  size_t stuck_ = 0;
  int eventFd_ = -1;
};

}  // namespace weft::service
