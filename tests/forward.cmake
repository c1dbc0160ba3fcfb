# Forward-pass conformance against llama.cpp: .venv-ref holds llama.cpp built
# without llamafile (see scripts/setup --test and logits_conformance.py).
set(SD_REF_VENV_PY ${CMAKE_SOURCE_DIR}/.venv-ref/bin/python)
if(EXISTS ${SD_REF_VENV_PY})
  add_test(NAME kernel_conformance
    COMMAND ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/kernel_conformance.py
      --dump $<TARGET_FILE:vecdot_dump>)
  set_tests_properties(kernel_conformance PROPERTIES LABELS conformance TIMEOUT 600)
  add_test(NAME forward_conformance_tiny
    COMMAND ${CMAKE_COMMAND} -E env
      sh -c "mkdir -p ${CMAKE_BINARY_DIR}/tiny && $<TARGET_FILE:make_tiny_models> ${CMAKE_BINARY_DIR}/tiny >/dev/null && ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/logits_conformance.py --dump $<TARGET_FILE:logits_dump> --tiny-dir ${CMAKE_BINARY_DIR}/tiny")
  set_tests_properties(forward_conformance_tiny PROPERTIES LABELS conformance TIMEOUT 900)
  # The default model (Qwen2.5-Coder-0.5B-Instruct: q5_0, q8_0, q4_K, q6_K,
  # qwen2) on every sixth prompt (6 of 36: prose, chat, documents, a long
  # one), for CI's time; where the peer here is not built for AVX-512 (the
  # order sdnpu's ggml kernels follow) it is skipped (logits_conformance.py).
  # On an AVX-512 Xeon it agrees at every position (0.00000 nats over the
  # top 20, 6/6 continuations) and takes about ten minutes, most of them
  # llama.cpp's token-by-token runs.
  # Gemma 3 270M (q4_K, q6_K, q8_0, gemma3) is checked the same way under
  # the label "gemma", which the default run leaves out (ctest -L gemma):
  # its architecture is covered bit for bit by the tiny gemma3 file above.
  if(EXISTS ${SD_DEFAULT_MODEL})
    add_test(NAME forward_conformance_qwen
      COMMAND ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/logits_conformance.py
        --dump $<TARGET_FILE:logits_dump> --model ${SD_DEFAULT_MODEL} --every 6)
    set_tests_properties(forward_conformance_qwen PROPERTIES LABELS conformance TIMEOUT 2400 SKIP_RETURN_CODE 77)
  endif()
  if(EXISTS ${SD_GEMMA_MODEL})
    add_test(NAME forward_conformance_gemma
      COMMAND ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/logits_conformance.py
        --dump $<TARGET_FILE:logits_dump> --model ${SD_GEMMA_MODEL})
    set_tests_properties(forward_conformance_gemma PROPERTIES LABELS "conformance;gemma" TIMEOUT 2400
      SKIP_RETURN_CODE 77)
  endif()
endif()

# sdnpu's default (fast) kernels sum in an order of their own, so their
# logits are not llama.cpp's bit for bit: both orders are measured against
# the model's weights dequantized to F32 (run by llama.cpp), and the fast
# order must be as accurate as the ggml order (fast_accuracy.py).
foreach(pair "qwen;${SD_DEFAULT_MODEL};conformance" "gemma;${SD_GEMMA_MODEL};conformance\\;gemma")
  list(GET pair 0 tag)
  list(GET pair 1 file)
  list(GET pair 2 labels)
  if(EXISTS ${SD_REF_VENV_PY} AND EXISTS ${file})
    add_test(NAME fast_accuracy_${tag}
      COMMAND ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/fast_accuracy.py
        --dump $<TARGET_FILE:logits_dump> --model ${file} --work ${CMAKE_BINARY_DIR}/f32-${tag} --every 3)
    set_tests_properties(fast_accuracy_${tag} PROPERTIES LABELS "${labels}" TIMEOUT 1800)
  endif()
endforeach()
