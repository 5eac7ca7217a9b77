# Warnings for ferry's own targets (tests, examples, benchmarks) only: the library target
# imposes no flags on the projects that use it.
option(FERRY_WARNINGS_AS_ERRORS "Treat warnings in ferry's own targets as errors" ON)

function(ferry_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  # GCC 12 at -O3 reports impossible overlaps inside libstdc++'s own std::string appends
  # (GCC bug 105329, fixed in 13); the warning says nothing about our code there.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(FERRY_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# ferry's own code is standard C++20, not the GNU dialect.
set(CMAKE_CXX_EXTENSIONS OFF)
