#include "reaper.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>

#include "common/error.hpp"
#include "common/log.hpp"

namespace weft::service {

Reaper::Reaper() {
  eventFd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (eventFd_ < 0) throwSystemError("weftd: eventfd for the reaper");
}

Reaper::~Reaper() {
  std::vector<std::thread> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(threads_);
  }
  for (std::thread& t : all) t.join();
  ::close(eventFd_);
}

void Reaper::finish(Job& job) {
  const auto start = std::chrono::steady_clock::now();
  const bool stopped = !job.join || job.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Workers in the middle of an op's computation see the stop or abort word only after it.
  if (took > 0.1) WEFT_LOG(kInfo, kService, "a rank's engine took {:.2f} s to stop (its op was computing)", took);
  job.join = nullptr;
  if (stopped) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& k : job.keep) joined_.push_back(std::move(k));
    job.keep.clear();
  } else {
    // Unmapping memory a running kernel uses would fault its GPU for every job there: kept for as
    // long as weftd lives (reachable, so no leak checker counts it).
    WEFT_LOG(kError, kService, "a rank's engine did not stop; weftd keeps what it may touch");
    static std::mutex keptMu;
    static auto* kept = new std::vector<std::vector<std::shared_ptr<void>>>();
    std::lock_guard<std::mutex> lock(keptMu);
    kept->push_back(std::move(job.keep));
    std::lock_guard<std::mutex> count(mu_);
    ++stuck_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  --busy_;
  if (job.ticket != 0) {
    done_.push_back(job.ticket);
    const uint64_t one = 1;
    (void)!::write(eventFd_, &one, sizeof one);
  }
}

void Reaper::retire(Job job) {
  joinFinished();
  auto shared = std::make_shared<Job>(std::move(job));
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++busy_;
    try {
      threads_.emplace_back([this, shared] {
        finish(*shared);
        std::lock_guard<std::mutex> done(mu_);
        finished_.push_back(std::this_thread::get_id());
      });
      return;
    } catch (const std::system_error& e) {
      why = e.what();
    }
  }
  WEFT_LOG(kWarn, kService, "no thread to join a rank's engine on ({}); joining on weftd's loop", why);
  finish(*shared);
}

void Reaper::joinFinished() {
  std::vector<std::thread> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread::id id : finished_) {
      auto it = std::find_if(threads_.begin(), threads_.end(), [&](const std::thread& t) { return t.get_id() == id; });
      if (it == threads_.end()) continue;
      ready.push_back(std::move(*it));
      threads_.erase(it);
    }
    finished_.clear();
  }
  // Each has only its return left.
  for (std::thread& t : ready) t.join();
}

std::vector<uint64_t> Reaper::takeDone() {
  uint64_t count = 0;
  (void)!::read(eventFd_, &count, sizeof count);  // EAGAIN: nothing new, which the list says too
  joinFinished();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  out.swap(done_);
  return out;
}

std::vector<std::shared_ptr<void>> Reaper::takeJoined() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<void>> out;
  out.swap(joined_);
  return out;
}

size_t Reaper::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

size_t Reaper::stuck() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stuck_;
}

}  // namespace weft::service
