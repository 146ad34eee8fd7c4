# ctest script: the example writes its graph with --save, dflow-dot draws it, and for a training
# graph (INIT=1) dflow-run runs its "init" target from the file.
#   cmake -DEXAMPLE=... [-DEXAMPLE_ARGS=a;b] -DDOT=... -DRUN=... -DOUT=dir -DINIT=0|1
#         -P save_and_check.cmake
# EXAMPLE_ARGS go before --save (an example's positional arguments).
get_filename_component(name ${EXAMPLE} NAME)
set(graph ${OUT}/${name}_saved.dfg)
file(REMOVE ${graph})
function(check)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}\nexit ${rc}\n${out}${err}")
  endif()
  message(STATUS "${out}")
endfunction()
check(${EXAMPLE} ${EXAMPLE_ARGS} --save ${graph})
if(NOT EXISTS ${graph})
  message(FATAL_ERROR "${name} --save did not write ${graph}")
endif()
check(${DOT} ${graph} -o ${OUT}/${name}_saved.dot)
if(INIT)
  check(${RUN} ${graph} --target init)
endif()
