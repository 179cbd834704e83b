# smpi.cmake — the SMPI executor dlsim-smpi (included by the top-level CMakeLists.txt).
# coll_info.c is the MPI-free half of coll.h (names, defaults, byte counts): the host library
# needs it too, so it is added to dlcore here (its name puts it outside dlcore's glob).
target_sources(dlcore PRIVATE ${CMAKE_SOURCE_DIR}/sim/coll_info.c)

file(GLOB DLSIM_COLL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/sim/coll*.c)
file(GLOB DLSIM_SMPI_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/sim/smpi_*.c)
# The executor plans its own rank: the pure modules it shares with the driver.
set(DLSIM_EXEC_CORE_SRC config.c context.c dl_common.c exec.c analytic.c costmodel.c launch.c
    gpuspec.c kdb.c ktime.c plan.c platform.c platform_gen.c record.c result.c stream.c workload.c)
list(TRANSFORM DLSIM_EXEC_CORE_SRC PREPEND ${CMAKE_SOURCE_DIR}/sim/)
smpi_build(dlsim-smpi ${CMAKE_BINARY_DIR}/dlsim-smpi ${DLSIM_SMPI_SRC} ${DLSIM_COLL_SRC}
           ${DLSIM_EXEC_CORE_SRC})
