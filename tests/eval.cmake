# The eval harness: test_eval (a cmocka program from tests/test_eval.c) also
# compiles the command's dataset loader (on jansson) and JSON string writer,
# and eval_e2e runs `sdnpu eval` on a tiny model and a three-line dataset
# with a malformed line.
target_sources(test_eval PRIVATE ${CMAKE_SOURCE_DIR}/cli/json.c ${CMAKE_SOURCE_DIR}/cli/dataset.c ${CMAKE_SOURCE_DIR}/cli/io.c)
target_link_libraries(test_eval PRIVATE PkgConfig::JANSSON)
target_include_directories(test_eval PRIVATE ${CMAKE_SOURCE_DIR})

add_test(NAME eval_e2e
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/eval_e2e.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/eval_e2e)
set_tests_properties(eval_e2e PROPERTIES LABELS unit TIMEOUT 600)
