/* cli/io.c - reading what the user points the command at, with a bound:
 * a prompt file, a dataset, a transcript or stdin may be endless
 * (`sdnpu run -f /dev/zero`) or huge, and is then refused with a message
 * instead of growing memory without end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "sdnpu: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    bool too_big = false;
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
        if (n + 1 == cap) {
            if (cap >= CLI_MAX_FILE) {
                too_big = true;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    /* A directory opens but does not read (EISDIR): said, not taken as an
     * empty file. */
    const int read_err = ferror(f) ? errno : 0;
    if (f != stdin) fclose(f);
    if (read_err && buf) {
        fprintf(stderr, "sdnpu: cannot read '%s': %s\n", path, strerror(read_err));
        free(buf);
        return NULL;
    }
    if (too_big) {
        fprintf(stderr, "sdnpu: '%s' is larger than %d MiB, the most sdnpu reads from one file\n", path,
                (int)(CLI_MAX_FILE >> 20));
        free(buf);
        return NULL;
    }
    if (!buf) {
        fprintf(stderr, "sdnpu: out of memory reading '%s'\n", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

ssize_t cli_getline(FILE *f, char **line, size_t *cap, size_t max, bool *too_long) {
    size_t n = 0;
    bool any = false;
    *too_long = false;
    for (int c; (c = getc(f)) != EOF;) {
        any = true;
        if (n + 1 < max) {
            if (n + 2 > *cap) {
                size_t nc = *cap ? *cap * 2 : 256;
                char *nl = realloc(*line, nc);
                if (!nl) return -1;
                *line = nl;
                *cap = nc;
            }
            (*line)[n++] = (char)c;
        } else {
            *too_long = true; /* read on to the newline, keep nothing more */
        }
        if (c == '\n') break;
    }
    if (!any || !*line) return -1;
    (*line)[n] = '\0';
    return (ssize_t)n;
}
