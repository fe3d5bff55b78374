#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/error.hpp"
#include "runtime/config.hpp"
#include "runtime/path_table.hpp"
#include "weft/version.h"

namespace weft {
namespace {

struct Env {
  std::map<std::string, std::string> vars;
  Settings::Getenv fn() const {
    return [this](const char* n) -> const char* {
      auto it = vars.find(n);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// The Error that resolving `api` (and `env`) throws; the test fails where none is thrown.
Error resolveError(const std::map<std::string, std::string>& api, const Env& env = Env{}) {
  try {
    Settings::resolve(api, env.fn());
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "resolved without an error";
  return Error(Code::kInternal, "no error");
}

std::string writeFile(const std::string& text) {
  char path[] = "/tmp/weft-config-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  FILE* f = fdopen(fd, "w");
  fputs(text.c_str(), f);
  fclose(f);
  return path;
}

TEST(Config, PrecedenceIsApiThenEnvThenFileThenDefault) {
  const std::string file = writeFile("# comment\n[weft]\ntimeout_s = 7\nqueue_depth = 16\ntile_bytes = \"128K\"\n");
  Env env{{{"WEFT_CONFIG_FILE", file}, {"WEFT_TIMEOUT_S", "5"}, {"WEFT_QUEUE_DEPTH", "32"}}};
  Settings s = Settings::resolve({{"queue_depth", "8"}}, env.fn());
  EXPECT_EQ(s.getInt("queue_depth"), 8);
  EXPECT_EQ(s.value("queue_depth").source, Source::kApi);
  EXPECT_EQ(s.getDouble("timeout_s"), 5.0);
  EXPECT_EQ(s.value("timeout_s").source, Source::kEnv);
  EXPECT_EQ(s.getInt("tile_bytes"), 128 << 10);
  EXPECT_EQ(s.value("tile_bytes").source, Source::kFile);
  EXPECT_EQ(s.value("tile_bytes").origin, file + ":5");
  EXPECT_EQ(s.getInt("heap_bytes"), 256 << 20);
  EXPECT_EQ(s.value("heap_bytes").source, Source::kDefault);
  std::remove(file.c_str());
}

TEST(Config, AutoOnlyWhereTheSettingTakesIt) {
  const Settings s = Settings::resolve({}, Env{}.fn());
  EXPECT_TRUE(s.isAuto("oneshot_max_bytes"));
  EXPECT_FALSE(s.isAuto("heap_bytes"));
  const Settings sized = Settings::resolve({{"oneshot_max_bytes", "512K"}}, Env{}.fn());
  EXPECT_FALSE(sized.isAuto("oneshot_max_bytes"));
  EXPECT_EQ(sized.getInt("oneshot_max_bytes"), 512 << 10);
  const std::string heapAuto = resolveError({{"heap_bytes", "auto"}}).what();
  EXPECT_NE(heapAuto.find("heap_bytes"), std::string::npos) << heapAuto;
  const std::string automatic = resolveError({{"oneshot_max_bytes", "automatic"}}).what();
  EXPECT_NE(automatic.find("oneshot_max_bytes"), std::string::npos) << automatic;
  EXPECT_NE(automatic.find("nor auto"), std::string::npos) << automatic;
  for (bool lines : {false, true}) {
    EXPECT_GT(autoOneShotBytes(2, lines), 0u);
    EXPECT_GE(autoOneShotBytes(2, lines), autoOneShotBytes(4, lines))
        << "one-shot reads every peer's input: fewer ranks, larger";
    EXPECT_GE(autoOneShotBytes(4, lines), autoOneShotBytes(8, lines));
  }
  EXPECT_GE(autoOneShotBytes(4, true), autoOneShotBytes(4, false)) << "128-byte lines carry twice the payload";
  // Through the proxy: what an op sends in all stays within 8 KB on GPUs and 4 KB on the CPU
  // backend (the staged All-to-All's blocks: 4 KB everywhere), in whole 8-byte words.
  const bool cpu = std::string(WEFT_BUILD_GPU) == "cpu";
  const uint64_t oneShotSent = cpu ? 4096 : 8192;
  for (int n : {2, 3, 4, 8, 1000}) {
    for (const uint64_t bound : {autoProxyOneShotBytes(n), autoProxyStagedBytes(n)}) {
      EXPECT_GE(bound, 8u) << n << " ranks";
      EXPECT_EQ(bound % 8, 0u) << n << " ranks";
    }
    // At least a word per peer, where the bound spread over the peers would leave less.
    const auto peers = static_cast<uint64_t>(n - 1);
    EXPECT_LE(autoProxyOneShotBytes(n) * peers, std::max<uint64_t>(oneShotSent, 8 * peers)) << n << " ranks";
    EXPECT_LE(autoProxyStagedBytes(n) * peers, std::max<uint64_t>(4096, 8 * peers)) << n << " ranks";
  }
  EXPECT_EQ(autoProxyOneShotBytes(2), oneShotSent);
  EXPECT_EQ(autoProxyStagedBytes(2), 4096u);
  EXPECT_EQ(autoProxyOneShotBytes(3), cpu ? 2048u : 4096u);
  EXPECT_LT(autoProxyOneShotBytes(2), autoOneShotBytes(2, false)) << "the proxy's bound is the smaller";
}

TEST(Config, BadValuesNameTheSettingAndWhereItCameFrom) {
  const Error ctas = resolveError({}, Env{{{"WEFT_PERSISTENT_CTAS", "0"}}});
  EXPECT_EQ(ctas.code(), Code::kInvalidArgument);
  EXPECT_NE(std::string(ctas.what()).find("persistent_ctas (from WEFT_PERSISTENT_CTAS)"), std::string::npos)
      << ctas.what();
  EXPECT_THROW(Settings::resolve({{"tile_bytes", "12Q"}}, Env{}.fn()), Error);
  EXPECT_THROW(Settings::resolve({{"tile_bytes", "1000"}}, Env{}.fn()), Error) << "not a multiple of 256";
  EXPECT_THROW(Settings::resolve({{"engine", "turbo"}}, Env{}.fn()), Error);
  EXPECT_THROW(Settings::resolve({{"transport", "smoke-signals"}}, Env{}.fn()), Error);
  const std::string protocol = resolveError({{"oneshot_protocol", "ll64"}}).what();
  EXPECT_NE(protocol.find("oneshot_protocol"), std::string::npos) << protocol;
  EXPECT_NE(protocol.find("not auto, ll or ll128"), std::string::npos) << protocol;
  EXPECT_THROW(Settings::resolve({{"no_such_setting", "1"}}, Env{}.fn()), Error);
}

TEST(Config, FileSyntaxErrorsNameTheLine) {
  const std::string file = writeFile("timeout_s = 3\nthis is not toml\n");
  try {
    parseConfigFile(file);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file + ":2"), std::string::npos) << e.what();
  }
  std::remove(file.c_str());
  const std::string unknown = writeFile("colour = \"blue\"\n");
  EXPECT_THROW(parseConfigFile(unknown), Error);
  std::remove(unknown.c_str());
  EXPECT_THROW(parseConfigFile("/nonexistent/weft.toml"), Error);
}

// The message of the Error that f() throws; the test fails where none is thrown.
template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// gemv_tuning_file became path_table_file (with a new format): naming the old one anywhere is an
// error that says what replaced it, never a table silently not read.
TEST(Config, AReplacedSettingIsAnErrorNamingItsSuccessor) {
  const std::string viaEnv = resolveError({}, Env{{{"WEFT_GEMV_TUNING_FILE", "/etc/weft/t.tsv"}}}).what();
  EXPECT_NE(viaEnv.find("WEFT_GEMV_TUNING_FILE: setting 'gemv_tuning_file' was replaced by path_table_file"),
            std::string::npos)
      << viaEnv;
  const std::string viaApi = resolveError({{"gemv_tuning_file", "t.tsv"}}).what();
  EXPECT_NE(viaApi.find("replaced by path_table_file"), std::string::npos) << viaApi;
  const std::string file = writeFile("gemv_tuning_file = \"t.tsv\"\n");
  const std::string viaFile = errorOf([&] { parseConfigFile(file); });
  EXPECT_NE(viaFile.find(file + ":1: setting 'gemv_tuning_file' was replaced by path_table_file"), std::string::npos)
      << viaFile;
  std::remove(file.c_str());
}

// A directory read as an empty file, and /dev/zero read without end, before.
TEST(Config, OnlyRegularFilesOfBoundedSizeAreRead) {
  char dir[] = "/tmp/weft-config-dir-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  const std::string asDir = errorOf([&] { parseConfigFile(d); });
  EXPECT_NE(asDir.find("config file '" + d + "': is a directory"), std::string::npos) << asDir;
  const std::string fifo = d + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string asFifo = errorOf([&] { parseConfigFile(fifo); });
  EXPECT_NE(asFifo.find("is a FIFO"), std::string::npos) << asFifo;
  const std::string tuning = errorOf([&] { PathTable::load(d); });
  EXPECT_NE(tuning.find("path_table_file '" + d + "': is a directory"), std::string::npos) << tuning;
  const std::string big = writeFile(std::string(kMaxTextFileBytes + 1, '#'));
  const std::string tooBig = errorOf([&] { parseConfigFile(big); });
  EXPECT_NE(tooBig.find("larger than 1024 KiB"), std::string::npos) << tooBig;
  const std::string justRight = writeFile(std::string(kMaxTextFileBytes - 16, '#') + "\ntimeout_s = 3\n");
  EXPECT_EQ(parseConfigFile(justRight).at("timeout_s").text, "3");
  const std::string viaEnv = resolveError({}, Env{{{"WEFT_CONFIG_FILE", d}}}).what();
  EXPECT_NE(viaEnv.find(d), std::string::npos) << viaEnv;
  std::remove(big.c_str());
  std::remove(justRight.c_str());
  std::remove(fifo.c_str());
  rmdir(dir);
}

// weftctl info -c showed WEFT_LOG_LEVEL=loud as valid; only init refused it. One check now.
TEST(Config, LogSettingsAreCheckedWhereEverySettingIs) {
  const std::string level = resolveError({}, Env{{{"WEFT_LOG_LEVEL", "loud"}}}).what();
  EXPECT_NE(level.find("log_level (from WEFT_LOG_LEVEL): 'loud'"), std::string::npos) << level;
  const std::string subsys = resolveError({}, Env{{{"WEFT_LOG_SUBSYS", "p2p,gossip"}}}).what();
  EXPECT_NE(subsys.find("log_subsys (from WEFT_LOG_SUBSYS)"), std::string::npos) << subsys;
  const std::string file =
      resolveError({}, Env{{{"WEFT_LOG_FILE", "/tmp/weft-no-such-dir-" + std::to_string(getpid()) + "/a.log"}}}).what();
  EXPECT_NE(file.find("log_file (from WEFT_LOG_FILE): directory"), std::string::npos) << file;
  EXPECT_EQ(Settings::resolve({}, Env{{{"WEFT_LOG_LEVEL", "DEBUG"}}}.fn()).getString("log_level"), "DEBUG");
}

TEST(Config, TheSampleFileParsesAndMatchesTheDefaults) {
  const auto values = parseConfigFile(WEFT_SOURCE_DIR "/conf/weftd.toml");
  for (const auto& spec : settingSpecs()) {
    auto it = values.find(spec.name);
    if (it == values.end()) continue;
    EXPECT_EQ(it->second.text, spec.defaultValue) << spec.name << ": the sample should show the default";
  }
  EXPECT_GE(values.size(), 9u);
}

// The settings are documented in two more places than the table: the README's table of settings
// and the sample file. Each must name every setting (the sample as a key, set to its default or
// commented out), and nothing that is not one.
TEST(Config, TheReadmeAndTheSampleNameEverySettingAndNothingElse) {
  std::set<std::string> specs;
  for (const auto& spec : settingSpecs()) specs.insert(spec.name);
  auto names = [](const std::string& text, const std::regex& line, const std::regex& name) {
    std::set<std::string> out;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
      std::smatch m;
      if (!std::regex_search(l, m, line)) continue;
      const std::string cell = m[1];
      for (std::sregex_iterator it(cell.begin(), cell.end(), name), end; it != end; ++it) out.insert((*it)[1]);
    }
    return out;
  };
  // The README's table: rows "| `a` | default | meaning |" (or "| `a`, `b` | ...") after its header.
  const std::string readme = readTextFile(WEFT_SOURCE_DIR "/README.md", "README.md");
  const size_t table = readme.find("| setting | default | meaning |");
  ASSERT_NE(table, std::string::npos) << "README.md: no table of settings";
  const size_t end = readme.find("\n\n", table);
  const std::set<std::string> inReadme =
      names(readme.substr(table, end - table), std::regex("^\\| ([^|]*) \\|"), std::regex("`([a-z_0-9]+)`"));
  // The sample: "key = value" lines, or "# key = value" for a setting it leaves at its default.
  const std::string sample = readTextFile(WEFT_SOURCE_DIR "/conf/weftd.toml", "conf/weftd.toml");
  const std::set<std::string> inSample = names(sample, std::regex("^#? ?([a-z_0-9]+) = "), std::regex("([a-z_0-9]+)"));
  for (const std::string& s : specs) {
    EXPECT_EQ(inReadme.count(s), 1u) << s << ": not in README.md's table of settings";
    EXPECT_EQ(inSample.count(s), 1u) << s << ": not in conf/weftd.toml";
  }
  for (const std::string& n : inReadme) EXPECT_EQ(specs.count(n), 1u) << n << ": in README.md's table, not a setting";
  for (const std::string& n : inSample) EXPECT_EQ(specs.count(n), 1u) << n << ": in conf/weftd.toml, not a setting";
}

TEST(Config, IntegersTakeBinarySuffixes) {
  EXPECT_EQ(parseInteger("x", "4K", true), 4096);
  EXPECT_EQ(parseInteger("x", "2MiB", true), 2 << 20);
  EXPECT_EQ(parseInteger("x", "1G", true), int64_t{1} << 30);
  EXPECT_EQ(parseInteger("x", "0x10", false), 16);
  EXPECT_THROW(parseInteger("x", "4K", false), Error);
  EXPECT_THROW(parseInteger("x", "", false), Error);
  EXPECT_THROW(parseInteger("x", "99999999999T", true), Error);
  EXPECT_THROW(parseDouble("x", "nan"), Error);
  EXPECT_EQ(envName("heap_bytes"), "WEFT_HEAP_BYTES");
}

}  // namespace
}  // namespace weft
