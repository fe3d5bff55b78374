#include "ucx_tls.hpp"

#include <string>

namespace weft::transport {

bool ucxTlsMayUseTcp(const char* tls) {
  const std::string value = tls ? tls : "";
  if (value.empty()) return true;
  const bool excluding = value[0] == '^';
  bool namesTcp = false, namesAll = false;
  size_t at = excluding ? 1 : 0;
  for (;;) {
    const size_t end = value.find(',', at);
    const std::string name = value.substr(at, end == std::string::npos ? std::string::npos : end - at);
    namesTcp |= name == "tcp";
    namesAll |= name == "all";
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return excluding ? !namesTcp : namesTcp || namesAll;
}

}  // namespace weft::transport
