/* cli/commands.c - the table of subcommands and shared helpers. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sdnpu.h"

const struct cli_command cli_commands[] = {
    {"info", "FILE", "describe a GGUF model (--devices: the graph backends here)", cli_info},
    {"run", "", "generate text (sdnpu run -h)", cli_run},
    {"summarize", "FILE", "summarize a document (sdnpu summarize -h)", cli_summarize},
    {"chat", "", "a conversation REPL (sdnpu chat -h)", cli_chat},
    {"serve", "", "an OpenAI-compatible HTTP server (sdnpu serve -h)", cli_serve},
    {"eval", "", "acceptance-ratio evaluation over datasets (sdnpu eval -h)", cli_eval},
    {"tokenize", "", "print the tokens of a text", cli_tokenize},
    {"bench", "KIND", "benchmarks: graphs, verify, policy, calib, prefix, switch, state, tokenize",
     cli_bench},
    {"profile", "", "graph load/compute times per block and row count (sdnpu profile -h)", cli_profile},
    {"version", "", "print the version", cli_version},
    {NULL, NULL, NULL, NULL},
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

/* A model name (scripts/models.tsv) rather than a path: no slash, no .gguf. */
static bool is_model_name(const char *arg) {
    size_t n = strlen(arg);
    return n && !strchr(arg, '/') && !(n > 5 && !strcmp(arg + n - 5, ".gguf"));
}

/* Where scripts/fetch_model puts the models: the models folder of its cache
 * ($SDNPU_CACHE_DIR, $XDG_CACHE_HOME/sdnpu or ~/.cache/sdnpu). */
static void cached_models_dir(char *buf, size_t cap) {
    const char *d = getenv("SDNPU_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (d && *d)
        snprintf(buf, cap, "%s/models", d);
    else if (x && *x)
        snprintf(buf, cap, "%s/sdnpu/models", x);
    else
        snprintf(buf, cap, "%s/.cache/sdnpu/models", home && *home ? home : ".");
}

const char *cli_model(const char *arg) {
    if (!arg) return cli_default_model();
    if (access(arg, F_OK) == 0 || !is_model_name(arg)) return arg;
    static char path[4096];
    char cache[3000];
    cached_models_dir(cache, sizeof cache);
    const char *dirs[] = {"models", cache, NULL};
#ifdef SDNPU_SOURCE_DIR
    dirs[2] = SDNPU_SOURCE_DIR "/models";
#endif
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        if (!dirs[i]) continue;
        snprintf(path, sizeof path, "%s/%s.gguf", dirs[i], arg);
        if (access(path, R_OK) == 0) return path;
    }
    return arg;
}

void cli_model_hint(const char *cmd, const char *arg, const char *resolved) {
    if (!strcmp(resolved, "models/default.gguf"))
        fprintf(stderr, "%s: run scripts/setup to install the default model, or pass -m FILE\n", cmd);
    else if (arg && is_model_name(arg) && arg == resolved)
        fprintf(
            stderr,
            "%s: '%s' is neither a file nor an installed model; scripts/setup --model %s installs a model "
            "of scripts/models.tsv by name (scripts/setup --list-models)\n",
            cmd, arg, arg);
}

int cli_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("sdnpu %s\n", sdnpu_version());
    return 0;
}
