# `cmake --install build --prefix P`: what an outside program needs to build against weft, and the
# user tools (docs/design-notes.md, "What is installed, and where"). libweft.so links the static
# layers (device, common, transport, runtime) privately, so they are part of it and are not installed.
include(CMakePackageConfigHelpers)

set(WEFT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

install(TARGETS weft EXPORT weftTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/api/include/weft/weft.h ${PROJECT_BINARY_DIR}/generated/weft/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/weft COMPONENT dev)

# The tools link the static layers themselves; weft-bench links libweft, found next door.
set(weft_tools weftctl weftd weftrun)
if(TARGET weft-bench)
  list(APPEND weft_tools weft-bench)
  set_target_properties(weft-bench PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()
install(TARGETS ${weft_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

# Samples, not live configuration: nothing reads them where they are installed (weft reads a config
# file only through WEFT_CONFIG_FILE, and the path table is built in), so they go to share/, where
# a reinstall cannot overwrite what an operator copied to /etc.
install(FILES ${PROJECT_SOURCE_DIR}/conf/README.md ${PROJECT_SOURCE_DIR}/conf/weftd.toml
              ${PROJECT_SOURCE_DIR}/conf/weftd.service ${PROJECT_SOURCE_DIR}/conf/path_table.tsv
        DESTINATION ${CMAKE_INSTALL_DATADIR}/weft COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/conf/slurm/weftd-job.sbatch DESTINATION ${CMAKE_INSTALL_DATADIR}/weft/slurm
        COMPONENT runtime)

# find_package(weft): the imported target weft::weft, relocatable (paths relative to the config file).
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${WEFT_INSTALL_CMAKEDIR} COMPONENT dev)
configure_package_config_file(cmake/weftConfig.cmake.in ${PROJECT_BINARY_DIR}/weftConfig.cmake
                              INSTALL_DESTINATION ${WEFT_INSTALL_CMAKEDIR})
# The soname changes with the major version only, so any 0.x satisfies a request for 0.y, y <= x.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weftConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/weftConfig.cmake ${PROJECT_BINARY_DIR}/weftConfigVersion.cmake
        DESTINATION ${WEFT_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: prefix relative to the .pc file (${pcfiledir}), so that `--prefix` at install time
# and a moved tree both hold.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(WEFT_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH WEFT_PC_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" WEFT_PC_PREFIX "${WEFT_PC_PREFIX}")
  set(WEFT_PC_PREFIX "\${pcfiledir}/${WEFT_PC_PREFIX}")
endif()
configure_file(cmake/weft.pc.in ${PROJECT_BINARY_DIR}/weft.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/weft.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
