# `sdnpu bench graphs` from the command line on a tiny model, with a stand-in
# for llama.cpp's side: the engines take turns and the figures are each
# engine's best round (tests/bench_graphs_cli.sh). No timing is asserted.
add_test(NAME bench_graphs_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_graphs_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/bench_graphs_cli)
set_tests_properties(bench_graphs_cli PROPERTIES LABELS unit TIMEOUT 300)
