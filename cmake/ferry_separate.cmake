# ferry::separate: ferry's separately compiled part (include/ferry/src.hpp: the device model and
# the common op instantiations) as a static library, built by the project that asks for it with
# that project's compiler and flags, so it stays usable under any sanitizer or standard library.
# A target that links it is compiled with FERRY_SEPARATE_COMPILATION: its units parse less and
# instantiate less (ferry/core/config.hpp, ferry/instantiations.hpp). Built only when linked.
if(NOT TARGET ferry::separate)
  file(CONFIGURE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/ferry_separate.cpp"
       CONTENT "// ferry's separately compiled part\n#include <ferry/src.hpp>\n")
  add_library(ferry_separate STATIC EXCLUDE_FROM_ALL "${CMAKE_CURRENT_BINARY_DIR}/ferry_separate.cpp")
  add_library(ferry::separate ALIAS ferry_separate)
  target_link_libraries(ferry_separate PUBLIC ferry::ferry)
  target_compile_definitions(ferry_separate PUBLIC FERRY_SEPARATE_COMPILATION)
endif()
