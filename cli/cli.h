/* cli/cli.h - subcommands of the `sdnpu` command. Each takes argv starting
 * at its own name and returns the process exit code. */
#ifndef SD_CLI_H
#define SD_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

struct cli_command {
    const char *name;
    int (*fn)(int argc, char **argv);
};

extern const struct cli_command cli_commands[];

/* The model path used when -m is not given: $SDNPU_MODEL, else
 * models/default.gguf under the current directory, else under the source
 * tree the binary was built from. */
const char *cli_default_model(void);

int cli_info(int argc, char **argv);
int cli_version(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_run(int argc, char **argv);
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
int cli_bench_graphs(int argc, char **argv);
int cli_bench_policy(int argc, char **argv);

/* This machine's limits with n threads, measured now (cli/roofline.c):
 * read bandwidth and the int8 vpdpbusd multiply-add peak (0 where the CPU
 * has no AVX-512 VNNI). Returns 0, or -1 if the buffer cannot be had. */
struct cli_roofline {
    double read_gb_s;
    double int8_gmac_s;
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

/* Parse a command-line value for flag: an integer in [lo, hi], or a float
 * (not NaN). Return 0, or -1 after printing what was wrong (cli/run.c). */
int cli_parse_int(const char *s, const char *flag, long lo, long hi, long *out);
int cli_parse_float(const char *s, const char *flag, float *out);
/* The session flags shared by run, summarize and chat (--backend,
 * --cl-device, --n-verify, --mem-limit, --prefill-policy): 1 if a is one of
 * them and its value v was applied, 0 if a is not one, -1 after printing
 * what was wrong. */
struct sdnpu_session_params;
int cli_session_flag(const char *a, const char *v, struct sdnpu_session_params *sp);
/* A byte count with an optional K/M/G suffix (powers of 1024). */
int cli_parse_size(const char *s, const char *flag, size_t *out);

#endif
