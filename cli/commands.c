/* cli/commands.c - the table of subcommands and shared helpers. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "sdnpu.h"

const struct cli_command cli_commands[] = {
    {"info", cli_info},
    {"version", cli_version},
    {"tokenize", cli_tokenize},
    {"bench", cli_bench},
    {"profile", cli_profile},
    {"run", cli_run},
    {"summarize", cli_summarize},
    {"chat", cli_chat},
    {"serve", cli_serve},
    {"eval", cli_eval},
    {NULL, NULL},
};

const char *cli_default_model(void) {
    const char *env = getenv("SDNPU_MODEL");
    if (env && *env) return env;
    if (access("models/default.gguf", R_OK) == 0) return "models/default.gguf";
#ifdef SDNPU_SOURCE_DIR
    static char path[4096];
    snprintf(path, sizeof path, "%s/models/default.gguf", SDNPU_SOURCE_DIR);
    if (access(path, R_OK) == 0) return path;
#endif
    return "models/default.gguf";
}

int cli_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("sdnpu %s\n", sdnpu_version());
    return 0;
}
