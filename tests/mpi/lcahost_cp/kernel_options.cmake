# lcahost_cp_np2_kernel_options (CMakeLists.txt): --kernel-options reach the CP run's local kernel.
# Its cells are labelled with them (kept apart from runs without them) and the run record names
# them; a bad option is the kernel's one message on every rank, not a hang. Each cell counts the
# local kernel's plans (plan_info.local_plans).
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
set(file ${OUT}.jsonl)
file(REMOVE ${file})
lcahost_cp("(accumulate f64)" --cp ring_p2p --matrix cp-quick --masks causal --warmup 0 --repeats 1
           --kernel-options "cpu_reference={\"accumulate\":\"f64\"}" --out ${file})
cell_records(${file} cells)
list(LENGTH cells n)
if(n EQUAL 0)
  message(FATAL_ERROR "no cells in ${file}\n${out}")
endif()
foreach(line IN LISTS cells)
  string(JSON label GET "${line}" label)
  string(JSON status GET "${line}" status)
  if(NOT label STREQUAL "ring_p2p/cpu_reference[accumulate=f64]" OR NOT status STREQUAL "ok")
    message(FATAL_ERROR "expected an ok cell labelled ring_p2p/cpu_reference[accumulate=f64]: ${line}")
  endif()
  # The local kernel's plans, summed over both ranks (two block pairs a rank on the ring).
  string(JSON plans ERROR_VARIABLE missing GET "${line}" plan_info local_plans plans)
  if(missing OR plans LESS 2)
    message(FATAL_ERROR "a CP cell without its local plans' count: ${line}")
  endif()
endforeach()
file(STRINGS ${file} runs REGEX "\"type\":\"run\"")
string(JSON acc GET "${runs}" cp kernel_options accumulate)
if(NOT acc STREQUAL "f64")
  message(FATAL_ERROR "the run record does not name the kernel's options: ${runs}")
endif()

execute_process(COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root -np 2 ${LCAHOST} --plugins ${PLUGINS}
                --cp ring_p2p --matrix cp-quick --masks causal --kernel-options "cpu_reference={\"accumulate\":\"f16\"}"
                TIMEOUT 60 RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
if(rc EQUAL 0 OR NOT "${o}${e}" MATCHES "accumulate")
  message(FATAL_ERROR "a bad kernel option was not refused with its name (exit ${rc}):\n${o}\n${e}")
endif()
message(STATUS "${n} cells labelled with the kernel's options; a bad option refused (exit ${rc})")
