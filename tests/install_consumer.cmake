# Installs libkda into a scratch prefix, then builds and runs examples/consumer against it, and
# runs the installed `kda --version` (it must find the installed libkda by itself: no
# LD_LIBRARY_PATH, the prefix is not a system directory).
file(REMOVE_RECURSE "${KDA_SCRATCH}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${KDA_BUILD_DIR}" --prefix "${KDA_SCRATCH}/prefix"
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${KDA_SOURCE_DIR}/examples/consumer"
                        -B "${KDA_SCRATCH}/build" -DCMAKE_PREFIX_PATH=${KDA_SCRATCH}/prefix
                        # the library's own flags (a sanitizer build needs them in the consumer)
                        "-DCMAKE_CXX_FLAGS=${KDA_CXX_FLAGS}"
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${KDA_SCRATCH}/build" RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND "${KDA_SCRATCH}/build/kda_consumer" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "consumer said: ${out}${err}")
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()

if(KDA_BUILD_CLI)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH
                          "${KDA_SCRATCH}/prefix/bin/kda" --version
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "installed kda --version said: ${out}${err}")
  if(rc)
    message(FATAL_ERROR "the installed kda does not start (${rc}): ${err}")
  endif()
  if(NOT out MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+")
    message(FATAL_ERROR "the installed kda --version printed no version: ${out}")
  endif()
endif()
