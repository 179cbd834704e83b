# real.cmake — the real executor dlsim-real (included by the top-level CMakeLists.txt after
# sim/smpi.cmake): the planner's op lists on the system's MPI with real buffers and the CPU twins
# of the kernels. Its sources are sim/real_*.c and the MPI collectives sim/coll*.c except
# coll_info.c (already in dlcore); it links dlcore and dlkernels.
find_package(MPI COMPONENTS C)
find_program(DLSIM_MPIRUN_EXE NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})

if(MPI_C_FOUND AND DLSIM_MPIRUN_EXE AND TARGET dlkernels)
  target_compile_definitions(dlcore PRIVATE DLSIM_MPIRUN="${DLSIM_MPIRUN_EXE}")
  file(GLOB DLSIM_REAL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/sim/real_*.c)
  file(GLOB DLSIM_REAL_COLL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/sim/coll*.c)
  list(FILTER DLSIM_REAL_COLL_SRC EXCLUDE REGEX "/coll_info\\.c$")
  add_executable(dlsim-real ${DLSIM_REAL_SRC} ${DLSIM_REAL_COLL_SRC})
  target_compile_options(dlsim-real PRIVATE ${DL_WARN} ${DL_SAN_FLAGS})
  target_link_libraries(dlsim-real PRIVATE dlcore dlkernels MPI::MPI_C)
  add_dependencies(dlsim dlsim-real) # `dlsim run --mode real` launches it

  # Numerics of every strategy against the serial run (tests/real/check_real.py).
  add_test(NAME real.numerics
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/real/check_real.py
                   $<TARGET_FILE:dlsim>)
  set_tests_properties(real.numerics PROPERTIES ENVIRONMENT "DLSIM_DATA_DIR=${CMAKE_SOURCE_DIR}"
                       PASS_REGULAR_EXPRESSION "PASSED: 0 failure" FAIL_REGULAR_EXPRESSION "FAIL ")
else()
  message(STATUS "dlsim: real executor skipped (no MPI C compiler or mpirun found)")
endif()
