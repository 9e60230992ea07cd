# lca_add_plugin(NAME <name> MANIFEST <file.json> SOURCES <src...>
#                [OUTPUT_DIR <dir>] [DATA <files...>] [LIBRARIES <targets...>] [NO_INSTALL])
# Builds lib<lca_NAME>.so as a MODULE that exports lca_plugin_entry and nothing else (hidden
# visibility for its own code, and on Linux a linker version script for what static archives
# bring in) and puts the manifest (and DATA files, under data/) beside it, in the build tree and on
# install.
# NO_INSTALL: build tree only, no install rules (test fixtures, deliberately broken plugins).
include_guard(GLOBAL)

function(lca_add_plugin)
  cmake_parse_arguments(P "NO_INSTALL" "NAME;MANIFEST;OUTPUT_DIR" "SOURCES;DATA;LIBRARIES" ${ARGN})
  if(NOT P_NAME OR NOT P_MANIFEST OR NOT P_SOURCES)
    message(FATAL_ERROR "lca_add_plugin: NAME, MANIFEST and SOURCES are required")
  endif()
  if(NOT P_OUTPUT_DIR)
    if(DEFINED LCA_PLUGIN_OUTPUT_DIR)
      set(P_OUTPUT_DIR ${LCA_PLUGIN_OUTPUT_DIR})
    else()
      set(P_OUTPUT_DIR ${CMAKE_BINARY_DIR}/plugins)
    endif()
  endif()
  get_filename_component(manifest_abs ${P_MANIFEST} ABSOLUTE)
  set(target lca_${P_NAME})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE lca::sdk ${P_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    CXX_STANDARD 20
    CXX_STANDARD_REQUIRED ON
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIR})
  # Hidden visibility does not reach code from static archives: a toolchain that links libstdc++
  # statically (some do by default) would export that copy of it, and a library loaded in the
  # plugin's scope (LibTorch, loaded by the torch_sdpa plugins) would then bind part of its
  # libstdc++ calls to the plugin's copy and part to the shared one: std::locale's reference
  # counts then cross the two copies and free() aborts. The version script keeps every symbol but
  # the entry point inside the plugin.
  if(UNIX AND NOT APPLE)
    set(exports ${CMAKE_BINARY_DIR}/lca_plugin_exports.map)
    if(NOT EXISTS ${exports})
      file(WRITE ${exports} "{\n  global: lca_plugin_entry;\n  local: *;\n};\n")
    endif()
    target_link_options(${target} PRIVATE "LINKER:--version-script=${exports}")
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${exports})
  endif()
  get_filename_component(manifest_name ${manifest_abs} NAME)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${manifest_abs} ${P_OUTPUT_DIR}/${manifest_name}
    COMMENT "lca: manifest ${manifest_name} beside ${target}")
  foreach(data_file IN LISTS P_DATA)
    get_filename_component(data_abs ${data_file} ABSOLUTE)
    get_filename_component(data_name ${data_abs} NAME)
    add_custom_command(TARGET ${target} POST_BUILD
      COMMAND ${CMAKE_COMMAND} -E make_directory ${P_OUTPUT_DIR}/data
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${data_abs} ${P_OUTPUT_DIR}/data/${data_name})
  endforeach()
  if(P_NO_INSTALL)
    return()
  endif()
  if(NOT DEFINED LCA_INSTALL_PLUGIN_DIR)
    set(LCA_INSTALL_PLUGIN_DIR lib/lca/plugins)
  endif()
  install(TARGETS ${target} LIBRARY DESTINATION ${LCA_INSTALL_PLUGIN_DIR})
  install(FILES ${manifest_abs} DESTINATION ${LCA_INSTALL_PLUGIN_DIR})
  if(P_DATA)
    install(FILES ${P_DATA} DESTINATION ${LCA_INSTALL_PLUGIN_DIR}/data)
  endif()
endfunction()
