# The CUDA backend, included by CMakeLists.txt when PAGELLM_CUDA=ON. The CPU build never reads this file.
#
# Targets:
#   pagellm_cuda_kernels  static library of the kernels in src/backends/cuda/**/*.cu; depends only on the
#                         CUDA runtime, cuBLASLt and cuBLAS (so device-side test binaries stay portable)
#   pagellm_cuda          the CUDA runner (src/runner/cuda_*.cpp) on top of the kernels and pagellm_core
#   cuda_kernel_tests     self-checking kernel tests + benchmarks against CPU references (tests/device/)
#   cuda_runner_check     the runner end to end (stories260K vs the CPU runner, decode throughput)
#   cuda_engine_check     the engine on the GPU: batched vs solo, preemption, prefix caching, graphs
#
# Each kernel family and dtype lives in its own translation unit with few template instantiations so
# that the CI compile (2 cores, no GPU) stays within a few minutes.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# CMake 3.25 cannot pass C++20 to nvcc; the kernels need only C++17.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# sm_90a for H100/H200 (wgmma-capable), sm_80 for A100. Set explicitly rather than through
# CMAKE_CUDA_ARCHITECTURES so the arch-specific "a" target is used with the -gencode form.
set(CMAKE_CUDA_ARCHITECTURES OFF)
set(PAGELLM_CUDA_GENCODE
    "-gencode=arch=compute_90a,code=sm_90a"
    "-gencode=arch=compute_80,code=sm_80")

file(GLOB_RECURSE PAGELLM_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/src/backends/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/backends/cuda/*.cpp)
add_library(pagellm_cuda_kernels STATIC ${PAGELLM_CUDA_KERNEL_SOURCES})
target_include_directories(pagellm_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_compile_options(pagellm_cuda_kernels PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${PAGELLM_CUDA_GENCODE} --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter -Werror=all-warnings>
    $<$<COMPILE_LANGUAGE:CXX>:${PAGELLM_WARNINGS}>)
target_link_libraries(pagellm_cuda_kernels PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)

file(GLOB PAGELLM_CUDA_RUNNER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/runner/cuda_*.cpp
     ${CMAKE_SOURCE_DIR}/src/parallel/nccl_*.cpp)
# NCCL comes with the CUDA toolkit on the development machines (/usr/local/cuda/lib64); on the GPU
# machines it is found at run time through LD_LIBRARY_PATH (libnccl.so.2).
find_library(PAGELLM_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
if(PAGELLM_CUDA_RUNNER_SOURCES)
  add_library(pagellm_cuda STATIC ${PAGELLM_CUDA_RUNNER_SOURCES})
  target_compile_options(pagellm_cuda PRIVATE ${PAGELLM_WARNINGS})
  target_compile_definitions(pagellm_cuda PUBLIC PAGELLM_HAVE_CUDA=1)
  target_link_libraries(pagellm_cuda PUBLIC pagellm_core pagellm_cuda_kernels ${PAGELLM_NCCL_LIB})
  # The loader (in pagellm_core) builds the CUDA runner for --device cuda.
  target_compile_definitions(pagellm_core PRIVATE PAGELLM_HAVE_CUDA=1)
  target_include_directories(pagellm_core PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  # End-to-end runner checks and first performance numbers, run on the GPU machine.
  add_executable(cuda_runner_check ${CMAKE_SOURCE_DIR}/tests/device/runner_check.cpp
                                   ${CMAKE_SOURCE_DIR}/tests/device/runner_check_spec.cpp
                                   ${CMAKE_SOURCE_DIR}/tests/device/runner_check_fp8_moe.cpp
                                   ${CMAKE_SOURCE_DIR}/tests/device/runner_check_quantized.cpp)
  target_compile_options(cuda_runner_check PRIVATE ${PAGELLM_WARNINGS})
  target_link_libraries(cuda_runner_check PRIVATE pagellm_core pagellm_cuda)
  # The engine's behaviours (batching, preemption, prefix caching, graphs vs eager) on the GPU.
  add_executable(cuda_engine_check ${CMAKE_SOURCE_DIR}/tests/device/engine_check.cpp)
  target_compile_options(cuda_engine_check PRIVATE ${PAGELLM_WARNINGS})
  # pagellm_core first: its loader calls into pagellm_cuda, which must come after it on the link line.
  target_link_libraries(cuda_engine_check PRIVATE pagellm_core pagellm_cuda)
else()
  add_library(pagellm_cuda INTERFACE)
  target_link_libraries(pagellm_cuda INTERFACE pagellm_cuda_kernels)
endif()

# Device tests: a standalone driver (no gtest, no Debian libraries) so it runs on the GPU machine.
# The GPU sampler is checked against the CPU sampler itself: engine/sampler.cpp (and the error type
# it throws) is compiled in directly, as in pagellm_core (no FMA contraction), since both need only
# the standard library; so are the rotary frequencies (backends/cpu/rope_frequencies.cpp).
add_executable(cuda_kernel_tests ${CMAKE_SOURCE_DIR}/tests/device/kernel_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/elementwise_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/kernel_reference.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/attention_window_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/convert_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/sampler_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/fp8_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/kv_fp8_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/fp8_fused_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/fp8_bench.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/int_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/w8a8_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/moe_tests.cpp
                                 ${CMAKE_SOURCE_DIR}/tests/device/kernel_bench.cu
                                 ${CMAKE_SOURCE_DIR}/src/common/dtype.cpp  # host reference of convert.cu
                                 ${CMAKE_SOURCE_DIR}/src/backends/cpu/rope_frequencies.cpp
                                 ${CMAKE_SOURCE_DIR}/src/engine/sampler.cpp
                                 ${CMAKE_SOURCE_DIR}/src/common/error.cpp)
target_include_directories(cuda_kernel_tests PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_compile_options(cuda_kernel_tests PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${PAGELLM_CUDA_GENCODE}>
    $<$<COMPILE_LANGUAGE:CXX>:${PAGELLM_WARNINGS} -ffp-contract=off>)
target_link_libraries(cuda_kernel_tests PRIVATE pagellm_cuda_kernels Threads::Threads)

# NCCL bus bandwidth on the GPUs of one host (the ceilings of tensor-parallel figures).
add_executable(nccl_bench ${CMAKE_SOURCE_DIR}/tests/device/nccl_bench.cpp)
target_link_libraries(nccl_bench PRIVATE pagellm_cuda_kernels CUDA::cudart ${PAGELLM_NCCL_LIB})
