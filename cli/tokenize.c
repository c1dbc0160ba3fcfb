/* cli/tokenize.c - `sdnpu tokenize`: print the tokens of a text.
 *
 *     sdnpu tokenize [-m MODEL] [--ids] [--no-special] TEXT|-f FILE
 *
 * Reads only the tokenizer (tok/tokenizer.h over gguf/gguf.h), so it is
 * quick even for large models. Each token prints as "id 'piece'" with the
 * piece's bytes escaped; --ids prints the ids alone, one line, as a JSON
 * array (what llama.cpp's llama-tokenize --ids prints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "tok/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdnpu tokenize [-m MODEL] [--ids] [--no-special] TEXT|-f FILE\n"
            "  -m MODEL            a GGUF model (default: %s)\n"
            "  -f FILE             tokenize the contents of FILE ('-': stdin)\n"
            "  --ids               print only the ids, as [1, 2, 3]\n"
            "  --no-special        no special tokens: both of the next two\n"
            "  --no-bos            do not add BOS/EOS as the vocabulary asks\n"
            "  --no-parse-special  treat text such as <start_of_turn> as plain text\n"
            "  --replace           replace invalid UTF-8 with U+FFFD instead of failing\n",
            cli_default_model());
}

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\'' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

struct tokenize_opts {
    const char *model, *file, *text;
    bool ids_only;
    unsigned flags;
};

#define OPT(field) CLI_AT(struct tokenize_opts, field)
static const struct cli_flag k_flags[] = {
    {"-m", NULL, CLI_STR, OPT(model)},
    {"-f", NULL, CLI_STR, OPT(file)},
    {"--ids", NULL, CLI_CONST, OPT(ids_only), .lo = true},
    {"--no-special", NULL, CLI_BITS_CLEAR, OPT(flags), .lo = SD_TOK_PARSE_SPECIAL | SD_TOK_ADD_SPECIAL},
    {"--no-parse-special", NULL, CLI_BITS_CLEAR, OPT(flags), .lo = SD_TOK_PARSE_SPECIAL},
    {"--no-bos", NULL, CLI_BITS_CLEAR, OPT(flags), .lo = SD_TOK_ADD_SPECIAL},
    {"--replace", NULL, CLI_BITS_SET, OPT(flags), .lo = SD_TOK_REPLACE_INVALID},
    {0},
};

/* TEXT: the one argument that is no flag; after it, anything else is a
 * usage error. */
static int take_text(const char *arg, void *ctx) {
    struct tokenize_opts *o = ctx;
    if (o->text) {
        usage(stderr);
        return -1;
    }
    if (arg[0] == '-' && arg[1]) return 0;
    o->text = arg;
    return 1;
}

int cli_tokenize(int argc, char **argv) {
    struct tokenize_opts o = {.flags = SD_TOK_ADD_SPECIAL | SD_TOK_PARSE_SPECIAL};
    const struct cli_parser parser = {"sdnpu tokenize", usage, {{k_flags, &o}},
                                      .style = CLI_MISSING_IS_UNKNOWN | CLI_USAGE_ON_ERROR,
                                      .positional = take_text, .ctx = &o};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *model = o.model, *file = o.file, *text = o.text;
    const unsigned flags = o.flags;
    if (!!text == !!file) {
        usage(stderr);
        return 2;
    }
    model = cli_model(model);

    char *buf = NULL;
    size_t len;
    if (file) {
        if (!(buf = cli_read_file(file, &len))) return 1;
        text = buf;
    } else {
        len = strlen(text);
    }

    int ret = 1;
    struct sd_err err;
    sd_err_clear(&err);
    struct sd_gguf *g = NULL;
    struct sd_vocab *v = NULL;
    struct sd_tokvec tv = {0};
    if (sd_gguf_open(model, true, &g, &err) || sd_vocab_load(g, &v, &err)) {
        fprintf(stderr, "sdnpu tokenize: %s: %s\n", model, err.msg);
        goto done;
    }
    if (sd_tokenize(v, text, len, flags, &tv, &err)) {
        fprintf(stderr, "sdnpu tokenize: %s\n", err.msg);
        goto done;
    }
    if (o.ids_only) {
        putchar('[');
        for (size_t i = 0; i < tv.n; i++)
            printf(i ? ", %d" : "%d", tv.ids[i]);
        puts("]");
    } else {
        for (size_t i = 0; i < tv.n; i++) {
            char piece[256];
            int32_t n = sd_token_to_piece(v, tv.ids[i], true, piece, sizeof piece);
            printf("%6d '", tv.ids[i]);
            if (n >= 0) {
                print_escaped(piece, (size_t)n);
            } else { /* longer than any real piece; print the vocabulary text */
                size_t tl;
                const char *t = sd_vocab_text(v, tv.ids[i], &tl);
                print_escaped(t, tl);
            }
            puts("'");
        }
        fprintf(stderr, "%zu tokens for %zu bytes\n", tv.n, len);
    }
    ret = 0;
done:
    sd_tokvec_free(&tv);
    sd_vocab_free(v);
    sd_gguf_close(g);
    free(buf);
    return ret;
}
