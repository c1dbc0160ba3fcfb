# `sdnpu bench graphs` from the command line on a tiny model, with a stand-in
# for llama.cpp's side: the engines take turns and the figures are each
# engine's best round (tests/bench_graphs_cli.sh). No timing is asserted.
add_test(NAME bench_graphs_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_graphs_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/bench_graphs_cli)
set_tests_properties(bench_graphs_cli PROPERTIES LABELS unit TIMEOUT 300)

# `sdnpu bench verify` on a tiny model: contexts in any order, repeated,
# the context sized for the longest (tests/bench_verify_cli.sh).
add_test(NAME bench_verify_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_verify_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/bench_verify_cli)
set_tests_properties(bench_verify_cli PROPERTIES LABELS unit TIMEOUT 300)

# `sdnpu bench state` on a tiny model: every kind timed, the continuation
# after a load the same as after a prefill (tests/bench_state_cli.sh).
add_test(NAME bench_state_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_state_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/bench_state_cli)
set_tests_properties(bench_state_cli PROPERTIES LABELS unit TIMEOUT 300)

# `sdnpu bench tokenize` on a tiny model: its JSON and table, with no peer
# and with one that fails (tests/bench_tokenize_cli.sh).
add_test(NAME bench_tokenize_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_tokenize_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/bench_tokenize_cli)
set_tests_properties(bench_tokenize_cli PROPERTIES LABELS unit TIMEOUT 300)
