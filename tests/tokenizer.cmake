# Tokenizer and chat-template conformance against llama.cpp (needs .venv-test; see scripts/setup --test):
# token ids of every corpus string (tests/data/tok_corpus.jsonl), in all four
# add_special/parse_special modes, on the real vocabularies of the default
# model (Qwen2.5, byte-level BPE) and Gemma 3 when they are there, and on
# byte-level BPE vocabularies the script trains and writes.
if(EXISTS ${SD_TEST_VENV_PY})
  add_test(NAME tokenizer_conformance
    COMMAND ${SD_TEST_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/tokenizer_conformance.py
      --tokdump $<TARGET_FILE:tokdump> --qwen ${SD_DEFAULT_MODEL} --gemma ${SD_GEMMA_MODEL}
      --corpus ${SD_TEST_DATA}/tok_corpus.jsonl --workdir ${CMAKE_BINARY_DIR}/tokconf)
  set_tests_properties(tokenizer_conformance PROPERTIES LABELS conformance TIMEOUT 300)
endif()

# Chat-template conformance (needs .venv-test): sdnpu_chat_format against the
# GGUF's own template executed by llama-cpp-python's Jinja formatter, on the
# instruct models that are installed (the default; the 1.5B where it is).
if(EXISTS ${SD_TEST_VENV_PY})
  add_test(NAME chat_conformance
    COMMAND ${SD_TEST_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/chat_conformance.py
      --chatdump $<TARGET_FILE:chatdump> --sdnpu $<TARGET_FILE:sdnpu>
      ${SD_DEFAULT_MODEL} ${CMAKE_SOURCE_DIR}/models/qwen2.5-coder-1.5b-instruct.gguf)
  set_tests_properties(chat_conformance PROPERTIES LABELS conformance TIMEOUT 300)
endif()
