# lca_add_python_peer(): one kernel plugin that runs a Python peer through the embedded CPython
# interpreter (python_runtime, python_peer). Used by plugins/kernels/torch_flex, fa4 and vsa.
# Rule: call it from the plugin's own folder; Python3's variables and targets stay in that folder.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/torch.cmake)

# lca_add_python_peer(NAME <name> MANIFEST <json> SOURCES <cpp...> PYTHON <py...>
#                     [NOT_BUILT_BECAUSE <reason>] [MESSAGE <text>])
# Builds lca_<name> where a CUDA build of torch is found (lca_probe_torch) and that interpreter's
# development files are there (Python.h and a shared libpython: python3-dev on Debian/Ubuntu) and
# torch's DLPack header; no LibTorch is linked. Otherwise prints "lca: <name> not built: <why>"
# and adds nothing, so the caller checks `if(NOT TARGET lca_<name>)`. With LCA_WITH_TORCH=ON a
# missing Python or DLPack header stops the configure.
#   SOURCES           the plugin's own sources; python_runtime.cpp, python_dlpack.cpp and
#                     python_peer.cpp are added
#   PYTHON            files copied to python/ beside the plugin at build time, and installed there
#   NOT_BUILT_BECAUSE a reason of the caller's own (empty: none), reported where torch was found;
#                     it never stops the configure
#   MESSAGE           what follows "lca: <name> " once it is built; @LCA_TORCH_VERSION@,
#                     @Python3_VERSION@ and @LCA_TORCH_PYTHON_EXE@ are filled in (default: torch,
#                     Python and the interpreter)
# The plugin gets LCA_PEER_PYTHON (the interpreter that has torch, as a string literal) and the
# target lca_<name>_python, which copies PYTHON; a caller adds its own files to that target.
function(lca_add_python_peer)
  # PARSE_ARGV keeps a ";" inside MESSAGE as text.
  cmake_parse_arguments(PARSE_ARGV 0 P "" "NAME;MANIFEST;NOT_BUILT_BECAUSE;MESSAGE" "SOURCES;PYTHON")
  if(NOT P_NAME OR NOT P_MANIFEST OR NOT P_SOURCES OR NOT P_PYTHON)
    message(FATAL_ERROR "lca_add_python_peer: NAME, MANIFEST, SOURCES and PYTHON are required")
  endif()
  if(NOT DEFINED P_MESSAGE)
    set(P_MESSAGE "with torch @LCA_TORCH_VERSION@, embedding Python @Python3_VERSION@ (@LCA_TORCH_PYTHON_EXE@)")
  endif()

  lca_probe_torch()
  if(NOT LCA_TORCH_FOUND)
    message(STATUS "lca: ${P_NAME} not built: ${LCA_TORCH_WHY}")
    return()
  endif()
  if(P_NOT_BUILT_BECAUSE)
    message(STATUS "lca: ${P_NAME} not built: ${P_NOT_BUILT_BECAUSE}")
    return()
  endif()

  # The interpreter that has torch, and its own headers and libpython.
  set(Python3_EXECUTABLE "${LCA_TORCH_PYTHON_EXE}")
  find_package(Python3 COMPONENTS Interpreter Development.Embed QUIET)
  set(why "")
  if(NOT Python3_Development.Embed_FOUND)
    set(why "no Python ${Python3_VERSION} development files (Python.h, libpython) for ${LCA_TORCH_PYTHON_EXE}; install python3-dev (Debian/Ubuntu) or point LCA_TORCH_PYTHON at a python that has them")
  elseif(NOT Python3_LIBRARIES MATCHES "\\.so")
    set(why "${LCA_TORCH_PYTHON_EXE} has only a static libpython (${Python3_LIBRARIES}); torch's extension modules need a shared one (Python built with --enable-shared)")
  else()
    find_path(dlpack_dir ATen/dlpack.h HINTS "${LCA_TORCH_PREFIX}/../../include" NO_DEFAULT_PATH NO_CACHE)
    if(NOT dlpack_dir)
      set(why "torch's ATen/dlpack.h not found under ${LCA_TORCH_PREFIX}/../../include")
    endif()
  endif()
  if(why)
    if(LCA_WITH_TORCH STREQUAL "ON")
      message(FATAL_ERROR "lca: LCA_WITH_TORCH=ON but ${P_NAME} cannot be built: ${why}")
    endif()
    message(STATUS "lca: ${P_NAME} not built: ${why}")
    return()
  endif()
  string(CONFIGURE "${P_MESSAGE}" announced @ONLY)
  message(STATUS "lca: ${P_NAME} ${announced}")

  set(common ${CMAKE_SOURCE_DIR}/plugins/kernels/torch_common)
  set(target lca_${P_NAME})
  lca_add_plugin(NAME ${P_NAME}
    MANIFEST ${P_MANIFEST}
    SOURCES ${P_SOURCES} ${common}/python_runtime.cpp ${common}/python_dlpack.cpp ${common}/python_peer.cpp
    LIBRARIES Python3::Python nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS})
  target_include_directories(${target} PRIVATE ${CMAKE_SOURCE_DIR})
  target_include_directories(${target} SYSTEM PRIVATE ${dlpack_dir})
  target_compile_definitions(${target} PRIVATE LCA_PEER_PYTHON="${LCA_TORCH_PYTHON_EXE}")
  # libpython is found at run time where it was found at build time (a venv's or pyenv's too).
  set_target_properties(${target} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

  # The Python side lives beside the plugin, in python/.
  set(python_src "")
  foreach(file IN LISTS P_PYTHON)
    get_filename_component(file_abs ${file} ABSOLUTE)
    list(APPEND python_src ${file_abs})
  endforeach()
  get_target_property(out ${target} LIBRARY_OUTPUT_DIRECTORY)
  add_custom_target(${target}_python ALL
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}/python
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${python_src} ${out}/python/
    DEPENDS ${python_src})
  add_dependencies(${target} ${target}_python)
  install(FILES ${python_src} DESTINATION ${LCA_INSTALL_PLUGIN_DIR}/python)
endfunction()
