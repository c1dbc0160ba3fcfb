# The floors of sdnpu, lowest first (DESIGN.md "Floors", docs/floors.md).
#
#   sd_floor(NAME SOURCES globs... FACES headers... USES floors... [APP])
#
# NAME is the folder. FACES are its public headers, relative to the folder:
# the first is the face, the others what the face's types need (a face may
# include another face, never a private header). USES lists the floors it
# may include, each lower than NAME; what they use comes with them. The
# folder's own files include each other as "NAME/x.h" (its whole folder is
# on its include path); anything else they include must be a face of a floor
# they use, or the compiler does not find it. APP marks a floor that is not
# part of libsdnpu (the server is the command's).
#
# tests/tools/check_floors.py parses these calls too: keep one call a line
# group, the keywords as written here.

function(sd_floor name)
  cmake_parse_arguments(F "APP" "" "SOURCES;FACES;USES" ${ARGN})
  set(own ${CMAKE_BINARY_DIR}/floors/${name})
  set(pub ${CMAKE_BINARY_DIR}/faces/${name})
  file(REMOVE_RECURSE ${own} ${pub})
  file(MAKE_DIRECTORY ${own})
  file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${name} ${own}/${name} SYMBOLIC)
  foreach(face ${F_FACES})
    get_filename_component(dir ${pub}/${name}/${face} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${name}/${face} ${pub}/${name}/${face} SYMBOLIC)
  endforeach()

  # What this floor may see of others: their faces, closed over their USES.
  set(seen)
  foreach(u ${F_USES})
    get_property(known GLOBAL PROPERTY SD_FLOOR_${u}_PUB SET)
    if(NOT known)
      message(FATAL_ERROR "floor ${name} uses ${u}, which is not a floor below it")
    endif()
    get_property(up GLOBAL PROPERTY SD_FLOOR_${u}_PUB)
    list(APPEND seen ${up})
  endforeach()
  list(REMOVE_DUPLICATES seen)
  set_property(GLOBAL PROPERTY SD_FLOOR_${name}_PUB ${pub} ${seen})
  set_property(GLOBAL APPEND PROPERTY SD_FLOOR_ALL_PUB ${pub})

  set(srcs)
  foreach(g ${F_SOURCES})
    file(GLOB s CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${g})
    list(APPEND srcs ${s})
  endforeach()
  add_library(sd_${name} OBJECT ${srcs})
  target_include_directories(sd_${name} PRIVATE ${own} ${seen} ${CMAKE_SOURCE_DIR}/include)
  target_compile_options(sd_${name} PRIVATE ${SD_WARN})
  target_compile_definitions(sd_${name} PRIVATE SDNPU_BUILD _POSIX_C_SOURCE=200809L
    $<$<BOOL:${SD_HAVE_OPENCL}>:SD_HAVE_OPENCL=1 CL_TARGET_OPENCL_VERSION=120>)
  set_target_properties(sd_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(NOT F_APP)
    # Usage requirements only (include paths of PCRE2, OpenCL...): object
    # libraries link nothing themselves.
    target_link_libraries(sd_${name} PRIVATE ${SD_LIBS})
    set_property(GLOBAL APPEND PROPERTY SD_FLOOR_OBJECTS $<TARGET_OBJECTS:sd_${name}>)
  endif()
endfunction()

set(SD_CL_GLOB)
if(SD_HAVE_OPENCL)
  set(SD_CL_GLOB graphs/opencl/*.c)
endif()

sd_floor(base SOURCES base/*.c
  FACES base.h)
sd_floor(graphs SOURCES graphs/*.c graphs/cpu/*.c ${SD_CL_GLOB}
  FACES graph.h model.h kv.h types.h pool.h weights.h
  USES base)
sd_floor(gguf SOURCES gguf/*.c
  FACES gguf.h
  USES graphs)
sd_floor(tok SOURCES tok/*.c
  FACES tokenizer.h
  USES gguf)
sd_floor(sched SOURCES sched/*.c
  FACES runtime.h profile.h switch.h
  USES graphs)
sd_floor(draft SOURCES draft/*.c
  FACES draft.h
  USES base)
sd_floor(grammar SOURCES grammar/*.c
  FACES grammar.h
  USES base)
sd_floor(sample SOURCES sample/*.c
  FACES sampler.h
  USES grammar)
sd_floor(calib SOURCES calib/*.c
  FACES calib.h
  USES draft)
sd_floor(verify SOURCES verify/*.c
  FACES verify.h
  USES sched draft sample)
sd_floor(engine SOURCES engine/*.c
  FACES tools.h history.h chat.h
  USES verify calib gguf tok)
sd_floor(server SOURCES server/*.c
  FACES server.h
  USES base
  APP)
target_link_libraries(sd_server PRIVATE PkgConfig::MHD PkgConfig::JANSSON)
target_compile_definitions(sd_server PRIVATE _GNU_SOURCE)

get_property(SD_FLOOR_OBJECTS GLOBAL PROPERTY SD_FLOOR_OBJECTS)

# The command sees every floor's faces (engine's tools.h is how bench and
# profile reach a session's runtime) and its own folder.
get_property(SD_ALL_FACES GLOBAL PROPERTY SD_FLOOR_ALL_PUB)
add_library(sd_cli_faces INTERFACE)
target_include_directories(sd_cli_faces INTERFACE ${SD_ALL_FACES})
