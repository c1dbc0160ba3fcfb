// tests/header_cxx.cpp - the public header compiles as C++ and links from C++.
#include "sdnpu.h"

#include <cstdio>
#include <cstring>

int main() {
    sdnpu_model_params mp = sdnpu_model_default_params();
    sdnpu_model *m = nullptr;
    char err[256];
    // A missing file: a status and a message, from C++ too.
    sdnpu_status rc = sdnpu_model_load("/nonexistent.gguf", mp, &m, err, sizeof err);
    if (rc == SDNPU_OK || m != nullptr || std::strstr(err, "nonexistent") == nullptr) return 1;
    std::printf("%s: %s\n", sdnpu_status_str(rc), err);
    return 0;
}
