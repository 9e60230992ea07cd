# cmake -P script behind the sdk_out_of_tree_hello_kernel test (see CMakeLists.txt here).
# Inputs (-D): LCA_SOURCE_DIR, LCA_BINARY_DIR, LCA_PLUGIN_DIR, LCAHOST, WORK_DIR, GENERATOR,
# MAKE_PROGRAM, CXX_COMPILER. Fails with the output of the step that went wrong.
cmake_minimum_required(VERSION 3.20)

foreach(var LCA_SOURCE_DIR LCA_BINARY_DIR LCA_PLUGIN_DIR LCAHOST WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "out_of_tree.cmake: -D${var}=... is required")
  endif()
endforeach()

# Runs one step; on failure stops with its command line and output.
function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(JOIN " " cmd ${ARGN})
    message(FATAL_ERROR "step '${name}' failed (${rc}):\n  ${cmd}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  message(STATUS "ok: ${name}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

# 1. Install the SDK (headers, lcaConfig.cmake, lca_add_plugin) into a fresh prefix.
step("install the SDK" ${CMAKE_COMMAND} --install ${LCA_BINARY_DIR}/sdk --prefix ${prefix})
foreach(f lib/cmake/lca/lcaConfig.cmake lib/cmake/lca/lcaPlugin.cmake include/lca/abi.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the SDK install did not produce ${prefix}/${f}")
  endif()
endforeach()

# 2. Configure and build the example against the installed package only.
set(configure_args -S ${LCA_SOURCE_DIR}/sdk/examples/hello_kernel -B ${WORK_DIR}/build
    -DCMAKE_BUILD_TYPE=Release -Dlca_DIR=${prefix}/lib/cmake/lca
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
step("configure hello_kernel" ${CMAKE_COMMAND} ${configure_args})
step("build hello_kernel" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
foreach(f liblca_hello_kernel.so hello_kernel.json)
  if(NOT EXISTS ${WORK_DIR}/build/plugins/${f})
    message(FATAL_ERROR "the example build did not produce plugins/${f}")
  endif()
endforeach()

# 3. A fresh plugins folder: the main build's plugins (reference, mask provider, data, matrix
#    presets, schema) plus the example.
set(plugins ${WORK_DIR}/plugins)
file(MAKE_DIRECTORY ${plugins})
file(GLOB built LIST_DIRECTORIES false ${LCA_PLUGIN_DIR}/liblca_*.so ${LCA_PLUGIN_DIR}/*.json)
list(FILTER built EXCLUDE REGEX "/(liblca_hello_kernel\\.so|hello_kernel\\.json)$")
if(NOT built)
  message(FATAL_ERROR "no plugins in ${LCA_PLUGIN_DIR}: build the project first")
endif()
file(COPY ${built} DESTINATION ${plugins})
foreach(dir data matrices schema)
  if(IS_DIRECTORY ${LCA_PLUGIN_DIR}/${dir})
    file(COPY ${LCA_PLUGIN_DIR}/${dir} DESTINATION ${plugins})
  endif()
endforeach()
file(COPY ${WORK_DIR}/build/plugins/liblca_hello_kernel.so ${WORK_DIR}/build/plugins/hello_kernel.json
     DESTINATION ${plugins})

# 4. One small matrix cell with the example kernel.
file(WRITE ${WORK_DIR}/hello.json [=[
{"name": "hello", "kernels": ["hello_kernel"], "masks": ["causal"], "seqlens": [128],
 "heads": ["2:1"], "head_dims": [32], "dtypes": ["f32"], "passes": ["fwd"],
 "warmup": 1, "repeats": 2, "seed": 1}
]=])
if(NOT EXISTS ${LCAHOST})
  message(FATAL_ERROR "lcahost not found at ${LCAHOST}: build the project first")
endif()
step("lcahost run" ${LCAHOST} --plugins ${plugins} --matrix ${WORK_DIR}/hello.json
     --out ${WORK_DIR}/out.jsonl)

# 5. out.jsonl must hold a cell line for hello_kernel with status ok.
if(NOT EXISTS ${WORK_DIR}/out.jsonl)
  message(FATAL_ERROR "lcahost wrote no ${WORK_DIR}/out.jsonl")
endif()
file(READ ${WORK_DIR}/out.jsonl content)
# Split into lines without CMake list syntax getting in the way of ';', '[' and ']'.
string(REPLACE ";" "<semicolon>" content "${content}")
string(REPLACE "[" "<lbracket>" content "${content}")
string(REPLACE "]" "<rbracket>" content "${content}")
string(REPLACE "\n" ";" lines "${content}")
set(found FALSE)
set(hello_lines "")
foreach(line IN LISTS lines)
  string(REPLACE "<semicolon>" ";" line "${line}")
  string(REPLACE "<lbracket>" "[" line "${line}")
  string(REPLACE "<rbracket>" "]" line "${line}")
  string(JSON type ERROR_VARIABLE e1 GET "${line}" type)
  string(JSON kernel ERROR_VARIABLE e2 GET "${line}" kernel)
  string(JSON status ERROR_VARIABLE e3 GET "${line}" status)
  if(e1 OR e2 OR e3 OR NOT type STREQUAL "cell" OR NOT kernel STREQUAL "hello_kernel")
    continue()
  endif()
  string(APPEND hello_lines "${line}\n")
  string(TOLOWER "${status}" status)
  if(status STREQUAL "ok")
    set(found TRUE)
  endif()
endforeach()
if(NOT found)
  message(FATAL_ERROR "no cell line with \"kernel\":\"hello_kernel\" and \"status\":\"ok\" in "
                      "${WORK_DIR}/out.jsonl; hello_kernel cells:\n${hello_lines}")
endif()
message(STATUS "ok: hello_kernel cell passed:\n${hello_lines}")
