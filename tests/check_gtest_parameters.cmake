# Runs every gtest binary in BINARIES (a ;-list) with --gtest_list_tests and fails when a
# parameterized test's parameter is listed as gtest's hex dump of an unprintable value
# ("GetParam() = 208-byte object <...>"): each parameter type needs a PrintTo (or operator<<).
set(bad "")
foreach(binary IN LISTS BINARIES)
  execute_process(COMMAND "${binary}" --gtest_list_tests RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "${binary} --gtest_list_tests failed (${rc}): ${err}")
  endif()
  string(REGEX MATCHALL "[^\n]*-byte object <[^\n]*" dumps "${out}")
  list(LENGTH dumps count)
  if(count GREATER 0)
    list(GET dumps 0 first)
    get_filename_component(name "${binary}" NAME)
    string(APPEND bad "\n  ${name}: ${count} parameters, e.g. ${first}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "parameters printed as hex dumps (give their types a PrintTo):${bad}")
endif()
list(LENGTH BINARIES n)
message(STATUS "${n} test binaries, every parameter printable")
