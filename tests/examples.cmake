# The example programs (examples/*.c) and `sdnpu chat`, driven by
# tests/tools/examples_test.sh. With a tiny model the text is gibberish; the
# tests check exit status, the stats line, history growth and transcripts.
set(SD_EX_SH ${CMAKE_CURRENT_SOURCE_DIR}/tools/examples_test.sh)
set(SD_EX_DIR ${CMAKE_BINARY_DIR}/examples_test)
set(SD_EX_TINY ${SD_EX_DIR}/tiny-gemma3.gguf)
set(SD_EX_DOC ${CMAKE_SOURCE_DIR}/examples/data/sample.txt)
set(SD_EX_THREAD ${CMAKE_SOURCE_DIR}/examples/data/thread.txt)

# Write the tiny models once; the tests below depend on this fixture.
add_test(NAME examples_tiny_model
  COMMAND sh -c "mkdir -p ${SD_EX_DIR} && $<TARGET_FILE:make_tiny_models> ${SD_EX_DIR} >/dev/null")
set_tests_properties(examples_tiny_model PROPERTIES FIXTURES_SETUP sd_examples_tiny LABELS examples)

add_test(NAME example_summarize_tiny
  COMMAND sh ${SD_EX_SH} summarize $<TARGET_FILE:example_summarize> ${SD_EX_TINY} ${SD_EX_DOC} 8)
add_test(NAME example_summarize_tiny_stdin
  COMMAND sh ${SD_EX_SH} summarize-stdin $<TARGET_FILE:example_summarize> ${SD_EX_TINY} ${SD_EX_DOC} 8)
add_test(NAME example_autoreply_tiny
  COMMAND sh ${SD_EX_SH} autoreply $<TARGET_FILE:example_autoreply> ${SD_EX_TINY} ${SD_EX_THREAD}
    ${SD_EX_DIR}/autoreply 8)
add_test(NAME cli_chat_tiny
  COMMAND sh ${SD_EX_SH} chat $<TARGET_FILE:sdnpu> ${SD_EX_TINY} ${SD_EX_DIR}/chat)
add_test(NAME example_summarize_long_tiny
  COMMAND sh ${SD_EX_SH} summarize-long-example $<TARGET_FILE:example_summarize> $<TARGET_FILE:make_tiny_models>
    ${SD_EX_DIR}/long)
set_tests_properties(example_summarize_tiny example_summarize_tiny_stdin example_autoreply_tiny cli_chat_tiny
  example_summarize_long_tiny
  PROPERTIES FIXTURES_REQUIRED sd_examples_tiny LABELS examples TIMEOUT 300)

# The real model, when installed: a short summary of the sample document by
# the example, and the README's first command, whole, ending at the end of
# the instruction-tuned model's turn.
if(EXISTS ${SD_DEFAULT_MODEL})
  add_test(NAME example_summarize_default
    COMMAND sh ${SD_EX_SH} summarize $<TARGET_FILE:example_summarize> ${SD_DEFAULT_MODEL} ${SD_EX_DOC} 16)
  add_test(NAME cli_summarize_default
    COMMAND sh ${SD_EX_SH} summarize-cli $<TARGET_FILE:sdnpu> ${SD_DEFAULT_MODEL} ${SD_EX_DOC} Debian)
  add_test(NAME cli_summarize_long
    COMMAND sh ${SD_EX_SH} summarize-long $<TARGET_FILE:sdnpu> ${SD_DEFAULT_MODEL} ${CMAKE_SOURCE_DIR}/docs/benchmarks.md)
  set_tests_properties(example_summarize_default cli_summarize_default cli_summarize_long PROPERTIES LABELS examples
    TIMEOUT 600)
  set_tests_properties(cli_summarize_default cli_summarize_long PROPERTIES SKIP_RETURN_CODE 77)
endif()
