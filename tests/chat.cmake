# `sdnpu chat` as people use it (tests/chat_test.sh), on a tiny model: at a
# terminal through tmux (line editing, history, Ctrl-C, Ctrl-D; skipped
# where tmux is not installed), /save and /load through pipes, the
# context growing to fit a document, and the prompt cache; and on the
# default instruct model, what --system "" sends.
foreach(mode tty saved grow cache)
  add_test(NAME cli_chat_${mode}
    COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/chat_test.sh ${mode} $<TARGET_FILE:sdnpu>
      $<TARGET_FILE:make_tiny_models> ${CMAKE_BINARY_DIR}/chat_test_${mode})
  set_tests_properties(cli_chat_${mode} PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
add_test(NAME cli_chat_system
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/chat_test.sh system $<TARGET_FILE:sdnpu>
    $<TARGET_FILE:make_tiny_models> ${CMAKE_BINARY_DIR}/chat_test_system ${SD_DEFAULT_MODEL})
set_tests_properties(cli_chat_system PROPERTIES LABELS unit TIMEOUT 300 SKIP_RETURN_CODE 77)
