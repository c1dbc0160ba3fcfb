/* tests/fuzz/fuzz_history.c - the history store's reader on any file:
 * open (a torn or corrupt tail is skipped and reported), read every
 * record, build the drafting store, append one record, and open again:
 * what was readable stays readable and the new record is there. */
#include <string.h>
#include <unistd.h>

#include "draft/draft.h"
#include "engine/history.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/sdnpu-fuzz-history-%d.sdh", (int)getpid());
    fuzz_write_file(path, data, size);
    struct sd_history_params hp = sd_history_default_params();
    hp.fsync = false; /* the disk is not what is tested */
    struct sd_history *h = NULL;
    struct sd_err err = {0};
    if (sd_history_open(path, &hp, &h, &err) != SDNPU_OK) {
        FUZZ_CHECK(h == NULL && err.msg[0] != '\0');
        unlink(path);
        return 0;
    }
    size_t n = sd_history_n_records(h);
    for (size_t i = 0; i < n; i++) {
        struct sd_history_record r;
        FUZZ_CHECK(sd_history_record(h, i, &r) == SDNPU_OK);
    }
    struct sd_sam *sam = NULL;
    FUZZ_CHECK(sd_sam_create(64, &sam, &err) == SDNPU_OK);
    FUZZ_CHECK(sd_history_to_sam(h, sam, &err) == SDNPU_OK);
    sd_sam_free(sam);
    const int32_t rec[3] = {7, 8, 9};
    int rc = sd_history_append(h, rec, 3, "abc", 3, &err);
    sd_history_close(h);
    if (rc == SDNPU_OK) {
        FUZZ_CHECK(sd_history_open(path, &hp, &h, &err) == SDNPU_OK);
        FUZZ_CHECK(sd_history_n_records(h) == n + 1);
        sd_history_close(h);
    }
    unlink(path);
    return 0;
}
