# smpi.cmake — the SMPI executor dlsim-smpi (included by the top-level CMakeLists.txt): this
# folder's sources, the collectives' MPI code and the MPI-free modules, compiled by smpicc.
file(GLOB DLSIM_SMPI_SRC CONFIGURE_DEPENDS ${DL_SIM}/exec/smpi/*.c ${DL_SIM}/exec/smpi/*.cpp)
smpi_build(dlsim-smpi ${CMAKE_BINARY_DIR}/dlsim-smpi ${DLSIM_SMPI_SRC} ${DL_COLL_MPI_SRC}
           ${DL_COLL_INFO_SRC} ${DL_PURE_SRC})

# Preloaded into smpimain by the driver (launch.c): SMPI's per-call CPU-clock reads without a
# system call. No sanitizer flags: smpimain has none.
add_library(dlsim-cputime SHARED ${DL_SIM}/exec/smpi/preload/cputime.c)
target_compile_options(dlsim-cputime PRIVATE ${DL_WARN})
set_target_properties(dlsim-cputime PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
                      PREFIX "lib" OUTPUT_NAME dlsim-cputime)
