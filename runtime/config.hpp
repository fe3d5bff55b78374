// Every runtime setting in one declarative table (name, type, default, help). A value comes from,
// in order of precedence: the weft_config_t passed to init, a WEFT_<NAME> environment variable,
// the config file (WEFT_CONFIG_FILE), or the default. `weftctl info -c` prints each value and
// its source.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace weft {

enum class SettingType { kInt, kSize, kDouble, kString };
enum class Source { kDefault, kFile, kEnv, kApi };

const char* sourceName(Source s);

struct SettingSpec {
  const char* name;  // also the config-file key; the environment variable is WEFT_<NAME upper-cased>
  SettingType type;
  const char* defaultValue;
  const char* help;
  double min = 0;  // inclusive bounds for numbers
  double max = 0;
  bool autoValue = false;  // "auto" is accepted too: the runtime chooses (the help says how)
};

// The table itself.
const std::vector<SettingSpec>& settingSpecs();
std::string envName(const char* setting);

struct SettingValue {
  std::string text;  // as given
  Source source = Source::kDefault;
  std::string origin;  // where it was read: variable name or file:line
};

class Settings {
 public:
  using Getenv = std::function<const char*(const char*)>;

  // Resolves every setting from the environment and the config file; `api` holds values from the
  // config struct (already text). Throws weft::Error (invalid argument) naming the first bad value.
  static Settings resolve(const std::map<std::string, std::string>& api, const Getenv& getenv);
  static Settings resolve(const std::map<std::string, std::string>& api = {});

  int64_t getInt(const char* name) const;
  double getDouble(const char* name) const;
  const std::string& getString(const char* name) const;
  const SettingValue& value(const char* name) const;
  // Whether a setting that takes "auto" has it.
  bool isAuto(const char* name) const;
  const std::string& configFile() const { return configFile_; }

 private:
  std::map<std::string, SettingValue> values_;
  std::string configFile_;
};

// oneshot_max_bytes = auto: the one-shot AllReduce's largest input on `nranks` ranks (`lines`: in
// 128-byte lines).
uint64_t autoOneShotBytes(int nranks, bool lines);
// oneshot_max_bytes's `auto` in a job with host-proxy peers: 8 KB sent in all (input x peers) on
// GPUs, 4 KB on the CPU backend.
uint64_t autoProxyOneShotBytes(int nranks);
// The largest All-to-All block (per peer) that goes staged through the proxy: 4 KB sent in all.
uint64_t autoProxyStagedBytes(int nranks);

// The whole of a small text file that a setting names: a regular file of at most kMaxTextFileBytes.
// Throws weft::Error (invalid argument) naming `what` and the path otherwise (a directory, a device
// such as /dev/zero, a FIFO, a missing or larger file), without reading more than that bound.
constexpr size_t kMaxTextFileBytes = size_t{1} << 20;
std::string readTextFile(const std::string& path, const std::string& what);

// Parses a flat TOML subset: `key = value` lines, '#' comments, optional [weft] section headers,
// quoted strings, integers with optional KiB/MiB/GiB suffix in quotes, floats, booleans. Throws
// weft::Error naming the file and line of a syntax error, or the file if readTextFile refuses it.
std::map<std::string, SettingValue> parseConfigFile(const std::string& path);
// The same for text read elsewhere; `origin` names it in errors.
std::map<std::string, SettingValue> parseConfigText(const std::string& text, const std::string& origin);

// A comma list of numeric user or group ids ("" is empty). Throws weft::Error naming `name`.
std::vector<uint32_t> parseIdList(const std::string& name, const std::string& text);

// Numbers accept suffixes K, M, G (powers of 1024) for sizes. Throws on junk.
int64_t parseInteger(const std::string& name, const std::string& text, bool allowSuffix);
double parseDouble(const std::string& name, const std::string& text);

}  // namespace weft
