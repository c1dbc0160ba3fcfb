# Fuzz targets (tests/fuzz/fuzz_*.c, see tests/fuzz/fuzz.h). Here each is
# built with tests/fuzz/replay.c and replays its seed corpus as a CTest test
# (label unit, so the sanitizer build replays them too); scripts/fuzz builds
# them with clang's libFuzzer and fuzzes.
set(SD_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
file(GLOB SD_FUZZ_TARGETS CONFIGURE_DEPENDS ${SD_FUZZ_DIR}/fuzz_*.c)
foreach(src ${SD_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  string(REPLACE "fuzz_" "" corpus ${name})
  if(SDNPU_FUZZ)
    # scripts/fuzz: clang, libFuzzer's main, the sanitizers; the library is
    # built with -fsanitize=fuzzer-no-link for coverage (see CMakeLists.txt).
    add_executable(${name}_replay ${src})
    target_compile_options(${name}_replay PRIVATE -fsanitize=fuzzer)
    target_link_options(${name}_replay PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${name}_replay ${src} ${SD_FUZZ_DIR}/replay.c)
  endif()
  target_compile_options(${name}_replay PRIVATE ${SD_WARN})
  target_compile_definitions(${name}_replay PRIVATE _GNU_SOURCE)
  target_include_directories(${name}_replay PRIVATE ${SD_FUZZ_DIR} ${CMAKE_SOURCE_DIR})
  target_link_libraries(${name}_replay PRIVATE sdnpu_testutil)
  add_test(NAME fuzz_replay_${corpus} COMMAND ${name}_replay ${SD_FUZZ_DIR}/corpus/${corpus})
  set_tests_properties(fuzz_replay_${corpus} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()
# What the CLI's and the server's readers need besides the library.
target_sources(fuzz_dataset_replay PRIVATE ${CMAKE_SOURCE_DIR}/cli/dataset.c ${CMAKE_SOURCE_DIR}/cli/io.c)
target_link_libraries(fuzz_dataset_replay PRIVATE PkgConfig::JANSSON)
target_sources(fuzz_openai_replay PRIVATE ${CMAKE_SOURCE_DIR}/server/openai.c ${CMAKE_SOURCE_DIR}/server/jobs.c
  ${CMAKE_SOURCE_DIR}/server/tools.c)
target_link_libraries(fuzz_openai_replay PRIVATE PkgConfig::JANSSON)
target_sources(fuzz_transcript_replay PRIVATE ${CMAKE_SOURCE_DIR}/cli/chat_transcript.c ${CMAKE_SOURCE_DIR}/cli/io.c)
target_sources(fuzz_results_replay PRIVATE ${CMAKE_SOURCE_DIR}/cli/eval_results.c ${CMAKE_SOURCE_DIR}/cli/io.c
  ${CMAKE_SOURCE_DIR}/cli/json.c)
target_link_libraries(fuzz_results_replay PRIVATE PkgConfig::JANSSON)
