# calib.cmake — the ping-pong program behind `dlsim platform --calibrate` and its tests
# (included by the top-level CMakeLists.txt after include(CTest)).
#   dlsim-pingpong   kernels/calib_pingpong.c built with the system MPI (mpicc), run by
#                    sim/platform/calibrate.c under mpirun; found at <build dir>/dlsim-pingpong
find_package(MPI COMPONENTS C)
if(MPI_C_FOUND)
  add_executable(dlsim-pingpong ${CMAKE_SOURCE_DIR}/kernels/calib_pingpong.c)
  target_compile_options(dlsim-pingpong PRIVATE ${DL_WARN})
  target_link_libraries(dlsim-pingpong PRIVATE MPI::MPI_C)
  set_target_properties(dlsim-pingpong PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(TARGET dlsim)
    add_dependencies(dlsim dlsim-pingpong)
  endif()

  if(BUILD_TESTING)
    # A quick calibration (8 sizes), then the written platform carries a closed-form run.
    add_test(NAME calib.quick_platform
             COMMAND sh -c "\"$1\" platform --calibrate --quick --ranks 2 --out \"$2\" && \"$1\" run --mode analytic --platform \"$2\" --workload mlp-small --gpus 2"
                     calib $<TARGET_FILE:dlsim> ${CMAKE_BINARY_DIR}/calib-quick.xml)
    set_tests_properties(calib.quick_platform PROPERTIES
                         ENVIRONMENT "DLSIM_DATA_DIR=${CMAKE_SOURCE_DIR}"
                         PASS_REGULAR_EXPRESSION "written to .*iteration " TIMEOUT 120)
  endif()
else()
  message(STATUS "dlsim: no MPI C compiler found: dlsim-pingpong (platform --calibrate) skipped")
endif()
