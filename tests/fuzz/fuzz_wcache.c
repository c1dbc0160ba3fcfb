/* tests/fuzz/fuzz_wcache.c - the weight cache's reader (graphs/wcache.h)
 * on any file, checked against a fixed model's table and key. The first
 * byte picks the file: odd, the input itself; even, a valid cache file
 * with the rest of the input xored over it from its start, so that damage
 * reaches past the header's own checksum. A map either fails with a
 * message (and maps nothing) or holds exactly the data that was written. */
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "graphs/wcache.h"
#include "fuzz.h"

enum { N = 3, DATA = 3 * 1024 };

static const struct sd_wcache_entry WANT[N] = {
    {.type = 8, .n_out = 16, .n_in = 32, .off = 0, .bytes = 1024},
    {.type = 12, .n_out = 16, .n_in = 256, .off = 1024, .bytes = 1024},
    {.type = 14, .n_out = 16, .n_in = 256, .off = 2048, .bytes = 1024},
};
static const struct sd_wcache_key KEY = {0x1234, 0x5678};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256];
    static uint8_t ref[DATA];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/sdnpu-fuzz-wcache-%d.sdw", (int)getpid());
        for (size_t i = 0; i < DATA; i++) ref[i] = (uint8_t)(i * 131 + 7);
    }
    struct sd_err err = {0};
    if (size == 0) return 0;
    if (data[0] & 1) {
        FILE *f = fopen(path, "wb");
        FUZZ_CHECK(f != NULL);
        FUZZ_CHECK(fwrite(data + 1, 1, size - 1, f) == size - 1);
        fclose(f);
    } else {
        FUZZ_CHECK(sd_wcache_write(path, &KEY, WANT, N, ref, DATA, &err) == SDNPU_OK);
        FILE *f = fopen(path, "r+b");
        FUZZ_CHECK(f != NULL);
        for (size_t i = 1; i < size; i++) {
            int c = fgetc(f);
            if (c == EOF) break;
            FUZZ_CHECK(fseek(f, -1, SEEK_CUR) == 0);
            fputc(c ^ data[i], f);
            FUZZ_CHECK(fseek(f, 0, SEEK_CUR) == 0);
        }
        fclose(f);
    }
    struct sd_wcache_map map;
    int rc = sd_wcache_map(path, &KEY, WANT, N, DATA, &map, &err);
    if (rc == SDNPU_OK) FUZZ_CHECK(map.data && memcmp(map.data, ref, DATA) == 0);
    else FUZZ_CHECK(err.msg[0] != '\0' && (rc == SDNPU_ERR_FORMAT || rc == SDNPU_ERR_IO) && !map.base);
    sd_wcache_unmap(&map);
    unlink(path);
    return 0;
}
