/*
 * cli/dataset.h - evaluation datasets: JSONL files of samples (the format is
 * documented in datasets/README.md) and the prompt each task gives a model.
 *
 * A line is one JSON object:
 *   id          string, non-empty, unique in the file
 *   task        string, non-empty ("summary", "rag", "ui", "tweet", or another)
 *   instruction string (the request; for rag the question, for ui the goal)
 *   context     array of strings (documents, passages, screen, thread)
 *   history     array of strings, optional (earlier outputs: drafting store)
 *   reference   string or null, optional (a reference answer)
 * Other members (e.g. "source") are allowed and ignored. Blank lines are
 * skipped. Files are untrusted input: a bad line is reported as
 * "FILE:LINE: field 'context': ..." and skipped, or fails the load when strict.
 */
#ifndef SD_CLI_DATASET_H
#define SD_CLI_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct ds_sample {
    char *id;
    char *task;
    char *instruction;
    char **context; /* [n_context] */
    size_t n_context;
    char **history; /* [n_history]; NULL when absent */
    size_t n_history;
    char *reference; /* NULL when absent or null */
    size_t line;     /* 1-based line in the file */
};

struct ds_set {
    char *path;
    char *name; /* file name without directory and ".jsonl" */
    struct ds_sample *samples;
    size_t n;
    size_t n_bad; /* lines reported and skipped */
};

/* Parse one line (without its newline) into *out. Returns 0, or -1 with a
 * message in err ("field 'history': item 2 is a number, expected a string");
 * *out then owns nothing. */
int cli_ds_parse_line(const char *line, size_t len, struct ds_sample *out, char *err, size_t err_size);

void cli_ds_sample_free(struct ds_sample *s);

/* Load a JSONL file. Each malformed line is reported to diag (if not NULL) as
 * "PATH:LINE: message" and skipped; with strict the first one fails the load.
 * Returns 0, or -1 when the file cannot be read, strict met a bad line, or
 * memory ran out (reported to diag); *out then owns nothing. */
int cli_ds_load(const char *path, bool strict, FILE *diag, struct ds_set *out);

void cli_ds_set_free(struct ds_set *set);

/* The prompt for a base (text-continuing) model and the stop strings that
 * end its answer, by task (see datasets/README.md, "Prompts"). *prompt is
 * malloc'd (NUL-terminated, length in *len). stops points at static strings;
 * at most DS_MAX_STOPS. Returns 0, or -1 when out of memory. */
#define DS_MAX_STOPS 4
int cli_ds_build_prompt(const struct ds_sample *s, char **prompt, size_t *len, const char *stops[DS_MAX_STOPS],
                    size_t *n_stops);

/* The same sample as a chat turn for an instruction-tuned model (see
 * datasets/README.md, "Prompts"): *system (static) states the task once,
 * *user (malloc'd, NUL-terminated, length in *len) holds the context and
 * the instruction; the answer ends at the end of the model's turn, and
 * stops lists what else ends it (ui: the end of the line). Returns 0, or
 * -1 when out of memory. */
int cli_ds_build_chat(const struct ds_sample *s, const char **system, char **user, size_t *len,
                  const char *stops[DS_MAX_STOPS], size_t *n_stops);

#endif /* SD_CLI_DATASET_H */
