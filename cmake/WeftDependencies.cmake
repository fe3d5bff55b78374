# Every dependency comes from Debian 12 packages (see README.md).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
if(WEFT_WITH_UCX)
  pkg_check_modules(UCX IMPORTED_TARGET ucx)
endif()
if(WEFT_WITH_OFI)
  pkg_check_modules(OFI IMPORTED_TARGET libfabric)
endif()

if(WEFT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
