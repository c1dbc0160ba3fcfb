# `sdnpu profile` from the command line: profile_cli profiles a tiny model
# and checks that a session of it reads that profile (tests/profile_cli.sh).
# The library's side is test_profile (tests/test_profile.c).
add_test(NAME profile_cli
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/profile_cli.sh $<TARGET_FILE:sdnpu> $<TARGET_FILE:make_tiny_models>
    ${CMAKE_BINARY_DIR}/profile_cli)
set_tests_properties(profile_cli PROPERTIES LABELS unit TIMEOUT 300)
