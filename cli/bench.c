/* cli/bench.c - `sdnpu bench KIND ...`: benchmarks that print a table and,
 * with --json, write their numbers to a file.
 *
 * Each kind is one entry of k_kinds, its function in its own file
 * (cli/bench_KIND.c); a new benchmark adds a file and a line there. Here
 * too: the helpers the kinds share. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/base.h"
#include "cli.h"

struct bench_kind {
    const char *name;
    const char *help;
    int (*fn)(int argc, char **argv);
};

static const struct bench_kind k_kinds[] = {
    {"tokenize", "encode/decode speed of the tokenizer, beside llama.cpp's", cli_bench_tokenize},
    {"graphs", "prefill, decode, verification cost and memory of the static graphs, beside llama.cpp",
     cli_bench_graphs},
    {"verify", "a verification pass of L rows against one row, after documents of several lengths",
     cli_bench_verify},
    {"policy", "what the cost-aware drafting decision costs a decoding step", cli_bench_policy},
    {"calib", "what in-context calibration costs prefill, and what its subset head gives up",
     cli_bench_calib},
    {"prefix", "time to the first token of a request on a document seen before (prefix reuse, prompt cache)",
     cli_bench_prefix},
    {"switch", "graph switching: time to the first decoded token and peak prepared memory, each mode",
     cli_bench_switch},
    {"state", "loading a saved session against prefilling its context again", cli_bench_state},
};

static void bench_usage(FILE *f) {
    fprintf(f, "usage: sdnpu bench KIND [options]   (sdnpu bench KIND -h for its options)\n\nkinds:\n");
    for (size_t i = 0; i < SD_ARRAY_LEN(k_kinds); i++)
        fprintf(f, "  %-12s %s\n", k_kinds[i].name, k_kinds[i].help);
}

int cli_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_kinds); i++)
        if (!strcmp(argv[1], k_kinds[i].name)) return k_kinds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sdnpu bench: unknown kind '%s'\n", argv[1]);
    bench_usage(stderr);
    return 2;
}

/* ------------------------------------------------------------- helpers */

static bool file_exists(const char *p) { return access(p, R_OK) == 0; }

/* Look for rel under the current directory, then under the source tree. */
const char *cli_find_path(const char *rel, char *buf, size_t cap) {
    if (file_exists(rel)) {
        snprintf(buf, cap, "%s", rel);
        return buf;
    }
#ifdef SDNPU_SOURCE_DIR
    snprintf(buf, cap, "%s/%s", SDNPU_SOURCE_DIR, rel);
    if (file_exists(buf)) return buf;
#endif
    return NULL;
}

/* Single-quote s for /bin/sh. */
void cli_shell_quote(char *out, size_t cap, const char *s) {
    size_t o = 0;
    if (o + 1 < cap) out[o++] = '\'';
    for (; *s && o + 5 < cap; s++) {
        if (*s == '\'') {
            memcpy(out + o, "'\\''", 4);
            o += 4;
        } else {
            out[o++] = *s;
        }
    }
    if (o + 1 < cap) out[o++] = '\'';
    out[o] = 0;
}

/* The number member key of object o, or -1 when o is NULL or has no such
 * number: a peer's figure it did not report. */
static double num_or_none(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : -1;
}

/* The number member key of the JSON object on line (jansson reads it), or
 * -1 when it has none or the line is no JSON object. */
double cli_json_num(const char *line, const char *key) {
    json_t *o = json_loads(line, 0, NULL);
    double v = num_or_none(o, key);
    json_decref(o);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, long n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The first n tokens of the license texts. */
int32_t *cli_license_tokens(struct sdnpu_model *model, int32_t n) {
    size_t len = 0;
    char *text = cli_license_text((size_t)1 << 20, &len);
    size_t cap = len + 16, nt = 0;
    sdnpu_token *tok = text ? malloc(cap * sizeof *tok) : NULL;
    if (tok && (sdnpu_tokenize(model, text, len, SDNPU_TOKENIZE_ADD_SPECIAL, tok, cap, &nt) || nt < (size_t)n)) {
        free(tok);
        tok = NULL;
    }
    free(text);
    return tok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The default text: every license text, sorted by name, concatenated and
 * repeated up to target bytes. Returns malloc'd text or NULL. */
char *cli_license_text(size_t target, size_t *len) {
    const char *dir = "/usr/share/common-licenses";
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    char *all = NULL;
    size_t all_len = 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        free(names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char chunk[65536];
        size_t r;
        while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
            char *p = realloc(all, all_len + r);
            if (!p) break;
            all = p;
            memcpy(all + all_len, chunk, r);
            all_len += r;
        }
        fclose(f);
    }
    if (!all_len) {
        free(all);
        return NULL;
    }
    size_t reps = (target + all_len - 1) / all_len;
    char *text = malloc(all_len * reps);
    if (!text) {
        free(all);
        return NULL;
    }
    for (size_t i = 0; i < reps; i++)
        memcpy(text + i * all_len, all, all_len);
    free(all);
    *len = all_len * reps;
    return text;
}
