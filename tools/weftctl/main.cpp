// weftctl: inspect and tune weft on this node. `weftctl info` prints the version, build options,
// devices, an hwloc topology summary and (-c) every setting with where its value came from.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "runtime/backend.hpp"
#include "runtime/config.hpp"
#include "runtime/topology.hpp"
#include "weft/version.h"

namespace {

void printInfo(bool settings) {
  std::printf("weft %s\n", WEFT_VERSION_STRING);
  std::printf("build: backend=%s type=%s sanitizer=%s ucx=%s libfabric=%s\n", WEFT_BUILD_GPU, WEFT_BUILD_TYPE,
              *WEFT_BUILD_SANITIZE ? WEFT_BUILD_SANITIZE : "none", WEFTCTL_UCX, WEFTCTL_OFI);
  const weft::HostIdentity host = weft::localHost();
  std::printf("host: %s (id %016llx)\n", host.hostname.c_str(), static_cast<unsigned long long>(host.hash));
  std::printf("devices: %s\n", weft::deviceSummary().c_str());
  std::printf("topology: %s\n", weft::topologySummary().c_str());
  if (!settings) return;
  const weft::Settings s = weft::Settings::resolve();
  if (!s.configFile().empty()) std::printf("config file: %s\n", s.configFile().c_str());
  std::printf("settings:\n");
  for (const auto& spec : weft::settingSpecs()) {
    const weft::SettingValue& v = s.value(spec.name);
    std::string from = weft::sourceName(v.source);
    if (!v.origin.empty() && v.source != weft::Source::kApi) from += " " + v.origin;
    std::printf("  %-20s = %-12s [%s]  %s (%s)\n", spec.name, ("\"" + v.text + "\"").c_str(), from.c_str(), spec.help,
                weft::envName(spec.name).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weftctl: inspect and tune weft"};
  app.require_subcommand(1);
  bool showSettings = false;
  auto* info = app.add_subcommand("info", "Version, build, devices, topology and settings");
  info->add_flag("-c,--config", showSettings, "Also print every setting and who set it");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) printInfo(showSettings);
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weftctl: %s\n", e.what());
    return 1;
  }
  return 0;
}
