# The floors (cmake/floors.cmake, docs/floors.md): every include of the tree
# goes down a floor to a face (floors_check), and the build's include paths
# make an upward include or a lower floor's private header fail to compile:
# the probes are compiled as a file of sched/ would be, and must fail, while
# the control (its own header and the faces below) must compile.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME floors_check COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_floors.py
  ${CMAKE_SOURCE_DIR})
# The check itself must catch a violation: a two-floor tree whose lower floor includes the higher.
add_test(NAME floors_check_catches COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_floors.py
  ${CMAKE_CURRENT_SOURCE_DIR}/data/floors/bad)
set_tests_properties(floors_check_catches PROPERTIES WILL_FAIL TRUE)
# ... and a file longer than the limit: the tree's longest files pass 800 lines but not 100.
add_test(NAME floors_check_counts_lines COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_floors.py
  --max-lines 100 ${CMAKE_SOURCE_DIR})
set_tests_properties(floors_check_counts_lines PROPERTIES WILL_FAIL TRUE)

get_property(sd_sched_sees GLOBAL PROPERTY SD_FLOOR_sched_PUB)
set(sd_sched_flags -I${CMAKE_BINARY_DIR}/floors/sched -I${CMAKE_SOURCE_DIR}/include)
foreach(dir ${sd_sched_sees})
  list(APPEND sd_sched_flags -I${dir})
endforeach()
foreach(probe face upward private)
  add_test(NAME floors_compile_${probe}
    COMMAND ${CMAKE_C_COMPILER} -std=c11 -fsyntax-only ${sd_sched_flags}
      ${CMAKE_CURRENT_SOURCE_DIR}/data/floors/${probe}.c)
endforeach()
set_tests_properties(floors_compile_upward floors_compile_private PROPERTIES WILL_FAIL TRUE)
set_tests_properties(floors_check floors_check_catches floors_check_counts_lines floors_compile_face floors_compile_upward
  floors_compile_private PROPERTIES LABELS unit)
