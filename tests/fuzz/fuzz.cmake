# Fuzz targets of the loaders (tests/README.md, "Fuzzing the loaders"). Each is built twice over:
#  - always, with driver.c: runs its seed corpus and the regression inputs once (ctest fuzz.*),
#    under the sanitizers when the build has them;
#  - with -DDLSIM_FUZZ=ON (clang): linked with libFuzzer, to fuzz.
set(DL_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
set(DL_FUZZ_SEEDS_workload ${CMAKE_SOURCE_DIR}/workloads ${CMAKE_SOURCE_DIR}/tests/real)
set(DL_FUZZ_SEEDS_platform ${CMAKE_SOURCE_DIR}/platforms ${CMAKE_SOURCE_DIR}/tests/smpi/star8.xml
    ${DL_FUZZ_DIR}/seeds/platform)
set(DL_FUZZ_SEEDS_kdb ${CMAKE_SOURCE_DIR}/kernels/db)
set(DL_FUZZ_SEEDS_sweep ${CMAKE_SOURCE_DIR}/analysis/studies
    ${CMAKE_SOURCE_DIR}/tests/e2e/data/sweep-small.json
    ${CMAKE_SOURCE_DIR}/tests/e2e/data/sweep-30.json)
set(DL_FUZZ_SEEDS_options ${DL_FUZZ_DIR}/seeds/options)
set(DL_FUZZ_SEEDS_chakra ${DL_FUZZ_DIR}/seeds/chakra)
foreach(t workload platform kdb sweep options chakra)
  if(DLSIM_FUZZ)
    add_executable(fuzz_${t} ${DL_FUZZ_DIR}/fuzz_${t}.c)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
    set(runs -runs=0) # ctest replays the corpus; fuzzing is run by hand (README)
  else()
    add_executable(fuzz_${t} ${DL_FUZZ_DIR}/fuzz_${t}.c ${DL_FUZZ_DIR}/driver.c)
    set(runs "")
  endif()
  target_compile_options(fuzz_${t} PRIVATE ${DL_WARN} ${DL_SAN_FLAGS})
  target_include_directories(fuzz_${t} PRIVATE ${DL_FUZZ_DIR})
  target_link_libraries(fuzz_${t} PRIVATE dlcore)
  file(GLOB regressions CONFIGURE_DEPENDS ${DL_FUZZ_DIR}/regressions/${t}-*)
  add_test(NAME fuzz.${t} COMMAND fuzz_${t} ${runs} ${DL_FUZZ_SEEDS_${t}} ${regressions})
  # a GLib warning (an error set twice, a critical) is a finding too
  set_tests_properties(fuzz.${t} PROPERTIES
                       ENVIRONMENT "DLSIM_DATA_DIR=${CMAKE_SOURCE_DIR};G_DEBUG=fatal-warnings")
endforeach()

# Every regression input through the command line: one line on stderr, exit status 2, no output.
add_test(NAME fuzz.regressions_cli
         COMMAND /usr/bin/python3 ${DL_FUZZ_DIR}/check_regressions.py $<TARGET_FILE:dlsim>)
set_tests_properties(fuzz.regressions_cli PROPERTIES
                     ENVIRONMENT "DLSIM_DATA_DIR=${CMAKE_SOURCE_DIR}"
                     PASS_REGULAR_EXPRESSION "PASSED: 0 failure" FAIL_REGULAR_EXPRESSION "FAIL ")
