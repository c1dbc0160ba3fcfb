/* engine/spec.c - the speculative-decoding configuration: parsed once from
 * text at the edge, checked, and carried as struct sdnpu_spec below it. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "sdnpu.h"

static const struct {
    const char *name;
    enum sdnpu_drafter d;
} DRAFTERS[] = {
    {"none", SDNPU_DRAFTER_NONE},       {"cpu-vanilla", SDNPU_DRAFTER_NONE}, {"npu-vanilla", SDNPU_DRAFTER_NPU_VANILLA},
    {"pld", SDNPU_DRAFTER_PLD},         {"sam", SDNPU_DRAFTER_SAM},          {"sam-tree", SDNPU_DRAFTER_SAM_TREE},
};

/* The stages, by their names in the text. */
enum stage { ST_REUSE, ST_CALIB, ST_SWITCH, ST_N };
static const char *const STAGES[ST_N] = {"reuse", "calib", "switch"};

static bool *stage_flag(struct sdnpu_spec *s, enum stage k) {
    return k == ST_REUSE ? &s->reuse : k == ST_CALIB ? &s->calibration : &s->graph_switching;
}

static enum sdnpu_status spec_err(char *err, size_t cap, enum sdnpu_status rc, const char *fmt, ...) {
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* One '+'-separated part of the text: a drafter (the first part only), a
 * stage, or "sdnpu". */
static enum sdnpu_status parse_part(const char *p, size_t n, bool first, struct sdnpu_spec *out, char *err,
                                    size_t cap) {
    char part[32];
    if (n == 0 || n >= sizeof part)
        return spec_err(err, cap, SDNPU_ERR_INVALID_ARG, "an empty or overlong part");
    memcpy(part, p, n);
    part[n] = '\0';
    if (first && !strcmp(part, "sdnpu")) {
        *out = (struct sdnpu_spec){SDNPU_DRAFTER_SAM_TREE, true, true, true};
        return SDNPU_OK;
    }
    for (size_t i = 0; first && i < SD_ARRAY_LEN(DRAFTERS); i++)
        if (!strcmp(part, DRAFTERS[i].name)) {
            out->drafter = DRAFTERS[i].d;
            return SDNPU_OK;
        }
    for (int k = 0; !first && k < ST_N; k++)
        if (!strcmp(part, STAGES[k])) {
            bool *f = stage_flag(out, (enum stage)k);
            if (*f) return spec_err(err, cap, SDNPU_ERR_INVALID_ARG, "stage '%s' is given twice", part);
            *f = true;
            return SDNPU_OK;
        }
    return spec_err(err, cap, SDNPU_ERR_INVALID_ARG,
                    first ? "unknown drafter '%s' (none, cpu-vanilla, npu-vanilla, pld, sam, sam-tree, sdnpu)"
                          : "unknown stage '%s' (reuse, calib, switch)",
                    part);
}

enum sdnpu_status sdnpu_spec_parse(const char *text, struct sdnpu_spec *out, char *err, size_t err_size) {
    if (!out) return SDNPU_ERR_INVALID_ARG;
    struct sdnpu_spec s = {SDNPU_DRAFTER_NONE, false, false, false};
    if (err && err_size) err[0] = '\0';
    if (text && *text) {
        bool first = true;
        for (const char *p = text;; first = false) {
            const char *plus = strchr(p, '+');
            size_t n = plus ? (size_t)(plus - p) : strlen(p);
            enum sdnpu_status rc = parse_part(p, n, first, &s, err, err_size);
            if (rc) return rc;
            if (!plus) break;
            p = plus + 1;
        }
    }
    *out = s;
    return SDNPU_OK;
}

enum sdnpu_status sdnpu_spec_check(struct sdnpu_spec s, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if ((unsigned)s.drafter > SDNPU_DRAFTER_SAM_TREE)
        return spec_err(err, err_size, SDNPU_ERR_INVALID_ARG, "drafter %d is not one sdnpu knows", (int)s.drafter);
    if (s.reuse && s.drafter < SDNPU_DRAFTER_PLD)
        return spec_err(err, err_size, SDNPU_ERR_INVALID_ARG,
                        "reuse needs a drafting drafter (pld, sam, sam-tree)");
    if (s.calibration && s.drafter < SDNPU_DRAFTER_PLD)
        return spec_err(err, err_size, SDNPU_ERR_INVALID_ARG,
                        "calib needs a drafting drafter (pld, sam, sam-tree)");
    return SDNPU_OK;
}

enum sdnpu_status sdnpu_spec_str(struct sdnpu_spec s, char *buf, size_t cap, size_t *n_bytes) {
    static const char *const names[] = {"none", "npu-vanilla", "pld", "sam", "sam-tree"};
    if (!n_bytes || (!buf && cap)) return SDNPU_ERR_INVALID_ARG;
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, "%s%s%s%s", (unsigned)s.drafter <= SDNPU_DRAFTER_SAM_TREE ? names[s.drafter] : "?",
                     s.reuse ? "+reuse" : "", s.calibration ? "+calib" : "", s.graph_switching ? "+switch" : "");
    if ((size_t)n + 1 > cap) {
        *n_bytes = (size_t)n + 1;
        return SDNPU_ERR_BUFFER_TOO_SMALL;
    }
    memcpy(buf, tmp, (size_t)n + 1);
    *n_bytes = (size_t)n;
    return SDNPU_OK;
}
