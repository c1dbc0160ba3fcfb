# server/tools.c's own parts (tools read, calls written and read back)
# as a unit test, linked with the server files it needs.
target_sources(test_server_tools PRIVATE ${CMAKE_SOURCE_DIR}/server/tools.c ${CMAKE_SOURCE_DIR}/server/jobs.c
  ${CMAKE_SOURCE_DIR}/server/openai.c)
target_link_libraries(test_server_tools PRIVATE PkgConfig::JANSSON)

# `sdnpu serve` with real clients (tests/server_e2e.py): the openai package
# and curl against a running server on a tiny model, hostile requests, 1,000
# requests from 16 concurrent clients, a full queue, SIGTERM, prompt reuse and
# routing. Needs the test virtual environment (`scripts/setup --test`
# installs openai into it).
if(EXISTS ${SD_TEST_VENV_PY})
  add_test(NAME server_e2e
    COMMAND ${SD_TEST_VENV_PY} ${CMAKE_CURRENT_SOURCE_DIR}/server_e2e.py $<TARGET_FILE:sdnpu>
      $<TARGET_FILE:make_tiny_models> ${CMAKE_BINARY_DIR}/server_e2e)
  set_tests_properties(server_e2e PROPERTIES LABELS server TIMEOUT 900)
else()
  message(STATUS "no .venv-test: the server_e2e test is skipped (scripts/setup --test)")
endif()
