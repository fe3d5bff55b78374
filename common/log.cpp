#include "log.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <sstream>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "error.hpp"

namespace weft::log {

std::atomic<int> gLevel{static_cast<int>(Level::kWarn)};
std::atomic<uint32_t> gSubsys{kAll};

namespace {

struct SubsysName {
  const char* name;
  Subsys bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"init", kInit},     {"bootstrap", kBootstrap}, {"heap", kHeap}, {"queue", kQueue}, {"engine", kEngine},
    {"p2p", kP2p},       {"proxy", kProxy},         {"ucx", kUcx},   {"ofi", kOfi},     {"api", kApi},
    {"config", kConfig}, {"service", kService},
};
constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug", "trace"};

std::mutex gMutex;
std::shared_ptr<spdlog::logger> gLogger;

std::shared_ptr<spdlog::logger> logger() {
  std::lock_guard<std::mutex> lock(gMutex);
  if (!gLogger) {
    gLogger = std::make_shared<spdlog::logger>("weft", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    gLogger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [weft %P] [%l] %v");
    gLogger->set_level(spdlog::level::trace);
  }
  return gLogger;
}

const char* subsysName(Subsys s) {
  for (const auto& n : kSubsysNames)
    if (n.bit == s) return n.name;
  return "?";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

void write(Level l, Subsys s, const std::string& msg) {
  static constexpr spdlog::level::level_enum kMap[] = {spdlog::level::err, spdlog::level::warn, spdlog::level::info,
                                                       spdlog::level::debug, spdlog::level::trace};
  logger()->log(kMap[static_cast<int>(l)], "{}: {}", subsysName(s), msg);
}

Level parseLevel(const std::string& s) {
  const std::string v = lower(s);
  for (int i = 0; i < 5; ++i)
    if (v == kLevelNames[i]) return static_cast<Level>(i);
  throw Error(Code::kInvalidArgument, "log_level: '" + s + "' is not one of error, warn, info, debug, trace");
}

uint32_t parseSubsys(const std::string& s) {
  if (s.empty() || lower(s) == "all") return kAll;
  uint32_t mask = 0;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    bool found = false;
    for (const auto& n : kSubsysNames)
      if (lower(item) == n.name) {
        mask |= n.bit;
        found = true;
      }
    if (!found) throw Error(Code::kInvalidArgument, "log_subsys: unknown subsystem '" + item + "'");
  }
  return mask;
}

std::string expandFilePattern(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') {
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        out += host;
        ++i;
        continue;
      }
      if (c == 'p') {
        out += std::to_string(getpid());
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

void checkFileDirectory(const std::string& pattern) {
  const std::string path = expandFilePattern(pattern);
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(Code::kInvalidArgument,
                "log_file: directory '" + dir + "' of '" + path + "' does not exist (weft does not create it)");
}

void configure(const std::string& level, const std::string& subsys, const std::string& file) {
  const Level l = parseLevel(level);
  const uint32_t mask = parseSubsys(subsys);
  if (!file.empty()) {
    // spdlog's file sink would create the missing directories (mode 0755) itself.
    checkFileDirectory(file);
    std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink;
    try {
      sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(expandFilePattern(file));
    } catch (const spdlog::spdlog_ex& e) {
      throw Error(Code::kInvalidArgument, std::string("log_file: ") + e.what());
    }
    auto lg = std::make_shared<spdlog::logger>("weft", sink);
    lg->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [weft %P] [%l] %v");
    lg->set_level(spdlog::level::trace);
    lg->flush_on(spdlog::level::trace);
    std::lock_guard<std::mutex> lock(gMutex);
    gLogger = lg;
  } else {
    std::lock_guard<std::mutex> lock(gMutex);
    gLogger.reset();  // back to stderr, created on the next line logged
  }
  gLevel.store(static_cast<int>(l), std::memory_order_relaxed);
  gSubsys.store(mask, std::memory_order_relaxed);
}

}  // namespace weft::log
