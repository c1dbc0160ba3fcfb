/* cli/cli.h - subcommands of the `sdnpu` command. Each takes argv starting
 * at its own name and returns the process exit code. */
#ifndef SD_CLI_H
#define SD_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "sdnpu.h"

/* A subcommand: its name, the arguments and the line `sdnpu --help`
 * shows for it, and its entry point. The table is the one list of
 * commands: dispatch and the help read it alike. */
struct cli_command {
    const char *name;
    const char *args;
    const char *summary;
    int (*fn)(int argc, char **argv);
};

/* In the order `sdnpu --help` lists them; ends with a NULL name. */
extern const struct cli_command cli_commands[];

/* The model path used when -m is not given: $SDNPU_MODEL, else
 * models/default.gguf under the current directory, else under the source
 * tree the binary was built from. */
const char *cli_default_model(void);
/* The model -m names: arg when it is a file (or a path), else a model of
 * scripts/models.tsv by name, installed as models/NAME.gguf (under the
 * current directory or the source tree) or in scripts/fetch_model's cache;
 * NULL gives cli_default_model(). Returns arg itself when nothing matches. */
const char *cli_model(const char *arg);
/* After a failed load of cli_model(arg) == resolved: a line on stderr saying
 * how to install the default model or a named one, where that applies. */
void cli_model_hint(const char *cmd, const char *arg, const char *resolved);

int cli_info(int argc, char **argv);
int cli_version(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_run(int argc, char **argv);
/* On stderr, a terminal's: a prompt's prefill of 1,024 tokens or more,
 * done of total, and its rate since t0 (CLOCK_MONOTONIC); the line cleared
 * when the prompt is in (an on_prefill callback's body). Returns true. */
bool cli_show_prefill(int32_t done, int32_t total, const struct timespec *t0);
int cli_summarize(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_serve(int argc, char **argv);

/* Helpers of cli/bench.c shared by the benchmarks: a file under the
 * current directory or the source tree; a /bin/sh single-quoted copy of s;
 * the number after "key": in a one-line JSON object (-1 if absent). */
const char *cli_find_path(const char *rel, char *buf, size_t cap);
void cli_shell_quote(char *out, size_t cap, const char *s);
double cli_json_num(const char *line, const char *key);
/* The median of v[0..n) (the mean of the two middle values for even n;
 * 0 for none), sorting v in place: v[0] is then the best time. */
double cli_median(double *v, long n);
int cli_bench_tokenize(int argc, char **argv);
int cli_bench_graphs(int argc, char **argv);
int cli_bench_verify(int argc, char **argv);
int cli_bench_policy(int argc, char **argv);
int cli_bench_calib(int argc, char **argv);
int cli_bench_prefix(int argc, char **argv);
/* Debian's license texts (/usr/share/common-licenses), sorted by name,
 * concatenated and repeated up to target bytes; malloc'd, or NULL. */
char *cli_license_text(size_t target, size_t *len);
/* The license texts' first n tokens (or more) by model's tokenizer, malloc'd; NULL if they are fewer. */
int32_t *cli_license_tokens(struct sdnpu_model *model, int32_t n);
int cli_bench_switch(int argc, char **argv);
int cli_bench_state(int argc, char **argv);

/* This machine's limits with n threads, measured now (cli/roofline.c):
 * read bandwidth and the int8 multiply-add peak of the instructions the
 * fast kernels use here (vpdpbusd with AVX-512 VNNI, else AVX2's
 * vpmaddubsw + vpmaddwd; 0 on other CPUs). Returns 0, or -1 if the buffer
 * cannot be had. */
struct cli_roofline {
    double read_gb_s;
    double int8_gmac_s;
    const char *int8_how; /* the instructions timed, or NULL */
    bool rss_reset;       /* the peak RSS set back after the read buffer, else it counts in the caller's */
};
int cli_roofline(int n_threads, struct cli_roofline *out);
int cli_profile(int argc, char **argv);

/* Read a whole file (or stdin for "-"), NUL-terminated; free() it. NULL
 * after printing why, also for a file past CLI_MAX_FILE (cli/io.c). */
#define CLI_MAX_FILE ((size_t)256 << 20)
char *cli_read_file(const char *path, size_t *len);
/* getline with a bound: a line of max bytes or more is read to its end but
 * only its first max - 1 bytes are kept, and *too_long is set. Returns the
 * bytes kept (newline included), or -1 at the end of input or when out of
 * memory. */
ssize_t cli_getline(FILE *f, char **line, size_t *cap, size_t max, bool *too_long);

/* Parse a command-line value for flag: an integer in [lo, hi], a float
 * (not NaN), or a byte count with an optional K/M/G suffix (powers of
 * 1024). Return 0, or -1 after printing what was wrong, starting "sdnpu:"
 * (cli/flags.c). */
int cli_parse_int(const char *s, const char *flag, long lo, long hi, long *out);
/* A comma-separated list of integers in [lo, hi] ("1,8,32"), at most max
 * of them, into out[0..*n). 0, or -1 after saying what was wrong: an empty
 * item, an integer out of range or unreadable, more than max. */
int cli_parse_int_list(const char *s, const char *flag, long lo, long hi, int32_t *out, int max, int *n);
int cli_parse_float(const char *s, const char *flag, float *out);
int cli_parse_size(const char *s, const char *flag, size_t *out);

/* ---------------------------------------------------------------- flags
 * The subcommands' one flag parser (cli/flags.c). A command declares its
 * flags as tables of struct cli_flag, each entry naming a field by its
 * offset in a struct; a struct cli_flag_group binds a table to the struct
 * it fills, so one table (the session flags, say) serves every command
 * that has those flags. */

enum cli_flag_kind {
    /* no value */
    CLI_CONST,      /* store lo in the field (bool, int, int32_t or long) */
    CLI_BITS_SET,   /* set the bits lo in an unsigned field */
    CLI_BITS_CLEAR, /* clear them */
    CLI_RUN,        /* fn(flag, NULL, field), and the command ends with what it returns */
    CLI_SWITCH_FN,  /* fn(flag, NULL, field): 0, or -1 after printing what was wrong */
    /* a value: the next argument */
    CLI_STR,          /* the value itself (const char *) */
    CLI_INT,          /* an integer in [lo, hi] (int, int32_t or long) */
    CLI_U64,          /* a non-negative integer (uint64_t) */
    CLI_FLOAT,        /* a number, not NaN (float) */
    CLI_SIZE,         /* a byte count, e.g. 600M (size_t) */
    CLI_CHOICE,       /* one of choices, kept as the string (const char *) */
    CLI_CHOICE_INDEX, /* one of choices, kept as its index (int, int32_t or long) */
    CLI_LIST,         /* appended to a struct cli_list */
    CLI_FN,           /* fn(flag, value, field): 0, or -1 after printing what was wrong */
};

struct cli_flag {
    const char *name, *alias; /* "-n", "--n-predict" (alias may be NULL) */
    enum cli_flag_kind kind;
    size_t off, size; /* the field: CLI_AT(struct, member) */
    long lo, hi;
    const char *const *choices; /* CLI_CHOICE*: NULL-terminated */
    int (*fn)(const char *flag, const char *value, void *field);
};
/* A table ends with {0}. */
#define CLI_AT(type, member) .off = offsetof(type, member), .size = sizeof(((type *)0)->member)

/* A repeatable flag's values: at most max; one more is refused with
 * "at most MAX WHAT". */
struct cli_list {
    const char **items;
    size_t n, max;
    const char *what;
};

struct cli_flag_group {
    const struct cli_flag *flags;
    void *base; /* the struct the table's offsets are in */
};

/* How a command words and treats what it cannot take (struct cli_parser's
 * style; 0 is run's way):
 *   a flag that takes a value, last: "MISSING_NAME: FLAG needs a value";
 *   with CLI_MISSING_IS_UNKNOWN it counts as an unknown argument; with
 *   CLI_MISSING_LAST every last argument but -h is checked for a value
 *   first, and an unknown one too is "NAME: unknown option or missing
 *   value 'ARG'";
 *   an unknown argument: "NAME: unknown option 'ARG'" ("argument" with
 *   CLI_SAY_ARGUMENT), then " (see NAME -h)" with CLI_SEE_HELP, then the
 *   usage on stderr with CLI_USAGE_ON_ERROR. */
enum {
    CLI_MISSING_IS_UNKNOWN = 1,
    CLI_MISSING_LAST = 2,
    CLI_SAY_ARGUMENT = 4,
    CLI_SEE_HELP = 8,
    CLI_USAGE_ON_ERROR = 16,
    /* bench graphs, bench tokenize, profile */
    CLI_STYLE_BENCH = CLI_MISSING_IS_UNKNOWN | CLI_SAY_ARGUMENT | CLI_USAGE_ON_ERROR,
};

#define CLI_MAX_GROUPS 6
struct cli_parser {
    const char *name;       /* "sdnpu eval": how messages about arguments start */
    void (*usage)(FILE *f); /* -h, --help: printed to stdout, exit code 0 */
    struct cli_flag_group groups[CLI_MAX_GROUPS]; /* searched in order; the first without flags ends them */
    unsigned style;
    const char *missing_name; /* how "needs a value" starts (default: name) */
    const char *value_name;   /* how messages about bad values start (default "sdnpu") */
    /* An argument that is no flag (or a flag without its value, with
     * CLI_MISSING_IS_UNKNOWN): 1 taken, 0 unknown, -1 after printing what
     * was wrong. NULL: every such argument is unknown. */
    int (*positional)(const char *arg, void *ctx);
    void *ctx;
};

/* Parse argv[1..argc). Returns CLI_PARSED when the command goes on, else
 * the exit code it is to return at once: 0 after -h or a CLI_RUN flag, 2
 * after a bad argument (said on stderr). */
#define CLI_PARSED (-1)
int cli_parse_flags(const struct cli_parser *p, int argc, char **argv);

/* Tables shared by several commands. -m/--model and -t/--threads [1, 256]
 * (run, summarize, chat, eval): */
struct cli_model_opts {
    const char *model;
    int32_t n_threads;
    const char *head; /* --head: sdnpu_model_params' */
};
extern const struct cli_flag cli_model_flags[];
/* --head's values (sdnpu_model_params' head). */
extern const char *const cli_head_choices[];
/* The session flags (run, summarize, chat, serve), over a struct
 * sdnpu_session_params: --backend, --cl-device, --n-verify, --mem-limit,
 * --prefill-policy, --kernels, --graph-switch, --weights, --weight-cache,
 * --no-weight-cache. */
extern const struct cli_flag cli_session_flags[];
/* Drafting's tuning, over a struct sdnpu_session_params too (run,
 * summarize, chat, serve, eval): --policy-estimator, --calib-lead,
 * --calib-min-match, --calib-params. For the measurements that chose the
 * defaults; none changes the output. */
extern const struct cli_flag cli_tuning_flags[];
/* The weight cache a command's session uses: --weight-cache's directory;
 * none after --no-weight-cache; else, for a model file of 64 MiB or more,
 * $XDG_CACHE_HOME/sdnpu/weights (~/.cache/sdnpu/weights). */
void cli_weight_cache(struct sdnpu_session_params *sp, const char *model_path);
/* The generation flags of run, summarize and chat, over a struct
 * cli_gen_opts: --system, --spec, --history, --draft-max, --no-adaptive,
 * -n, -c, -b, --temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n (not --seed: run and chat check it each their own way).
 * Bind the other two tables to m and sp (CLI_GEN_GROUPS). */
struct cli_gen_opts {
    struct cli_model_opts m;
    struct sdnpu_session_params sp;
    struct sdnpu_generate_params gp; /* gp.spec is set by --spec */
    const char *system, *spec, *history; /* spec: the --spec text as given, NULL if none */
};
extern const struct cli_flag cli_gen_flags[];
#define CLI_GEN_GROUPS(o)                                                                                    \
    {cli_model_flags, &(o)->m}, {cli_session_flags, &(o)->sp}, {cli_tuning_flags, &(o)->sp}, {cli_gen_flags, (o)}
/* The library's defaults, nothing else set. */
struct cli_gen_opts cli_gen_default_opts(void);
/* A request's stop reason (sdnpu_stats.stop_reason) as run and chat print it. */
const char *cli_stop_words(int32_t stop_reason);
/* A --spec value parsed and checked (sdnpu_spec_parse, sdnpu_spec_check)
 * into *spec: 0, or -1 after printing what was wrong, e.g. "sdnpu: --spec
 * sam-tree+calib: calib needs a drafting drafter ...". The
 * one place the command reads spec text. */
int cli_parse_spec(const char *flag, const char *text, struct sdnpu_spec *spec);
/* What `sdnpu summarize` asks an instruction-tuned model after the
 * document (docs/benchmarks.md, stops 87-88), and so the evaluation's
 * summary set in chat format. */
#define CLI_SUMMARY_INSTRUCTION "Summarize the document above in two or three short sentences of your own."
/* Their --help lines that run and chat word alike (summarize has its own
 * -c and --temp defaults, then CLI_HELP_SAMPLER). */
#define CLI_HELP_SAMPLING                                                                                    \
    "  -c, --ctx-size N       context size (default 4096)\n" CLI_HELP_BATCH_THREADS                          \
    "      --temp T           temperature (default 0.8; 0 = greedy)\n" CLI_HELP_SAMPLER
#define CLI_HELP_BATCH_THREADS                                                                               \
    "  -b, --batch-size N     prefill chunk length (default 256)\n"                                          \
    "  -t, --threads N        threads (default: all cores)\n"
#define CLI_HELP_SAMPLER                                                                                     \
    "      --top-k N          (default 40)\n"                                                                \
    "      --top-p P          (default 0.95)\n"                                                              \
    "      --min-p P          (default 0.05)\n"                                                              \
    "      --repeat-penalty R (default 1.0 = off)\n"                                                         \
    "      --repeat-last-n N  (default 64)\n"                                                                \
    "      --seed N           (default 12648430)\n"                                                          \
    "      --json             the reply is one JSON object: each token is chosen among those that keep\n"    \
    "                         it one (lossless with every --spec)\n"                                         \
    "      --json-schema FILE the reply is one JSON object that satisfies the JSON Schema in FILE (the\n"    \
    "                         subset: docs/api-generate.md; anything else is refused by name)\n"
#define CLI_HELP_SESSION                                                                                     \
    "      --backend NAME     graph backend: cpu (default) or opencl\n"                                      \
    "      --cl-device N      OpenCL device index (see sdnpu info --devices)\n"                              \
    "      --n-verify N       rows of the decode/verification graph L2 (default: from the saved profile, else 4)\n"                        \
    "      --mem-limit SIZE   most memory for prepared graphs, e.g. 600M (default: no limit)\n"              \
    "      --prefill-policy P last partial prefill chunk: auto (default), pad, pipe\n"                        \
    "      --graph-switch M   how --spec ...+switch moves from prefill to decode graphs: progressive\n"       \
    "                         (default), sync, naive-async\n"                                                \
    CLI_HELP_TUNING
/* Drafting's tuning (cli_tuning_flags), for ablations. */
#define CLI_HELP_TUNING                                                                                      \
    "      --policy-estimator E  ablation: cost-aware drafting's acceptance estimate: match (default: by\n"   \
    "                         match length), store (by drafting store), global (one rate)\n"                 \
    "      --calib-lead N     ablation: +calib's sequences rank -1 last (default), 0 by match length,\n"     \
    "                         N > 0 first from a match of N tokens\n"                                         \
    "      --calib-min-match N  ablation: shortest match a calibrated sequence drafts from (default 2)\n"    \
    "      --calib-params LIST  ablation: calibration's parameters, e.g. top_k=3,min_prob=0.2,max_depth=8,\n"\
    "                         node_budget=12,prefix=3,max_store=24 (the defaults)\n"                     \
    "      --no-replies       ablation: no replies store (the session's earlier replies, drafted from)\n"

#endif
