# Saved sessions from the command line: state_cli runs `sdnpu run
# --prompt-cache` on tiny models (tests/state_cli.sh). The library's side
# is test_state (tests/test_state.c) and fuzz_replay_state.
add_test(NAME state_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/state_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/state_cli)
set_tests_properties(state_cli PROPERTIES LABELS unit TIMEOUT 300)
