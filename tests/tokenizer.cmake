# Tokenizer conformance against llama.cpp (needs .venv-test; see scripts/setup --test):
# token ids of every corpus string (tests/data/tok_corpus.jsonl), in all four
# add_special/parse_special modes, on the default model's vocabulary when it
# is there and on byte-level BPE vocabularies the script trains and writes.
if(EXISTS ${SD_TEST_VENV_PY})
  add_test(NAME tokenizer_conformance
    COMMAND ${SD_TEST_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/tokenizer_conformance.py
      --tokdump $<TARGET_FILE:tokdump> --model ${SD_DEFAULT_MODEL}
      --corpus ${SD_TEST_DATA}/tok_corpus.jsonl --workdir ${CMAKE_BINARY_DIR}/tokconf)
  set_tests_properties(tokenizer_conformance PROPERTIES LABELS conformance TIMEOUT 300)
endif()
