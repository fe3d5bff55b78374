#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/log.hpp"

namespace weft::log {
namespace {

TEST(Log, ParsesLevelsAndSubsystems) {
  EXPECT_EQ(parseLevel("DEBUG"), Level::kDebug);
  EXPECT_THROW(parseLevel("loud"), Error);
  EXPECT_EQ(parseSubsys("all"), kAll);
  EXPECT_EQ(parseSubsys("p2p,queue"), static_cast<uint32_t>(kP2p | kQueue));
  EXPECT_THROW(parseSubsys("p2p,nonsense"), Error);
}

TEST(Log, FilePatternAndFilteringReachTheFile) {
  const std::string pattern = "/tmp/weft-log-test-%p.log";
  const std::string path = expandFilePattern(pattern);
  EXPECT_EQ(path, "/tmp/weft-log-test-" + std::to_string(getpid()) + ".log");
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(expandFilePattern("a-%h"), std::string("a-") + host);
  configure("info", "queue", pattern);
  WEFT_LOG(kInfo, kQueue, "shown {}", 42);
  WEFT_LOG(kInfo, kP2p, "hidden by subsystem");
  WEFT_LOG(kDebug, kQueue, "hidden by level");
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  EXPECT_NE(text.str().find("queue: shown 42"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("hidden"), std::string::npos) << text.str();
  configure("warn", "all", "");
  std::remove(path.c_str());
}

// spdlog's file sink created a missing directory tree (mode 0755) without a word.
TEST(Log, AFileInAMissingDirectoryIsRefusedNotCreated) {
  const std::string missing = "/tmp/weft-log-missing-" + std::to_string(getpid());
  try {
    configure("warn", "all", missing + "/deeper/weft-%p.log");
    ADD_FAILURE() << "configured a log file in a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("log_file: directory '" + missing + "/deeper'"), std::string::npos)
        << e.what();
  }
  struct stat st {};
  EXPECT_NE(stat(missing.c_str(), &st), 0) << missing << " was created";
  EXPECT_NO_THROW(checkFileDirectory("relative-%p.log")) << "the working directory exists";
  configure("warn", "all", "");
}

}  // namespace
}  // namespace weft::log
