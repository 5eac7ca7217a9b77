# Runs `test_mpi_departure crash` under `mpiexec --enable-recovery` (Open MPI's: the job goes on
# when a process dies) and judges the job by its output, since mpiexec then returns 0 whatever the
# survivors return: every rank but 1 must print its case's verdict "passed", its World's line
# naming rank 1, and the line printed once its World is gone; no rank may print FAILED or set
# off the watchdog.
# Called as: cmake -D MPIEXEC=... -D FLAGS="-n;4;..." -D TEST=... -D RANKS=4 -P crash_check.cmake
execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${TEST} crash
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 100)
set(all "${out}\n${err}")
message("${all}")
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "mpiexec did not end: ${rc}")
endif()
if(all MATCHES "FAILED|watchdog")
  message(FATAL_ERROR "a rank failed (above)")
endif()
math(EXPR last "${RANKS} - 1")
foreach(r RANGE 0 ${last})
  if(r EQUAL 1)
    continue()
  endif()
  foreach(line IN ITEMS "rank ${r}/${RANKS}: rank_crashes passed"
                        "World on rank ${r}: rank 1 stopped answering"
                        "rank ${r}: its World ended, status 0")
    string(FIND "${all}" "${line}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "rank ${r} did not print '${line}'")
    endif()
  endforeach()
endforeach()
