# smpi.cmake — the SMPI executor dlsim-smpi (included by the top-level CMakeLists.txt): this
# folder's sources, the collectives' MPI code and the MPI-free modules, compiled by smpicc.
file(GLOB DLSIM_SMPI_SRC CONFIGURE_DEPENDS ${DL_SIM}/exec/smpi/*.c ${DL_SIM}/exec/smpi/*.cpp)
smpi_build(dlsim-smpi ${CMAKE_BINARY_DIR}/dlsim-smpi ${DLSIM_SMPI_SRC} ${DL_COLL_MPI_SRC}
           ${DL_COLL_INFO_SRC} ${DL_PURE_SRC})
