#include "ucx_tls.hpp"

#include <string>
#include <vector>

namespace weft::transport {
namespace {

// The names of a UCX_TLS value, without an exclusion list's leading '^' (*excluding says whether
// there was one).
std::vector<std::string> namesOf(const std::string& value, bool* excluding) {
  *excluding = !value.empty() && value[0] == '^';
  std::vector<std::string> names;
  for (size_t at = *excluding ? 1 : 0;;) {
    const size_t end = value.find(',', at);
    names.push_back(value.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return names;
}

}  // namespace

bool ucxTlsMayUseTcp(const char* tls) {
  const std::string value = tls ? tls : "";
  if (value.empty()) return true;
  bool excluding = false, namesTcp = false, namesAll = false;
  for (const std::string& name : namesOf(value, &excluding)) {
    namesTcp |= name == "tcp";
    namesAll |= name == "all";
  }
  return excluding ? !namesTcp : namesTcp || namesAll;
}

UcxRdma ucxTlsRdma(const char* tls) {
  const std::string value = tls ? tls : "";
  if (value.empty()) return UcxRdma::kIfPresent;
  bool excluding = false, namesAll = false;
  const std::vector<std::string> names = namesOf(value, &excluding);
  if (excluding) return UcxRdma::kIfPresent;
  for (const std::string& name : names) {
    namesAll |= name == "all";
    for (const char* rdma : {"rc", "dc", "ud", "ib", "mlx5", "gga"})
      if (name == rdma || name.rfind(std::string(rdma) + "_", 0) == 0) return UcxRdma::kNamed;
  }
  return namesAll ? UcxRdma::kIfPresent : UcxRdma::kNone;
}

}  // namespace weft::transport
