# ferry::separate: ferry's separately compiled part (include/ferry/src.hpp: the device model and
# the common op instantiations) as a static library, built by the project that asks for it with
# that project's compiler and flags, so it stays usable under any sanitizer or standard library.
# A target that links it is compiled with FERRY_SEPARATE_COMPILATION: its units parse less and
# instantiate less (ferry/core/config.hpp, ferry/instantiations.hpp). Built only when linked.
# It is compiled as two units (FERRY_SOURCE_PART, ferry/core/config.hpp), which a parallel build
# compiles side by side. FERRY_SEPARATE_SOURCES names them, for a target of the project's own.
if(NOT TARGET ferry::separate)
  set(FERRY_SEPARATE_SOURCES "")
  foreach(part IN ITEMS 1 2)
    set(source "${CMAKE_CURRENT_BINARY_DIR}/ferry_separate_${part}.cpp")
    file(CONFIGURE OUTPUT "${source}" CONTENT
      "// ferry's separately compiled part, ${part} of 2\n#define FERRY_SOURCE_PART ${part}\n#include <ferry/src.hpp>\n")
    list(APPEND FERRY_SEPARATE_SOURCES "${source}")
  endforeach()
  add_library(ferry_separate STATIC EXCLUDE_FROM_ALL ${FERRY_SEPARATE_SOURCES})
  add_library(ferry::separate ALIAS ferry_separate)
  target_link_libraries(ferry_separate PUBLIC ferry::ferry)
  target_compile_definitions(ferry_separate PUBLIC FERRY_SEPARATE_COMPILATION)
endif()
