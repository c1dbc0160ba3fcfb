/* cli/cli.h - subcommands of the `sdnpu` command. Each takes argv starting
 * at its own name and returns the process exit code. */
#ifndef SD_CLI_H
#define SD_CLI_H

#include <stddef.h>

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

/* Read a whole file (or stdin for "-"), NUL-terminated; free() it. NULL
 * after printing why. */
char *cli_read_file(const char *path, size_t *len);

#endif
