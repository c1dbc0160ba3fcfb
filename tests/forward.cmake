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
  # The real models: the default (Qwen2.5-Coder-0.5B-Instruct: q5_0, q8_0,
  # q4_K, q6_K, qwen2) and Gemma 3 270M (q4_K, q6_K, q8_0, gemma3).
  foreach(pair "qwen;${SD_DEFAULT_MODEL}" "gemma;${SD_GEMMA_MODEL}")
    list(GET pair 0 tag)
    list(GET pair 1 file)
    if(EXISTS ${file})
      add_test(NAME forward_conformance_${tag}
        COMMAND ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/logits_conformance.py
          --dump $<TARGET_FILE:logits_dump> --model ${file})
      set_tests_properties(forward_conformance_${tag} PROPERTIES LABELS conformance TIMEOUT 2400)
    endif()
  endforeach()
endif()

# sdnpu's default (fast) kernels sum in an order of their own, so their
# logits are not llama.cpp's bit for bit: both orders are measured against
# the model's weights dequantized to F32 (run by llama.cpp), and the fast
# order must be as accurate as the ggml order (fast_accuracy.py).
foreach(pair "qwen;${SD_DEFAULT_MODEL}" "gemma;${SD_GEMMA_MODEL}")
  list(GET pair 0 tag)
  list(GET pair 1 file)
  if(EXISTS ${SD_REF_VENV_PY} AND EXISTS ${file})
    add_test(NAME fast_accuracy_${tag}
      COMMAND ${SD_REF_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/conformance/fast_accuracy.py
        --dump $<TARGET_FILE:logits_dump> --model ${file} --work ${CMAKE_BINARY_DIR}/f32-${tag})
    set_tests_properties(fast_accuracy_${tag} PROPERTIES LABELS conformance TIMEOUT 1800)
  endif()
endforeach()
