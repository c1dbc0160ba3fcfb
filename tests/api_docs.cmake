# docs/api.md and docs/api-generate.md document every public symbol of
# include/sdnpu.h: this test fails when a function, struct, field, enum
# constant or typedef of the header is missing from both, or when one names
# a function the header lacks.
find_program(SD_PYTHON3 python3)
if(SD_PYTHON3)
  add_test(NAME api_docs
    COMMAND ${SD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_api_docs.py
      ${CMAKE_SOURCE_DIR}/include/sdnpu.h ${CMAKE_SOURCE_DIR}/docs/api.md
      ${CMAKE_SOURCE_DIR}/docs/api-generate.md)
  set_tests_properties(api_docs PROPERTIES LABELS unit)
else()
  message(STATUS "python3 not found: the api_docs test is skipped")
endif()

# docs/robustness.md names the tests behind each answer to bad input: they exist.
if(SD_PYTHON3)
  add_test(NAME robustness_doc
    COMMAND ${SD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_robustness.py
      ${CMAKE_SOURCE_DIR}/docs/robustness.md ${CMAKE_SOURCE_DIR})
  set_tests_properties(robustness_doc PROPERTIES LABELS unit)
endif()
