# The `sdnpu` command itself: cli_help checks that its help lists every
# command and that each answers -h (tests/cli_help.sh).
add_test(NAME cli_help COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_help.sh $<TARGET_FILE:sdnpu>)
set_tests_properties(cli_help PROPERTIES LABELS unit TIMEOUT 60)
