#include "paths.hpp"

#include "runtime/status_page.hpp"

namespace weft::service {

std::string directory(const Settings& s) {
  const std::string& dir = s.getString("service_dir");
  return dir.empty() ? status::directory(s.getString("status_dir")) : dir;
}

}  // namespace weft::service
