# The CUDA backend (VLA_CUDA=ON), included by the top CMakeLists after `vla` exists.
# Host side in C (backends/cuda/cuda_backend.c), kernels in CUDA C++ (kernels/cuda/*.cu).
# The attention kernels are the library's own (no cuBLAS). The nn
# ops (vla/nn.h; cuda_nn.c, vla_nn.cu) do their matrix products with cuBLAS SGEMM in FP32 when
# the toolkit has it (VLA_HAVE_CUBLAS), else with their own tiled kernel.

# A fat binary for the T4 (sm_75) and Hopper (sm_90) unless the user chose architectures. The
# variable must be set before enable_language(CUDA), which would otherwise pick the compiler's
# default; `vla` already exists, so its CUDA_ARCHITECTURES property is set explicitly below.
if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "")
  set(_vla_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
else()
  set(_vla_cuda_archs "75;90")
  set(CMAKE_CUDA_ARCHITECTURES "${_vla_cuda_archs}")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

set(_vla_cuda_dir ${PROJECT_SOURCE_DIR}/kernels/cuda)
target_sources(vla PRIVATE
  ${PROJECT_SOURCE_DIR}/backends/cuda/cuda_backend.c
  ${PROJECT_SOURCE_DIR}/backends/cuda/cuda_nn.c
  ${PROJECT_SOURCE_DIR}/backends/cuda/cuda_grad.c
  ${_vla_cuda_dir}/vla_nn.cu
  ${_vla_cuda_dir}/vla_launch.cu
  ${_vla_cuda_dir}/vla_engine.cu
  ${_vla_cuda_dir}/vla_chunkpar.cu
  ${_vla_cuda_dir}/vla_chunkpar_gram.cu
  ${_vla_cuda_dir}/vla_chunkpar_factors.cu
  ${_vla_cuda_dir}/vla_chunkpar_walk.cu
  ${_vla_cuda_dir}/vla_chunkpar_output.cu
  ${_vla_cuda_dir}/vla_seq.cu
  ${_vla_cuda_dir}/vla_seq_regs.cu
  ${_vla_cuda_dir}/vla_norm.cu
  ${_vla_cuda_dir}/vla_softmax.cu
  ${_vla_cuda_dir}/vla_grad_launch.cu
  ${_vla_cuda_dir}/vla_grad_prep.cu
  ${_vla_cuda_dir}/vla_grad_seq.cu
  ${_vla_cuda_dir}/vla_grad_chunk.cu
  ${_vla_cuda_dir}/vla_grad_chunk_apart.cu
  ${_vla_cuda_dir}/vla_grad_softmax.cu
  ${_vla_cuda_dir}/vla_delta_paper.cu)
target_include_directories(vla PRIVATE ${_vla_cuda_dir})
target_compile_definitions(vla PRIVATE VLA_HAVE_CUDA)
# One CUDA runtime in the process: the shared one, which the benchmark links too.
target_link_libraries(vla PRIVATE CUDA::cudart)
# The .cu objects use the C++ runtime (static locals' guards); a static libvla's C consumers link
# it through this (a shared libvla carries it).
target_link_libraries(vla PRIVATE stdc++)
if(TARGET CUDA::cublas)
  target_link_libraries(vla PRIVATE CUDA::cublas)
  target_compile_definitions(vla PRIVATE VLA_HAVE_CUBLAS)
endif()
set_target_properties(vla PROPERTIES
  CUDA_ARCHITECTURES "${_vla_cuda_archs}"
  CUDA_RUNTIME_LIBRARY Shared
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_SEPARABLE_COMPILATION OFF)

# The options `vla` got so far (-Wall -Wextra -O3, the sanitizers) are host-compiler options
# that nvcc rejects: keep them for C, hand the warnings and sanitizers to nvcc's host compiler.
get_target_property(_vla_opts vla COMPILE_OPTIONS)
if(_vla_opts)
  set(_vla_c_opts "")
  foreach(_o IN LISTS _vla_opts)
    list(APPEND _vla_c_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_o}>")
  endforeach()
  set_target_properties(vla PROPERTIES COMPILE_OPTIONS "${_vla_c_opts}")
endif()
get_directory_property(_vla_dir_opts COMPILE_OPTIONS)
if(_vla_dir_opts)
  # add_compile_options() (VLA_SANITIZE) applies to every language: not to nvcc's own flags.
  set(_vla_dir_c_opts "")
  foreach(_o IN LISTS _vla_dir_opts)
    list(APPEND _vla_dir_c_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_o}>")
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_vla_dir_c_opts}")
endif()
target_compile_options(vla PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(VLA_SANITIZE)
  target_compile_options(vla PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fsanitize=address,-fsanitize=undefined,-fno-omit-frame-pointer>)
endif()
