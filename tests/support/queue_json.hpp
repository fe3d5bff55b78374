// What weftctl shows of this process's communicators, for tests that check which path an op took
// (WEFT_TEST_WEFTCTL: the weftctl the build made).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace weft::test {

// `weftctl queue --json` for this process's communicators.
inline std::string queueJson() {
  const std::string cmd = std::string(WEFT_TEST_WEFTCTL) + " queue --json --pid " + std::to_string(getpid()) + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
  }
  return out;
}

inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace weft::test
