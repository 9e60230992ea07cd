# PyTorch discovery for the peer plugins (torch_sdpa_*, torch_flex, fa4, vsa_triton), shared by
# their folders. Used by plugins/kernels/torch_sdpa (include + lca_probe_torch()) and by
# python_peer.cmake beside this file (torch_flex, fa4, vsa).
# Rule: only the probe is shared; find_package(Torch) and find_package(Python3) run inside each
# plugin's own folder, so that Torch's variables and flags stay out of the rest of the build.
#
# Options (cache):
#   LCA_WITH_TORCH    AUTO (default: build the peers where torch is found), ON (fail without it), OFF
#   LCA_TORCH_PYTHON  the python3 whose torch to use (default: $ENV{LCA_TORCH_PYTHON}, else python3
#                     on PATH); it is asked for torch.utils.cmake_prefix_path
#   Torch_DIR         TorchConfig.cmake's folder, if you would rather point at it yourself
include_guard(GLOBAL)

set(LCA_WITH_TORCH AUTO CACHE STRING "PyTorch peer plugins: AUTO (when torch is found), ON (required), OFF")
set_property(CACHE LCA_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)
set(LCA_TORCH_PYTHON "" CACHE FILEPATH "python3 with torch for the PyTorch peers (default: python3 on PATH)")

# lca_probe_torch(): sets in the caller's scope
#   LCA_TORCH_FOUND         TRUE when a CUDA build of torch answered
#   LCA_TORCH_WHY           why not, in one line (empty when found)
#   LCA_TORCH_PYTHON_EXE    the interpreter that answered, as its sys.executable (a venv's python
#                           stays the venv's, a pyenv shim becomes the real binary)
#   LCA_TORCH_PREFIX        torch.utils.cmake_prefix_path (for find_package(Torch))
#   LCA_TORCH_VERSION, LCA_TORCH_CUDA_VERSION
# The answer is computed once per configure and reused by every caller.
function(lca_probe_torch)
  get_property(done GLOBAL PROPERTY LCA_TORCH_PROBED)
  if(NOT done)
    _lca_probe_torch_once()
    set_property(GLOBAL PROPERTY LCA_TORCH_PROBED TRUE)
  endif()
  foreach(v FOUND WHY PYTHON_EXE PREFIX VERSION CUDA_VERSION)
    get_property(value GLOBAL PROPERTY LCA_TORCH_${v})
    set(LCA_TORCH_${v} "${value}" PARENT_SCOPE)
  endforeach()
endfunction()

function(_lca_torch_result found why)
  set_property(GLOBAL PROPERTY LCA_TORCH_FOUND ${found})
  set_property(GLOBAL PROPERTY LCA_TORCH_WHY "${why}")
  string(TOUPPER "${LCA_WITH_TORCH}" mode)
  if(NOT found AND mode STREQUAL "ON")
    message(FATAL_ERROR "lca: LCA_WITH_TORCH=ON but ${why}")
  endif()
endfunction()

function(_lca_probe_torch_once)
  string(TOUPPER "${LCA_WITH_TORCH}" mode)
  if(mode STREQUAL "OFF" OR mode STREQUAL "FALSE" OR mode STREQUAL "NO" OR mode STREQUAL "0")
    _lca_torch_result(FALSE "LCA_WITH_TORCH=OFF")
    return()
  endif()
  if(NOT LCA_HAVE_CUDA)
    _lca_torch_result(FALSE "no CUDA toolchain (the PyTorch peers run on CUDA devices only)")
    return()
  endif()

  set(python "${LCA_TORCH_PYTHON}")
  if(NOT python AND DEFINED ENV{LCA_TORCH_PYTHON})
    set(python "$ENV{LCA_TORCH_PYTHON}")
  endif()
  if(NOT python)
    find_program(LCA_TORCH_PYTHON_ON_PATH NAMES python3 python NO_CACHE)
    set(python "${LCA_TORCH_PYTHON_ON_PATH}")
  endif()
  if(NOT python)
    _lca_torch_result(FALSE "no python3 on PATH (set LCA_TORCH_PYTHON to a python with torch)")
    return()
  endif()
  set_property(GLOBAL PROPERTY LCA_TORCH_PYTHON_EXE "${python}")

  # One line each: cmake prefix, version, the interpreter itself (sys.executable: a pyenv shim
  # becomes the real binary, a venv's python stays the venv's), CUDA version ("" for CPU-only).
  execute_process(
    COMMAND "${python}" -c "import sys, torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__); print(sys.executable); print(torch.version.cuda or '')"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 180
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    string(STRIP "${err}" err)
    string(REGEX REPLACE ".*\n" "" last "${err}")  # the exception line
    _lca_torch_result(FALSE "${python} cannot import torch (${last}); install torch there or set LCA_TORCH_PYTHON")
    return()
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  list(LENGTH lines n)
  if(n LESS 3)
    _lca_torch_result(FALSE "${python} gave no torch cmake prefix (got: ${out})")
    return()
  endif()
  list(GET lines 0 prefix)
  list(GET lines 1 version)
  list(GET lines 2 executable)
  set(cuda "")
  if(n GREATER 3)
    list(GET lines 3 cuda)
  endif()
  if(executable)
    set_property(GLOBAL PROPERTY LCA_TORCH_PYTHON_EXE "${executable}")
  endif()
  set_property(GLOBAL PROPERTY LCA_TORCH_PREFIX "${prefix}")
  set_property(GLOBAL PROPERTY LCA_TORCH_VERSION "${version}")
  set_property(GLOBAL PROPERTY LCA_TORCH_CUDA_VERSION "${cuda}")
  if(cuda STREQUAL "")
    _lca_torch_result(FALSE "torch ${version} at ${python} is a CPU-only build (the peers need a CUDA build)")
    return()
  endif()
  _lca_torch_result(TRUE "")
endfunction()

# lca_torch_find_package(<found_var> <why_var>): find_package(Torch) in the caller's scope
# (a macro, so TORCH_LIBRARIES and the imported targets land there). TorchConfig stops the whole
# configure on an error, so it is first tried in a child CMake (once per torch, cached): a torch
# whose CMake files do not configure here leaves the peers out with the reason, and the rest of
# lca builds. TORCH_CUDA_ARCH_LIST follows CMAKE_CUDA_ARCHITECTURES, so that TorchConfig does not
# try to detect GPUs (it cannot on a machine without one).
macro(lca_torch_find_package found_var why_var)
  set(${found_var} FALSE)
  set(${why_var} "")
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(_lca_arch_list "")
    foreach(_lca_arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      string(REGEX REPLACE "-(real|virtual)$" "" _lca_arch "${_lca_arch}")
      if(_lca_arch MATCHES "^([0-9]+)([0-9])(a?)$")
        list(APPEND _lca_arch_list "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
      endif()
    endforeach()
    if(NOT _lca_arch_list)
      set(_lca_arch_list "9.0")
    endif()
    set(TORCH_CUDA_ARCH_LIST "${_lca_arch_list}")
  endif()
  if(NOT Torch_DIR)
    list(PREPEND CMAKE_PREFIX_PATH "${LCA_TORCH_PREFIX}")
  endif()
  _lca_torch_trial("${TORCH_CUDA_ARCH_LIST}" _lca_trial_ok _lca_trial_why)
  if(NOT _lca_trial_ok)
    set(${why_var} "${_lca_trial_why}")
  else()
    # TorchConfig warns about CMAKE_CUDA_ARCHITECTURES and ignores it; the peers' folders build
    # no CUDA code of their own, so it goes, in the caller's folder only.
    set(CMAKE_CUDA_ARCHITECTURES "")
    find_package(Torch QUIET)
    if(TORCH_FOUND OR Torch_FOUND)
      set(${found_var} TRUE)
    else()
      set(${why_var} "find_package(Torch) found no TorchConfig.cmake under ${LCA_TORCH_PREFIX} (set Torch_DIR)")
    endif()
  endif()
  string(TOUPPER "${LCA_WITH_TORCH}" _lca_mode)
  if(NOT ${found_var} AND _lca_mode STREQUAL "ON")
    message(FATAL_ERROR "lca: LCA_WITH_TORCH=ON but ${${why_var}}")
  endif()
endmacro()

function(_lca_torch_trial arch_list ok_var why_var)
  set(key "${LCA_TORCH_PREFIX}|${Torch_DIR}|${LCA_TORCH_VERSION}|${arch_list}|${CMAKE_CUDA_COMPILER}")
  if(DEFINED LCA_TORCH_TRIAL_KEY AND LCA_TORCH_TRIAL_KEY STREQUAL key)
    set(${ok_var} ${LCA_TORCH_TRIAL_OK} PARENT_SCOPE)
    set(${why_var} "${LCA_TORCH_TRIAL_WHY}" PARENT_SCOPE)
    return()
  endif()
  set(dir ${CMAKE_BINARY_DIR}/lca_torch_trial)
  file(REMOVE_RECURSE ${dir})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${CMAKE_SOURCE_DIR}/plugins/kernels/torch_common/trial -B ${dir}
            -G ${CMAKE_GENERATOR} "-DCMAKE_PREFIX_PATH=${LCA_TORCH_PREFIX}" "-DTorch_DIR=${Torch_DIR}"
            "-DCMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER}" "-DTORCH_CUDA_ARCH_LIST=${arch_list}"
            "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  set(ok TRUE)
  set(why "")
  if(NOT rc EQUAL 0)
    set(ok FALSE)
    string(REGEX MATCH "CMake Error[^\n]*\n[^\n]*" first "${err}")
    string(REGEX REPLACE "[ \n]+" " " first "${first}")
    set(why "TorchConfig.cmake of torch ${LCA_TORCH_VERSION} does not configure here (${first}; see ${dir})")
  endif()
  set(LCA_TORCH_TRIAL_KEY "${key}" CACHE INTERNAL "")
  set(LCA_TORCH_TRIAL_OK ${ok} CACHE INTERNAL "")
  set(LCA_TORCH_TRIAL_WHY "${why}" CACHE INTERNAL "")
  set(${ok_var} ${ok} PARENT_SCOPE)
  set(${why_var} "${why}" PARENT_SCOPE)
endfunction()
