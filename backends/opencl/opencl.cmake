# The OpenCL backend (included by the top CMakeLists.txt when VLA_OPENCL is ON, OpenCL found).
# Adds the host sources to `vla`, links OpenCL::OpenCL, defines VLA_HAVE_OPENCL for the
# registry, and embeds kernels/opencl/*.cl into the library at build time (embed_cl.cmake).
#
# CLBlast (libclblast-dev, optional): its batched SGEMM does the scan levels of the scan and
# two-level algorithms where it is found, measured 3-4.4x faster end to end than the own compose kernel on
# PoCL (ocl_ops.c's header comment; benchmarks/results/2026-11-30-opencl-pocl-vs-cpu/README.md).
find_package(OpenCL REQUIRED)
find_package(CLBlast QUIET)
if(CLBlast_FOUND)
  set(_vla_clblast_default ON)
else()
  set(_vla_clblast_default OFF)
endif()
option(VLA_OPENCL_CLBLAST "Use CLBlast's batched SGEMM in the OpenCL backend's scans" ${_vla_clblast_default})
if(VLA_OPENCL_CLBLAST)
  if(NOT CLBlast_FOUND)
    message(FATAL_ERROR "VLA_OPENCL_CLBLAST=ON but CLBlast was not found (apt-get install libclblast-dev)")
  endif()
  target_compile_definitions(vla PRIVATE VLA_HAVE_CLBLAST)
  target_link_libraries(vla PRIVATE clblast)
endif()
message(STATUS "libvla: OpenCL CLBlast ${VLA_OPENCL_CLBLAST}")

set(_vla_cl_dir ${PROJECT_SOURCE_DIR}/kernels/opencl)
set(_vla_cl_sources
  ${_vla_cl_dir}/common.cl
  ${_vla_cl_dir}/prep.cl
  ${_vla_cl_dir}/softmax.cl
  ${_vla_cl_dir}/linear_delta.cl
  ${_vla_cl_dir}/vla.cl
  ${_vla_cl_dir}/grad_prep.cl
  ${_vla_cl_dir}/grad_softmax.cl
  ${_vla_cl_dir}/grad_linear_delta.cl
  ${_vla_cl_dir}/grad_vla.cl
  ${_vla_cl_dir}/delta_paper.cl
  ${_vla_cl_dir}/chunkpar.cl
  ${_vla_cl_dir}/grad_chunk.cl
  ${_vla_cl_dir}/nn.cl)
set(_vla_cl_generated ${CMAKE_CURRENT_BINARY_DIR}/vla_opencl_kernels.c)
add_custom_command(
  OUTPUT ${_vla_cl_generated}
  COMMAND ${CMAKE_COMMAND} -DOUT=${_vla_cl_generated} "-DSOURCES=${_vla_cl_sources}"
          -P ${CMAKE_CURRENT_LIST_DIR}/embed_cl.cmake
  DEPENDS ${_vla_cl_sources} ${CMAKE_CURRENT_LIST_DIR}/embed_cl.cmake
  COMMENT "Embedding the OpenCL kernels"
  VERBATIM)

target_sources(vla PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ocl_backend.c
  ${CMAKE_CURRENT_LIST_DIR}/ocl_ops.c
  ${CMAKE_CURRENT_LIST_DIR}/ocl_chunkpar.c
  ${CMAKE_CURRENT_LIST_DIR}/ocl_grad.c
  ${CMAKE_CURRENT_LIST_DIR}/ocl_grad_chunk.c
  ${CMAKE_CURRENT_LIST_DIR}/ocl_nn.c
  ${_vla_cl_generated})
target_include_directories(vla PRIVATE ${CMAKE_CURRENT_LIST_DIR})
target_compile_definitions(vla PRIVATE VLA_HAVE_OPENCL CL_TARGET_OPENCL_VERSION=120)
target_link_libraries(vla PRIVATE OpenCL::OpenCL)
