# Builds and runs a tiny program that uses ferry the way a downstream project would.
#   MODE=find_package     install ferry into a scratch prefix, then find_package(ferry CONFIG)
#   MODE=add_subdirectory  add ferry's source tree to the consumer's build
#   MODE=pkg_config       install, then compile with the flags `pkg-config --cflags ferry` gives
cmake_minimum_required(VERSION 3.23)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(consumer "${FERRY_SOURCE_DIR}/tests/package/consumer")
set(prefix "${WORK_DIR}/prefix")

set(build_type Release)
if(MODE STREQUAL "find_package" OR MODE STREQUAL "pkg_config")
  run("${CMAKE_COMMAND}" --install "${FERRY_BINARY_DIR}" --prefix "${prefix}")
endif()

if(MODE STREQUAL "pkg_config")
  find_program(pkg_config pkg-config REQUIRED)
  set(ENV{PKG_CONFIG_PATH} "${prefix}/share/pkgconfig")
  execute_process(COMMAND "${pkg_config}" --cflags --libs ferry
    RESULT_VARIABLE rc OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config does not know ferry")
  endif()
  # As the CMake target does: ferry's headers are a system directory to the consumer, so its
  # own strict warnings do not fire inside them.
  if(NOT flags MATCHES "-isystem ")
    message(FATAL_ERROR "pkg-config --cflags ferry gives '${flags}': no -isystem")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  file(MAKE_DIRECTORY "${WORK_DIR}")
  run("${CXX_COMPILER}" -std=c++20 ${flags} "${consumer}/main.cpp" -o "${WORK_DIR}/consumer")
else()
  if(MODE STREQUAL "find_package")
    # The installed package also brings ferry::separate, built here from the installed headers
    # (unoptimized and without debug information, as a plain configure does: ferry::separate at
    # -O2 alone would take minutes, and -g adds a fifth).
    set(how -D "CMAKE_PREFIX_PATH=${prefix}" -D FERRY_CONSUMER_SEPARATE=ON)
    # ferry::mpi too, where this ferry was configured with MPI.
    if(WITH_MPI)
      list(APPEND how -D FERRY_CONSUMER_MPI=ON)
    endif()
    set(build_type "")
  else()
    set(how -D "FERRY_SOURCE_DIR=${FERRY_SOURCE_DIR}")
  endif()
  run("${CMAKE_COMMAND}" -S "${consumer}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
      -D "CMAKE_CXX_COMPILER=${CXX_COMPILER}" -D "CMAKE_BUILD_TYPE=${build_type}" ${how})
  run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
  file(RENAME "${WORK_DIR}/build/consumer" "${WORK_DIR}/consumer")
  if(MODE STREQUAL "find_package")
    run("${WORK_DIR}/build/consumer_separate")
  endif()
endif()

run("${WORK_DIR}/consumer")
message(STATUS "consumer built with ${MODE} and ran")
