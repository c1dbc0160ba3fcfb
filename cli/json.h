/*
 * cli/json.h - the command's JSON string writer (results.json,
 * prompts.jsonl). Reading JSON is jansson's everywhere; writing strings
 * stays here because these files carry a model's output as it came, and an
 * output cut inside a UTF-8 sequence must still be written: jansson refuses
 * to encode a string that is not valid UTF-8.
 */
#ifndef SD_CLI_JSON_H
#define SD_CLI_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Write s (len bytes) as a quoted JSON string: quotes, backslashes and
 * control characters are escaped, every other byte is written as it is. */
void cli_json_write_string(FILE *f, const char *s, size_t len);

/* The same for a NUL-terminated s; NULL is written as "". */
void cli_json_write_cstr(FILE *f, const char *s);

#endif /* SD_CLI_JSON_H */
