# A short, reproducible fuzz run: fixed seed, bounded in runs and time, a fresh working corpus
# (the checked-in seeds are only read), and any allocation over 64 MB counts as a crash: no
# input of at most 4 KB may make the reader allocate what the file cannot back.
if(NOT EXISTS "${FUZZER}")
  message("SKIPPED: ${FUZZER} was not built (clang++ and libclang-rt-14-dev are needed; tools/bootstrap installs them)")
  return()
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus")
execute_process(
  COMMAND "${FUZZER}" -seed=1 -runs=300000 -max_total_time=45 -max_len=4096 -malloc_limit_mb=64
          -rss_limit_mb=2048 -artifact_prefix=${WORK_DIR}/ -print_final_stats=1
          "${WORK_DIR}/corpus" "${CORPUS}"
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" executed "${out}")
message("${executed}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the .npy fuzzer found a failure (exit ${status}); artifacts in ${WORK_DIR}:\n${out}")
endif()
