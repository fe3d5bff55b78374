// libFuzzer target: the config file's text, parsed and every value resolved as init resolves it.
// Anything but a weft::Error for bad input is a bug.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "common/error.hpp"
#include "runtime/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    std::map<std::string, std::string> api;
    for (const auto& [key, value] : weft::parseConfigText(text, "fuzz"))
      if (key != "log_file" && key != "config_file") api[key] = value.text;  // names of files to open
    weft::Settings::resolve(api, [](const char*) -> const char* { return nullptr; });
  } catch (const weft::Error&) {
  }
  return 0;
}
