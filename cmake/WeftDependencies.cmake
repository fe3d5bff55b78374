# Every dependency comes from Debian 12 packages (see README.md).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
# UCX's memory hooks (libucm, loaded with libucp) take a lock in madvise as a thread exits, which
# crashes ThreadSanitizer's runtime: ThreadSanitizer builds leave UCX out (libfabric stays in).
if(WEFT_WITH_UCX AND WEFT_SANITIZE STREQUAL "thread")
  message(STATUS "UCX back-end left out of the ThreadSanitizer build (libucm's hooks crash its runtime)")
  set(UCX_FOUND FALSE)
elseif(WEFT_WITH_UCX)
  pkg_check_modules(UCX IMPORTED_TARGET ucx)
endif()
if(WEFT_WITH_OFI)
  pkg_check_modules(OFI IMPORTED_TARGET libfabric)
endif()

if(WEFT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
