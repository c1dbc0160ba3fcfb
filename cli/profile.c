/* cli/profile.c - `sdnpu profile`: measure (or show the cached) load and
 * compute time of every block's graph at each row count L, and the
 * per-token cost curve (sched/profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "engine/tools.h"
#include "sched/profile.h"

static void usage(FILE *f) {
    fprintf(
        f, "usage: sdnpu profile [-m MODEL] [-t THREADS] [--backend NAME] [--cl-device N] [--reps N]\n"
           "                     [--kernels fast|ggml] [--weights shared|private] [--L 1,2,4,...] [--force]\n"
           "                     [--out FILE]\n"
           "  Times preparing (loading) and running every block's graph and the head at each L\n"
           "  (default 1,2,3,4,8,16,32,64,128,256; median of --reps, default 3), prints the table and\n"
           "  the per-token cost at each L, and saves MODEL.profile.json beside the model file (links\n"
           "  followed: every name of one file shares its profile), which sessions read to choose\n"
           "  their graphs' rows. It measures what a session of the model with the same -t, --backend,\n"
           "  --kernels and --weights runs, and is kept under that session's key; a saved profile for\n"
           "  the same key is shown again without measuring unless --force.\n");
}

/* The passes' rows: text in the model's language, as a session's are (a
 * certified head costs what its rows' certainty makes it), some 290
 * tokens, repeated where a pass is longer. */
static const char k_text[] =
    "The release notes list the changes that users will notice first. The command line now reads a "
    "configuration file from the user's home directory, so that options given on every run can be written "
    "down once. Network errors are retried three times before a download is reported as failed, and the "
    "message names the server and the file that could not be fetched. The index of installed packages is "
    "kept in a smaller format, which makes searching it about twice as fast on a slow disk. Two older "
    "options were removed after a year of warnings; the manual explains what to use instead. Thanks to "
    "everyone who reported problems, tested the release candidates and translated the documentation into "
    "eleven languages. The next release is planned for the spring, and the list of open questions is on "
    "the project's web site, where comments are welcome. Some of those questions are about the build: "
    "whether to keep the old scripts for another year, how long a full build may take on the smallest "
    "supported machine, and which compilers the tests should run with. Others are about the documents, "
    "which grew in every release and are hard to search; a volunteer has offered to write an index. If you "
    "maintain a package that depends on one of the removed options, please write to the list before the "
    "end of the month, so that the fix can go into the first update. Downloads, checksums and the full "
    "list of changes are on the release page.";

static void progress(int done, int total, const struct sd_profile_entry *e, void *user) {
    (void)user;
    fprintf(stderr, "\rprofiling: %d/%d (%s %d, L=%d: load %.1f ms, compute %.2f ms)      ", done, total,
            e->block < 0 ? "head" : "block", e->block < 0 ? 0 : e->block, e->L, e->load_ms, e->compute_ms);
    if (done == total) fprintf(stderr, "\n");
}

static int parse_kernels(const char *flag, const char *v, void *field) {
    if (sd_kernels_parse(v, field)) return 0;
    fprintf(stderr, "sdnpu profile: %s expects fast or ggml, got '%s'\n", flag, v);
    return -1;
}

struct profile_opts {
    const char *model_path, *backend, *out, *weights;
    enum sd_kernels kernels;
    long threads, reps, cl_device;
    bool force;
    struct row_counts {
        int32_t Ls[SD_PROFILE_MAX_L], n_L;
    } L;
};

static int parse_L(const char *flag, const char *v, void *field) {
    struct row_counts *L = field;
    int n = 0;
    if (cli_parse_int_list(v, flag, 1, SD_MAX_BATCH_ROWS, L->Ls, SD_PROFILE_MAX_L, &n)) return -1;
    L->n_L = (int32_t)n;
    return 0;
}

#define OPT(field) CLI_AT(struct profile_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", "--model", CLI_STR, OPT(model_path)},
    {"-t", NULL, CLI_INT, OPT(threads), .lo = 1, .hi = 256},
    {"--backend", NULL, CLI_STR, OPT(backend)},
    {"--cl-device", NULL, CLI_INT, OPT(cl_device), .lo = 0, .hi = 1024},
    {"--reps", NULL, CLI_INT, OPT(reps), .lo = 1, .hi = 32},
    {"--kernels", NULL, CLI_FN, OPT(kernels), .fn = parse_kernels},
    {"--weights", NULL, CLI_STR, OPT(weights)},
    {"--L", NULL, CLI_FN, OPT(L), .fn = parse_L},
    {"--force", NULL, CLI_CONST, OPT(force), .lo = true},
    {"--out", NULL, CLI_STR, OPT(out)},
    {0},
};

/* Each graph's load and run time at each L: the blocks in order, then the head. */
static void print_graphs(const struct sd_profile *prof) {
    printf("| graph | layers |");
    for (int32_t i = 0; i < prof->n_L; i++)
        printf(" L=%d load / run ms |", prof->Ls[i]);
    printf("\n|---|---|");
    for (int32_t i = 0; i < prof->n_L; i++)
        printf("---|");
    printf("\n");
    for (int32_t b = 0; b <= prof->n_blocks; b++) {
        const int32_t want = b == prof->n_blocks ? -1 : b;
        bool printed = false;
        for (int32_t i = 0; i < prof->n_entries; i++) {
            const struct sd_profile_entry *en = &prof->entries[i];
            if (en->block != want) continue;
            if (!printed && want < 0) printf("| head | - |");
            if (!printed && want >= 0) printf("| block %d | %d-%d |", want, en->l0, en->l1 - 1);
            printed = true;
            printf(" %.1f / %.2f |", en->load_ms, en->compute_ms);
        }
        if (printed) printf("\n");
    }
}

/* A whole pass's time at each L, and its time a row against the fewest
 * rows profiled (one, by default). */
static void print_curve(const struct sd_profile *prof) {
    int32_t L0 = prof->Ls[0];
    for (int32_t i = 1; i < prof->n_L; i++)
        L0 = SD_MIN(L0, prof->Ls[i]);
    double pass[SD_PROFILE_MAX_L] = {0}, bytes[SD_PROFILE_MAX_L] = {0}, base = 0;
    for (int32_t i = 0; i < prof->n_L; i++) {
        for (int32_t k = 0; k < prof->n_entries; k++)
            if (prof->entries[k].L == prof->Ls[i]) {
                pass[i] += prof->entries[k].compute_ms;
                bytes[i] += (double)prof->entries[k].bytes;
            }
        if (prof->Ls[i] == L0) base = pass[i] / L0;
    }
    printf("\nper-token cost of a whole forward pass (all blocks + head) at each L:\n\n"
           "| L | pass ms | ms per row | relative to L=%d | prepared MiB (all blocks + head, shared weights "
           "apart) |\n"
           "|---|---|---|---|---|\n",
           L0);
    for (int32_t i = 0; i < prof->n_L; i++) {
        const int32_t L = prof->Ls[i];
        printf("| %d | %.2f | %.3f | %.3f | %.0f |\n", L, pass[i], pass[i] / L,
               base > 0 ? pass[i] / L / base : 0, bytes[i] / 1048576.0);
    }
}

/* The words the head's rows were decoded as (a profile just measured), on
 * one line, ill-formed UTF-8 (a byte token of a character cut off)
 * replaced. */
static void print_decoded(const struct sdnpu_model *model, const struct sd_profile *p) {
    char text[1024];
    size_t n = 0;
    if (p->n_decoded <= 0 ||
        sdnpu_detokenize(model, p->decoded, (size_t)p->n_decoded, false, text, sizeof text, &n))
        return;
    char *clean = sd_utf8_clean(text, n, NULL);
    if (!clean) return;
    for (char *c = clean; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    printf("\nthe head was timed on rows the model decoded itself: \"%s\"\n", clean);
    sd_free(clean);
}

/* The request the rows the head is timed on answer, as `sdnpu summarize`
 * asks it: an instruction-tuned model's turn holding the document (as
 * much of k_text as fits SD_PROFILE_MAX_PROMPT tokens, in whole
 * sentences) and the summary instruction, no system turn; its tokens into
 * tokens, their count returned. 0 for a base model, which continues the
 * text. A certified head costs what its rows' certainty makes it, and an
 * instruction-tuned model is far surer answering than reading prose. */
static int32_t summary_request(const struct sdnpu_model *model, int32_t *tokens) {
    if (!sdnpu_model_has_chat_template(model)) return 0;
    static char doc[sizeof k_text], user[sizeof k_text + 512], turn[sizeof k_text + 1024];
    for (size_t len = sizeof k_text - 1; len > 0;) {
        memcpy(doc, k_text, len);
        doc[len] = '\0';
        const char *docs[] = {doc};
        size_t n = 0, n_tok = 0;
        if (sdnpu_documents_format(docs, 1, CLI_SUMMARY_INSTRUCTION, user, sizeof user, &n)) return 0;
        const int64_t t = sd_tool_model_chat_turn(model, "", user, turn, sizeof turn);
        if (t < 0) return 0;
        if (sdnpu_tokenize(model, turn, (size_t)t, SDNPU_TOKENIZE_ADD_SPECIAL, tokens, SD_PROFILE_MAX_PROMPT,
                           &n_tok) == SDNPU_OK)
            return (int32_t)n_tok;
        do /* to the sentence before */
            len--;
        while (len > 0 && !(k_text[len - 1] == '.' && k_text[len] == ' '));
    }
    return 0;
}

/* A profile saved under key (at out, or beside the model where
 * beside_model: one kept beside a link to it, as before, is read and then
 * saved beside the file itself); false, with why said where it was stale
 * or broken, where there is none to use. */
static bool read_saved(const char *model_path, const char *out, bool beside_model, const char *key,
                       struct sd_profile *prof) {
    struct sd_err e = {0};
    char found[4096] = "";
    int rc = beside_model ? sd_profile_load_for(model_path, key, prof, found, sizeof found, &e)
                          : sd_profile_load(out, key, prof, &e);
    if (rc == SDNPU_OK && beside_model && strcmp(found, out) != 0 && sd_profile_save(prof, out, &e))
        fprintf(stderr, "sdnpu profile: %s\n", e.msg);
    if (rc == SDNPU_ERR_STATE || rc == SDNPU_ERR_FORMAT)
        fprintf(stderr, "sdnpu profile: measuring again: %s\n", e.msg);
    return rc == SDNPU_OK;
}

/* Measure as o asks, on the sample text and the summary request, and save
 * the profile at out under key. 0, or 1 with the message said. */
static int measure_and_save(struct sdnpu_model *model, struct sd_pool *pool, const struct profile_opts *o,
                            struct sd_wstore *weights, const char *key, const char *out,
                            struct sd_profile *prof) {
    struct sd_err e = {0};
    int32_t tokens[512];
    size_t n_tok = 0;
    if (sdnpu_tokenize(model, k_text, sizeof k_text - 1, SDNPU_TOKENIZE_ADD_SPECIAL, tokens, 512, &n_tok))
        n_tok = 0; /* a model without a vocabulary: tokens spread over it */
    int32_t prompt[SD_PROFILE_MAX_PROMPT];
    const struct sd_profile_spec spec = {.backend = o->backend,
                                         .cl_device = (int)o->cl_device,
                                         .kernels = o->kernels,
                                         .weights = weights,
                                         .Ls = o->L.Ls,
                                         .n_L = o->L.n_L,
                                         .reps = (int)o->reps,
                                         .tokens = tokens,
                                         .n_tokens = (int32_t)n_tok,
                                         .prompt = prompt,
                                         .n_prompt = summary_request(model, prompt),
                                         .progress = progress};
    if (sd_profile_measure(sd_tool_model_weights(model), pool, &spec, prof, &e)) {
        fprintf(stderr, "\nsdnpu profile: %s\n", e.msg);
        return 1;
    }
    snprintf(prof->key, sizeof prof->key, "%s", key);
    if (sd_profile_save(prof, out, &e)) {
        fprintf(stderr, "sdnpu profile: %s\n", e.msg);
        return 1;
    }
    return 0;
}

static void print_profile(const struct sdnpu_model *model, const char *model_path, const char *out,
                          bool cached, const struct sd_profile *prof) {
    printf("%s profile of %s (%s)\n%s\n\n", cached ? "cached" : "measured", model_path, out, prof->key);
    print_graphs(prof);
    print_curve(prof);
    print_decoded(model, prof);
    char why[512];
    const int32_t rows = sd_session_verify_rows_why(prof, why, sizeof why);
    printf("\nsessions that read this profile verify %d rows (n_verify 0; --n-verify sets them)%s%s\n", rows,
           *why ? ": " : "", why);
}

int cli_profile(int argc, char **argv) {
    struct profile_opts o = {
        .kernels = SD_KERNELS_FAST, .reps = 3, .L = {{1, 2, 3, 4, 8, 16, 32, 64, 128, 256}, 10}};
    const struct cli_parser parser = {"sdnpu profile", usage, {{k_flags, &o}}, .style = CLI_STYLE_BENCH};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model_path = cli_model(o.model_path), *out = o.out;
    struct sdnpu_model_params mp = sdnpu_model_default_params();
    mp.n_threads = (int32_t)o.threads;
    struct sdnpu_model *model = NULL;
    char err[512], path[4096], key[512];
    if (sdnpu_model_load(model_path, mp, &model, err, sizeof err)) {
        fprintf(stderr, "sdnpu profile: %s\n", err);
        return 1;
    }
    const bool beside_model = !out;
    if (beside_model) {
        if (!sd_profile_path(model_path, path, sizeof path)) {
            fprintf(stderr, "sdnpu profile: the model's path is too long: %s\n", model_path);
            sdnpu_model_free(model);
            return 1;
        }
        out = path;
    }
    int ret = 1;
    struct sd_pool *pool = NULL;
    struct sd_err e = {0};
    struct sd_profile prof = {0};
    /* Measured as the sessions that read it run, and kept under their key. */
    struct sdnpu_session_params sp = sdnpu_session_default_params();
    sp.backend = o.backend;
    sp.cl_device = (int32_t)o.cl_device;
    sp.kernels = sd_kernels_name(o.kernels);
    sp.weights = o.weights;
    cli_weight_cache(&sp, model_path);
    struct sd_wstore *weights = NULL;
    if (sd_tool_profile_target(model, sp, key, sizeof key, &weights)) {
        fprintf(stderr, "sdnpu profile: %s\n", sdnpu_model_last_error(model));
        goto done;
    }
    if (sd_pool_create(sd_tool_model_threads(model), &pool, &e)) {
        fprintf(stderr, "sdnpu profile: %s\n", e.msg);
        goto done;
    }
    const bool cached = !o.force && read_saved(model_path, out, beside_model, key, &prof);
    if (!cached && measure_and_save(model, pool, &o, weights, key, out, &prof)) goto done;
    print_profile(model, model_path, out, cached, &prof);
    ret = 0;
done:
    sd_profile_free(&prof);
    sd_pool_free(pool);
    sdnpu_model_free(model);
    return ret;
}
