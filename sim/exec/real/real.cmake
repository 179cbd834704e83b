# real.cmake — the real executor dlsim-real (included by the top-level CMakeLists.txt): the
# planner's op lists on the system's MPI with real buffers and the CPU twins of the kernels. Its
# sources are this folder's and the collectives' MPI code; it links dlcore and dlkernels.
find_package(MPI COMPONENTS C)
find_program(DLSIM_MPIRUN_EXE NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})

if(MPI_C_FOUND AND DLSIM_MPIRUN_EXE AND TARGET dlkernels)
  target_compile_definitions(dlcore PRIVATE DLSIM_MPIRUN="${DLSIM_MPIRUN_EXE}")
  file(GLOB DLSIM_REAL_SRC CONFIGURE_DEPENDS ${DL_SIM}/exec/real/*.c)
  add_executable(dlsim-real ${DLSIM_REAL_SRC} ${DL_COLL_MPI_SRC})
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
