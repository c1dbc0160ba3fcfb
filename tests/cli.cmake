# The `sdnpu` command itself: cli_help checks that its help lists every
# command and that each answers -h (tests/cli_help.sh).
add_test(NAME cli_help COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli_help.sh $<TARGET_FILE:sdnpu>)
set_tests_properties(cli_help PROPERTIES LABELS unit TIMEOUT 60)
# Replies held to a JSON object or a schema from the command line
# (tests/format_cli.sh); the grammar itself is test_grammar and test_schema.
add_test(NAME format_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/format_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/format_cli)
set_tests_properties(format_cli PROPERTIES LABELS unit TIMEOUT 300)
