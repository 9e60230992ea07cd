# What the lcahost_cp scripts share (include()d; MPIEXEC, LCAHOST and PLUGINS come from the test).

# lcahost under mpirun on 2 ranks with the test's plugins and ARGN; a non-zero exit fails the test,
# naming `what`. Its output lands in `out` and `err` of the caller.
function(lcahost_cp what)
  execute_process(COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root -np 2 ${LCAHOST} --plugins ${PLUGINS} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lcahost --cp ${what} exited ${rc}\n${stdout}\n${stderr}")
  endif()
  set(out "${stdout}" PARENT_SCOPE)
  set(err "${stderr}" PARENT_SCOPE)
endfunction()

# The cell records of a results file, into `out`.
function(cell_records file out)
  file(STRINGS ${file} records)
  list(FILTER records INCLUDE REGEX "\"type\":\"cell\"")
  set(${out} "${records}" PARENT_SCOPE)
endfunction()
