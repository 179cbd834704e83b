# kernels.cmake — the kernel libraries, their tests and the timing harness (included from the
# top-level CMakeLists.txt after dlcore is defined).
#   dlkernels       CPU twins (OpenBLAS), the timing harness and its descriptors; always built
#   dlsim-cuda      CUDA kernels (cuBLAS) for sm_80 and sm_90, only when nvcc is found: a loadable
#                   module (build/libdlsim-cuda.so) that kernels/cuda_loader.c opens on first use,
#                   so that no program pays for loading the CUDA libraries unless it uses a GPU
# dlcore links dlkernels (sim/cli/cmd_kbench.c times kernels; sim/kdb/ is the lookup).
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
if(OPENBLAS_FOUND)
  set(DL_BLAS PkgConfig::OPENBLAS)
else()
  find_library(OPENBLAS_LIB openblas REQUIRED)
  find_path(OPENBLAS_INC cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu/openblas-pthread)
  set(DL_BLAS ${OPENBLAS_LIB})
endif()

option(DLSIM_CUDA "Build the CUDA kernels when nvcc is found" ON)
set(DL_HAVE_CUDA OFF)
if(DLSIM_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(DL_HAVE_CUDA ON)
    endif()
  endif()
endif()

file(GLOB DL_KERNELS_CPU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cpu/*.c)
set(DL_KERNELS_SRC ${DL_KERNELS_CPU} ${CMAKE_SOURCE_DIR}/kernels/harness.c
    ${CMAKE_SOURCE_DIR}/kernels/bench.c ${CMAKE_SOURCE_DIR}/kernels/cuda_loader.c)
add_library(dlkernels STATIC ${DL_KERNELS_SRC})
# PIC: the CUDA module links the CPU library too (shape helpers)
set_target_properties(dlkernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(dlkernels PUBLIC ${CMAKE_SOURCE_DIR}/kernels)
target_compile_definitions(dlkernels PRIVATE
  DLSIM_CUDA_MODULE="${CMAKE_BINARY_DIR}/libdlsim-cuda.so")
if(OPENBLAS_INC)
  target_include_directories(dlkernels PRIVATE ${OPENBLAS_INC})
endif()
target_compile_options(dlkernels PRIVATE ${DL_WARN} ${DL_SAN_FLAGS})
target_link_libraries(dlkernels PUBLIC ${DL_BLAS} ${M_LIB} ${CMAKE_DL_LIBS})
target_link_options(dlkernels PUBLIC ${DL_SAN_FLAGS})

if(DL_HAVE_CUDA)
  file(GLOB DL_KERNELS_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
  add_library(dlsim-cuda MODULE ${DL_KERNELS_CU})
  set_target_properties(dlsim-cuda PROPERTIES CUDA_ARCHITECTURES "80;90"
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  target_include_directories(dlsim-cuda PRIVATE ${CMAKE_SOURCE_DIR}/kernels)
  target_compile_options(dlsim-cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
  target_link_libraries(dlsim-cuda PRIVATE CUDA::cudart CUDA::cublas dlkernels)
  message(STATUS "dlsim: CUDA kernels enabled (${CMAKE_CUDA_COMPILER}, sm ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "dlsim: CUDA kernels skipped (no nvcc or DLSIM_CUDA=OFF)")
endif()

target_link_libraries(dlcore PUBLIC dlkernels)

# Kernel tests: tests/kernels/test_*.c, registered through tests/unit/cu_main.c.
find_library(DL_CUNIT_LIB cunit)
file(GLOB DL_KERNEL_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/kernels/test_*.c)
foreach(src ${DL_KERNEL_TESTS})
  get_filename_component(name ${src} NAME_WE)
  if(name MATCHES "_cuda$" AND NOT DL_HAVE_CUDA)
    continue()
  endif()
  add_executable(${name} ${src} ${CMAKE_SOURCE_DIR}/tests/unit/cu_main.c)
  target_compile_options(${name} PRIVATE ${DL_WARN} ${DL_SAN_FLAGS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  target_link_libraries(${name} PRIVATE dlcore dlkernels ${DL_CUNIT_LIB})
  string(REGEX REPLACE "^test_" "" short ${name})
  add_test(NAME unit.${short} COMMAND ${name})
endforeach()
