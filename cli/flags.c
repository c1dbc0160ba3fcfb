/* cli/flags.c - the subcommands' flag parser (cli_parse_flags), the value
 * parsers it uses, and the flag tables that several subcommands share. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* ------------------------------------------------------------- values */

/* Whether the strto* call that stopped at end read all of s: something,
 * nothing left over, no range error. */
static bool read_whole(const char *s, const char *end) { return !errno && end != s && !*end; }

static int parse_int(const char *who, const char *s, const char *flag, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!read_whole(s, end) || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in [%ld, %ld], got '%s'\n", who, flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *who, const char *s, const char *flag, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (read_whole(s, end) && v == v) return *out = v, 0;
    fprintf(stderr, "%s: %s expects a number, got '%s'\n", who, flag, s);
    return -1;
}

static int parse_size(const char *who, const char *s, const char *flag, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (end != s && *end) {
        switch (*end) {
        case 'k':
        case 'K':
            mul = 1024.0;
            break;
        case 'm':
        case 'M':
            mul = 1048576.0;
            break;
        case 'g':
        case 'G':
            mul = 1073741824.0;
            break;
        default:
            mul = 0;
        }
        if (mul > 0 && end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B")) mul = 0;
    }
    if (errno || end == s || mul == 0 || !(v >= 0) || v * mul > 1e18) {
        fprintf(stderr, "%s: %s expects a size such as 512M, 2G or 1048576, got '%s'\n", who, flag, s);
        return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

int cli_parse_int(const char *s, const char *flag, long lo, long hi, long *out) {
    return parse_int("sdnpu", s, flag, lo, hi, out);
}

int cli_parse_int_list(const char *s, const char *flag, long lo, long hi, int32_t *out, int max, int *n) {
    *n = 0;
    for (const char *p = s;; p++) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        long v;
        if (len == 0 || len >= sizeof item || *n == max) {
            fprintf(stderr, "sdnpu: %s expects up to %d comma-separated integers in [%ld, %ld], got '%s'\n", flag, max,
                    lo, hi, s);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_int("sdnpu", item, flag, lo, hi, &v)) return -1;
        out[(*n)++] = (int32_t)v;
        if (!comma) return 0;
        p = comma;
    }
}

int cli_parse_float(const char *s, const char *flag, float *out) {
    return parse_float("sdnpu", s, flag, out);
}

int cli_parse_size(const char *s, const char *flag, size_t *out) { return parse_size("sdnpu", s, flag, out); }

/* The index of s in the NULL-terminated list, or -1 after saying what it
 * should have been: "FLAG expects a, b or c, got 'S'". */
static int parse_choice(const char *who, const char *s, const char *flag, const char *const *choices) {
    size_t n = 0;
    while (choices[n]) {
        if (!strcmp(s, choices[n])) return (int)n;
        n++;
    }
    fprintf(stderr, "%s: %s expects ", who, flag);
    for (size_t k = 0; k < n; k++)
        fprintf(stderr, "%s%s", k == 0 ? "" : k + 1 < n ? ", " : " or ", choices[k]);
    fprintf(stderr, ", got '%s'\n", s);
    return -1;
}

/* An integer-like field of size bytes (bool, int, int32_t, long). */
static void store_int(void *dst, size_t size, long v) {
    if (size == sizeof(bool)) {
        bool b = v != 0;
        memcpy(dst, &b, sizeof b);
    } else if (size == sizeof(int32_t)) {
        int32_t x = (int32_t)v;
        memcpy(dst, &x, sizeof x);
    } else {
        int64_t x = v;
        memcpy(dst, &x, sizeof x);
    }
}

/* ------------------------------------------------------------- parser */

static const struct cli_flag *find_flag(const struct cli_parser *p, const char *a, void **dst) {
    for (const struct cli_flag_group *g = p->groups; g < p->groups + CLI_MAX_GROUPS && g->flags; g++)
        for (const struct cli_flag *f = g->flags; f->name; f++)
            if (!strcmp(a, f->name) || (f->alias && !strcmp(a, f->alias))) {
                *dst = (char *)g->base + f->off;
                return f;
            }
    return NULL;
}

static bool takes_value(const struct cli_flag *f) {
    return f->kind != CLI_CONST && f->kind != CLI_BITS_SET && f->kind != CLI_BITS_CLEAR && f->kind != CLI_RUN &&
           f->kind != CLI_SWITCH_FN;
}

/* Apply flag f (typed as a) with value v to dst: 0, or -1 after printing
 * what was wrong. */
static int apply(const struct cli_parser *p, const struct cli_flag *f, const char *a, const char *v,
                 void *dst) {
    const char *who = p->value_name ? p->value_name : "sdnpu";
    long n;
    int k;
    unsigned bits;
    switch (f->kind) {
    case CLI_CONST:
        store_int(dst, f->size, f->lo);
        return 0;
    case CLI_BITS_SET:
    case CLI_BITS_CLEAR:
        memcpy(&bits, dst, sizeof bits);
        bits = f->kind == CLI_BITS_SET ? bits | (unsigned)f->lo : bits & ~(unsigned)f->lo;
        memcpy(dst, &bits, sizeof bits);
        return 0;
    case CLI_STR:
        memcpy(dst, &v, sizeof v);
        return 0;
    case CLI_INT:
        if (parse_int(who, v, a, f->lo, f->hi, &n)) return -1;
        store_int(dst, f->size, n);
        return 0;
    case CLI_U64: {
        char *end;
        errno = 0;
        uint64_t u = strtoull(v, &end, 10);
        if (!read_whole(v, end) || *v == '-') {
            fprintf(stderr, "%s: %s expects a non-negative integer, got '%s'\n", who, a, v);
            return -1;
        }
        memcpy(dst, &u, sizeof u);
        return 0;
    }
    case CLI_FLOAT:
        return parse_float(who, v, a, dst);
    case CLI_SIZE:
        return parse_size(who, v, a, dst);
    case CLI_CHOICE:
    case CLI_CHOICE_INDEX:
        if ((k = parse_choice(who, v, a, f->choices)) < 0) return -1;
        if (f->kind == CLI_CHOICE_INDEX)
            store_int(dst, f->size, k);
        else
            memcpy(dst, &v, sizeof v);
        return 0;
    case CLI_LIST: {
        struct cli_list *l = dst;
        if (l->n == l->max) {
            fprintf(stderr, "%s: at most %zu %s\n", who, l->max, l->what);
            return -1;
        }
        l->items[l->n++] = v;
        return 0;
    }
    case CLI_FN:
    case CLI_SWITCH_FN:
        return f->fn(a, v, dst);
    case CLI_RUN:
        break;
    }
    return -1;
}

/* Whether f's field has the size its kind writes: a table naming a field
 * whose type has changed would otherwise write past it. */
static bool field_fits(const struct cli_flag *f) {
    switch (f->kind) {
    case CLI_CONST:
    case CLI_INT:
    case CLI_CHOICE_INDEX:
        return f->size == sizeof(bool) || f->size == sizeof(int32_t) || f->size == sizeof(int64_t);
    case CLI_BITS_SET:
    case CLI_BITS_CLEAR:
        return f->size == sizeof(unsigned);
    case CLI_STR:
    case CLI_CHOICE:
        return f->size == sizeof(const char *);
    case CLI_U64:
        return f->size == sizeof(uint64_t);
    case CLI_FLOAT:
        return f->size == sizeof(float);
    case CLI_SIZE:
        return f->size == sizeof(size_t);
    case CLI_LIST:
        return f->size == sizeof(struct cli_list);
    case CLI_FN:
    case CLI_SWITCH_FN:
    case CLI_RUN:
        return f->fn != NULL;
    }
    return false;
}

int cli_parse_flags(const struct cli_parser *p, int argc, char **argv) {
    for (const struct cli_flag_group *g = p->groups; g < p->groups + CLI_MAX_GROUPS && g->flags; g++)
        for (const struct cli_flag *f = g->flags; f->name; f++)
            if (!field_fits(f)) {
                fprintf(stderr, "%s: internal error: flag %s has a field of the wrong type\n", p->name,
                        f->name);
                abort();
            }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            p->usage(stdout);
            return 0;
        }
        void *dst = NULL;
        const struct cli_flag *f = find_flag(p, a, &dst);
        if (f && f->kind == CLI_RUN) return f->fn(a, NULL, dst);
        if (f && takes_value(f) && !v && !(p->style & (CLI_MISSING_IS_UNKNOWN | CLI_MISSING_LAST))) {
            fprintf(stderr, "%s: %s needs a value\n", p->missing_name ? p->missing_name : p->name, a);
            return 2;
        }
        if (f && (!takes_value(f) || v)) {
            if (apply(p, f, a, v, dst)) return 2;
            if (takes_value(f)) i++;
            continue;
        }
        /* Not a flag, or one without its value that counts as unknown. */
        int r = p->positional ? p->positional(a, p->ctx) : 0;
        if (r > 0) continue;
        if (r < 0) return 2;
        char see[128] = "";
        if (p->style & CLI_SEE_HELP) snprintf(see, sizeof see, " (see %s -h)", p->name);
        const char *what = p->style & CLI_SAY_ARGUMENT ? "argument" : "option";
        if (!v && (p->style & CLI_MISSING_LAST)) what = "option or missing value";
        fprintf(stderr, "%s: unknown %s '%s'%s\n", p->name, what, a, see);
        if (p->style & CLI_USAGE_ON_ERROR) p->usage(stderr);
        return 2;
    }
    return CLI_PARSED;
}

/* ------------------------------------------------------- shared tables */

static const char *const k_kernels[] = {"fast", "ggml", NULL};
const char *const cli_head_choices[] = {"auto", "exact", "certified", NULL};

/* --no-weight-cache: the empty directory, which cli_weight_cache reads as none. */
static int no_weight_cache(const char *flag, const char *value, void *field) {
    (void)flag;
    (void)value;
    *(const char **)field = "";
    return 0;
}

const struct cli_flag cli_model_flags[] = {
    {"-m", "--model", CLI_STR, CLI_AT(struct cli_model_opts, model)},
    {"-t", "--threads", CLI_INT, CLI_AT(struct cli_model_opts, n_threads), .lo = 1, .hi = 256},
    {"--head", NULL, CLI_CHOICE, CLI_AT(struct cli_model_opts, head), .choices = cli_head_choices},
    {0},
};

const struct cli_flag cli_session_flags[] = {
    {"--backend", NULL, CLI_STR, CLI_AT(struct sdnpu_session_params, backend)},
    {"--cl-device", NULL, CLI_INT, CLI_AT(struct sdnpu_session_params, cl_device), .lo = 0, .hi = 1024},
    {"--n-verify", NULL, CLI_INT, CLI_AT(struct sdnpu_session_params, n_verify), .lo = 1, .hi = 64},
    {"--mem-limit", NULL, CLI_SIZE, CLI_AT(struct sdnpu_session_params, mem_limit)},
    {"--prefill-policy", NULL, CLI_CHOICE_INDEX, CLI_AT(struct sdnpu_session_params, prefill_policy),
     .choices = (const char *const[]){"auto", "pad", "pipe", NULL}},
    {"--kernels", NULL, CLI_CHOICE, CLI_AT(struct sdnpu_session_params, kernels), .choices = k_kernels},
    {"--graph-switch", NULL, CLI_CHOICE_INDEX, CLI_AT(struct sdnpu_session_params, graph_switch),
     .choices = (const char *const[]){"progressive", "sync", "naive-async", NULL}},
    {"--weights", NULL, CLI_CHOICE, CLI_AT(struct sdnpu_session_params, weights),
     .choices = (const char *const[]){"shared", "private", NULL}},
    {"--weight-cache", NULL, CLI_STR, CLI_AT(struct sdnpu_session_params, weight_cache)},
    {"--no-weight-cache", NULL, CLI_SWITCH_FN, CLI_AT(struct sdnpu_session_params, weight_cache), .fn = no_weight_cache},
    {0},
};

const struct cli_flag cli_tuning_flags[] = {
    {"--policy-estimator", NULL, CLI_CHOICE_INDEX, CLI_AT(struct sdnpu_session_params, policy_estimator),
     .choices = (const char *const[]){"match", "store", "global", NULL}},
    {"--calib-lead", NULL, CLI_INT, CLI_AT(struct sdnpu_session_params, calib_lead), .lo = -1, .hi = 1 << 20},
    {"--calib-min-match", NULL, CLI_INT, CLI_AT(struct sdnpu_session_params, calib_min_match), .lo = 1, .hi = 1 << 20},
    {"--calib-params", NULL, CLI_STR, CLI_AT(struct sdnpu_session_params, calib_params)},
    {"--no-replies", NULL, CLI_CONST, CLI_AT(struct sdnpu_session_params, replies_bytes), .lo = -1},
    {0},
};

/* The smallest model file the default weight cache keeps: a smaller one
 * packs in well under a second (the test models), and a cache file for
 * each would only fill the user's disk. */
#define WEIGHT_CACHE_MIN_BYTES ((off_t)64 << 20)

void cli_weight_cache(struct sdnpu_session_params *sp, const char *model_path) {
    static char dir[4096];
    if (sp->weight_cache) {
        if (!*sp->weight_cache) sp->weight_cache = NULL; /* --no-weight-cache */
        return;
    }
    struct stat st;
    if (!model_path || stat(model_path, &st) || st.st_size < WEIGHT_CACHE_MIN_BYTES) return;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = xdg && *xdg ? snprintf(dir, sizeof dir, "%s/sdnpu/weights", xdg)
            : home && *home ? snprintf(dir, sizeof dir, "%s/.cache/sdnpu/weights", home)
                            : -1;
    if (n > 0 && n < (int)sizeof dir) sp->weight_cache = dir;
}

int cli_parse_spec(const char *flag, const char *text, struct sdnpu_spec *spec) {
    char err[256];
    if (sdnpu_spec_parse(text, spec, err, sizeof err) || sdnpu_spec_check(*spec, err, sizeof err)) {
        fprintf(stderr, "sdnpu: %s %s: %s\n", flag, text, err);
        return -1;
    }
    return 0;
}

/* --spec: the text kept for the stats, the struct for the library. */
static int gen_spec(const char *flag, const char *value, void *field) {
    struct cli_gen_opts *o = (struct cli_gen_opts *)((char *)field - offsetof(struct cli_gen_opts, spec));
    o->spec = value;
    return cli_parse_spec(flag, value, &o->gp.spec);
}

/* The schema's text lives as long as the process (the flag is read once;
 * each command's generation params point at it). */
static char *g_schema;
static void free_schema(void) { free(g_schema); }

/* --json-schema FILE: read and checked here, so that a bad schema is
 * named before a model loads. */
static int gen_json_schema(const char *flag, const char *value, void *field) {
    struct cli_gen_opts *o = (struct cli_gen_opts *)((char *)field - offsetof(struct cli_gen_opts, gp));
    size_t len;
    char *text = cli_read_file(value, &len), msg[512];
    if (!text) return -1;
    if (sdnpu_json_schema_check(text, msg, sizeof msg)) {
        fprintf(stderr, "sdnpu: %s %s: %s\n", flag, value, msg);
        free(text);
        return -1;
    }
    if (!g_schema) atexit(free_schema);
    free(g_schema);
    g_schema = text;
    o->gp.format = SDNPU_FORMAT_JSON_SCHEMA;
    o->gp.json_schema = text;
    return 0;
}

#define GEN(field) CLI_AT(struct cli_gen_opts, field)
const struct cli_flag cli_gen_flags[] = {
    {"--system", NULL, CLI_STR, GEN(system)},
    {"--spec", NULL, CLI_FN, GEN(spec), .fn = gen_spec},
    {"--history", NULL, CLI_STR, GEN(history)},
    {"--draft-max", NULL, CLI_INT, GEN(gp.draft_max), .lo = 1, .hi = 63},
    {"--no-adaptive", NULL, CLI_CONST, GEN(gp.adaptive), .lo = false},
    {"-n", "--n-predict", CLI_INT, GEN(gp.n_predict), .lo = -1, .hi = 1 << 30},
    {"-c", "--ctx-size", CLI_INT, GEN(sp.n_ctx), .lo = 16, .hi = 1 << 24},
    {"-b", "--batch-size", CLI_INT, GEN(sp.n_batch), .lo = 1, .hi = 256},
    {"--temp", NULL, CLI_FLOAT, GEN(gp.sampling.temperature)},
    {"--top-k", NULL, CLI_INT, GEN(gp.sampling.top_k), .lo = 0, .hi = 1 << 30},
    {"--top-p", NULL, CLI_FLOAT, GEN(gp.sampling.top_p)},
    {"--min-p", NULL, CLI_FLOAT, GEN(gp.sampling.min_p)},
    {"--repeat-penalty", NULL, CLI_FLOAT, GEN(gp.sampling.repeat_penalty)},
    {"--repeat-last-n", NULL, CLI_INT, GEN(gp.sampling.repeat_last_n), .lo = 0, .hi = 1 << 20},
    {"--json", NULL, CLI_CONST, GEN(gp.format), .lo = SDNPU_FORMAT_JSON},
    {"--json-schema", NULL, CLI_FN, GEN(gp), .fn = gen_json_schema},
    {0},
};

struct cli_gen_opts cli_gen_default_opts(void) {
    struct cli_gen_opts o;
    memset(&o, 0, sizeof o);
    o.sp = sdnpu_session_default_params();
    o.gp = sdnpu_generate_default_params();
    return o;
}

const char *cli_stop_words(int32_t stop_reason) {
    static const char *why[] = {"length",       "end of turn", "stop string",          "stopped",
                                "context full", "repetition",  "stopped in the prompt"};
    return stop_reason >= 0 && stop_reason < (int32_t)(sizeof why / sizeof why[0]) ? why[stop_reason] : "?";
}
