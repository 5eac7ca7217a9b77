# Install rules: headers, an exported target set, a relocatable CMake package (architecture
# independent, as a header-only library is) and a pkg-config file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ferry_cmake_dir "${CMAKE_INSTALL_DATADIR}/cmake/ferry")

install(TARGETS ferry EXPORT ferryTargets FILE_SET HEADERS)
install(EXPORT ferryTargets NAMESPACE ferry:: DESTINATION "${ferry_cmake_dir}")
# The MPI component, in a file of its own: find_package(ferry COMPONENTS mpi) loads it (and
# finds MPI) only when asked, and only an install made where MPI was found has it.
if(TARGET ferry_mpi)
  install(TARGETS ferry_mpi EXPORT ferryMpiTargets)
  install(EXPORT ferryMpiTargets NAMESPACE ferry:: FILE ferryMpiTargets.cmake
          DESTINATION "${ferry_cmake_dir}")
endif()

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/ferryConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/ferryConfig.cmake"
  INSTALL_DESTINATION "${ferry_cmake_dir}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/ferryConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion
  ARCH_INDEPENDENT)
install(FILES
  "${PROJECT_SOURCE_DIR}/cmake/ferry_separate.cmake"
  "${PROJECT_BINARY_DIR}/ferryConfig.cmake"
  "${PROJECT_BINARY_DIR}/ferryConfigVersion.cmake"
  DESTINATION "${ferry_cmake_dir}")

configure_file("${PROJECT_SOURCE_DIR}/cmake/ferry.pc.in" "${PROJECT_BINARY_DIR}/ferry.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/ferry.pc" DESTINATION "${CMAKE_INSTALL_DATADIR}/pkgconfig")
