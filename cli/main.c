/* cli/main.c - the `sdnpu` command: dispatch to subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The commands as the table lists them, each with its arguments and line. */
static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu COMMAND [options]\n\ncommands:\n");
    for (const struct cli_command *c = cli_commands; c->name; c++) {
        char head[32];
        snprintf(head, sizeof head, "%s%s%s", c->name, *c->args ? " " : "", c->args);
        fprintf(f, "  %-18s %s\n", head, c->summary);
    }
}

/* The commands print every failure themselves, with the engine's message
 * and what to do about it, so the log's copy of an error would only say it
 * twice; warnings (a damaged file, a fallback) show, and SDNPU_LOG above 1
 * shows errors too. The server is the exception: a request's failure goes
 * to its client, and its operator reads the log. */
static void cli_log(enum sdnpu_log_level level, const char *msg, void *user) {
    (void)user;
    const char *env = getenv("SDNPU_LOG");
    const int max = env ? atoi(env) : SDNPU_LOG_WARN;
    if (level == SDNPU_LOG_ERROR && max <= SDNPU_LOG_WARN) return;
    static const char *names[] = {"error", "warning", "info", "debug"};
    if ((int)level <= max) fprintf(stderr, "sdnpu: %s: %s\n", names[level & 3], msg);
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
        if (strcmp(c->name, cmd)) continue;
        if (strcmp(cmd, "serve")) sdnpu_log_set(cli_log, NULL);
        return c->fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "sdnpu: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
