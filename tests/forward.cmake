# Forward-pass conformance against llama.cpp (needs .venv-test; see scripts/setup --test).
if(EXISTS ${SD_TEST_VENV_PY})
  add_test(NAME forward_conformance_tiny
    COMMAND ${CMAKE_COMMAND} -E env
      sh -c "mkdir -p ${CMAKE_BINARY_DIR}/tiny && $<TARGET_FILE:make_tiny_models> ${CMAKE_BINARY_DIR}/tiny >/dev/null && ${SD_TEST_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/logits_conformance.py --dump $<TARGET_FILE:logits_dump> --tiny-dir ${CMAKE_BINARY_DIR}/tiny")
  set_tests_properties(forward_conformance_tiny PROPERTIES LABELS conformance TIMEOUT 900)
  if(EXISTS ${SD_DEFAULT_MODEL})
    add_test(NAME forward_conformance_gemma
      COMMAND ${SD_TEST_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/logits_conformance.py
        --dump $<TARGET_FILE:logits_dump> --model ${SD_DEFAULT_MODEL})
    set_tests_properties(forward_conformance_gemma PROPERTIES LABELS conformance TIMEOUT 1800)
  endif()
endif()
