// Logging behind a small wrapper; spdlog stays an implementation detail. WEFT_LOG checks level
// and subsystem with two relaxed loads before anything is formatted, so a disabled line costs
// nothing; still, nothing on a hot path logs.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace weft::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

enum Subsys : uint32_t {
  kInit = 1u << 0,
  kBootstrap = 1u << 1,
  kHeap = 1u << 2,
  kQueue = 1u << 3,
  kEngine = 1u << 4,
  kP2p = 1u << 5,
  kProxy = 1u << 6,
  kUcx = 1u << 7,
  kOfi = 1u << 8,
  kApi = 1u << 9,
  kConfig = 1u << 10,
  kService = 1u << 11,
  kAll = 0xffffffffu,
};

extern std::atomic<int> gLevel;
extern std::atomic<uint32_t> gSubsys;

inline bool enabled(Level l, Subsys s) {
  return static_cast<int>(l) <= gLevel.load(std::memory_order_relaxed) &&
         (gSubsys.load(std::memory_order_relaxed) & s) != 0;
}

void write(Level l, Subsys s, const std::string& msg);

template <typename... Args>
void emit(Level l, Subsys s, fmt::format_string<Args...> f, Args&&... args) {
  write(l, s, fmt::format(f, std::forward<Args>(args)...));
}

// Applies WEFT_LOG_LEVEL / WEFT_LOG_SUBSYS / WEFT_LOG_FILE style values. Throws weft::Error
// (invalid argument) naming the bad value. `file` may contain %h (host name) and %p (pid); an
// empty `file` means stderr. The file is created or appended to; its directory must exist (it is
// never created). Process-wide: the last communicator initialised sets it.
void configure(const std::string& level, const std::string& subsys, const std::string& file);

Level parseLevel(const std::string& s);
uint32_t parseSubsys(const std::string& s);
std::string expandFilePattern(const std::string& pattern);
// Throws weft::Error (invalid argument) unless the directory of the expanded `pattern` exists.
void checkFileDirectory(const std::string& pattern);

}  // namespace weft::log

#define WEFT_LOG(level, subsys, ...)                                                  \
  do {                                                                                \
    if (::weft::log::enabled(::weft::log::Level::level, ::weft::log::subsys))         \
      ::weft::log::emit(::weft::log::Level::level, ::weft::log::subsys, __VA_ARGS__); \
  } while (0)
