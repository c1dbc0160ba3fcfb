/* cli/main.c - the `sdnpu` command: dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu COMMAND [options]\n\n"
               "commands:\n"
               "  info FILE          describe a GGUF model (--devices: the graph backends here)\n"
               "  run                generate text (sdnpu run -h)\n"
               "  summarize FILE     summarize a document (sdnpu summarize -h)\n"
               "  chat               a conversation REPL (sdnpu chat -h)\n"
               "  eval               acceptance-ratio evaluation over datasets (sdnpu eval -h)\n"
               "  tokenize           print the tokens of a text\n"
               "  bench KIND         benchmarks: graphs, verify, policy, calib, prefix, switch, state, tokenize\n"
               "  profile            graph load/compute times per block and row count (sdnpu profile -h)\n"
               "  version            print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    for (const struct cli_command *c = cli_commands; c->name; c++) {
        if (!strcmp(c->name, cmd)) return c->fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "sdnpu: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
