/*
 * tests/tools/tokdump.c - print sdnpu's token ids for a file of strings, for
 * the tokenizer conformance script (tests/conformance/tokenizer_conformance.py).
 *
 *     tokdump -m MODEL [--add-special] [--parse-special] [--replace-invalid] FILE
 *
 * FILE holds one JSON object per line with a string member "text" (other
 * members are ignored). For each line tokdump prints one JSON line:
 *     {"ids":[2,9259,1902],"rt":true}
 * where rt says whether decoding the ids (special tokens rendered) gives the
 * text back byte for byte, or {"error":"message"} when tokenizing failed.
 *
 *     tokdump -m MODEL --pieces
 *
 * prints one line per token id instead: the id, its piece in hex without
 * and with special tokens rendered ("-" when empty), and whether it ends
 * generation:
 *     1 - 3c656f733e 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gguf/gguf.h"
#include "tok/tokenizer.h"

struct strbuf {
    char *p;
    size_t n, cap;
};

static void sb_reserve(struct strbuf *b, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n)
            c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) {
            fprintf(stderr, "tokdump: out of memory\n");
            exit(1);
        }
        b->cap = c;
    }
}

static void sb_put(struct strbuf *b, const void *s, size_t n) {
    sb_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_utf8(struct strbuf *b, uint32_t cp) {
    char o[4];
    int n;
    if (cp < 0x80) {
        o[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    sb_put(b, o, (size_t)n);
}

static int hex4(const char *s, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Find "text":"..." in a JSON line and unescape it into out. 0 on success. */
static int json_text(const char *line, struct strbuf *out) {
    const char *p = strstr(line, "\"text\"");
    if (!p) return -1;
    p += 6;
    while (*p == ' ' || *p == ':')
        p++;
    if (*p++ != '"') return -1;
    out->n = 0;
    for (;;) {
        char c = *p++;
        if (!c) return -1;
        if (c == '"') return 0;
        if (c != '\\') {
            sb_put(out, &c, 1);
            continue;
        }
        c = *p++;
        uint32_t cp;
        switch (c) {
        case 'n':
            sb_put(out, "\n", 1);
            break;
        case 't':
            sb_put(out, "\t", 1);
            break;
        case 'r':
            sb_put(out, "\r", 1);
            break;
        case 'b':
            sb_put(out, "\b", 1);
            break;
        case 'f':
            sb_put(out, "\f", 1);
            break;
        case '/':
            sb_put(out, "/", 1);
            break;
        case '\\':
            sb_put(out, "\\", 1);
            break;
        case '"':
            sb_put(out, "\"", 1);
            break;
        case 'u':
            if (hex4(p, &cp)) return -1;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                uint32_t lo;
                if (hex4(p + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            put_utf8(out, cp);
            break;
        default:
            return -1;
        }
    }
}

static void print_json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    unsigned flags = 0;
    bool pieces = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--add-special"))
            flags |= SD_TOK_ADD_SPECIAL;
        else if (!strcmp(argv[i], "--parse-special"))
            flags |= SD_TOK_PARSE_SPECIAL;
        else if (!strcmp(argv[i], "--replace-invalid"))
            flags |= SD_TOK_REPLACE_INVALID;
        else if (!strcmp(argv[i], "--pieces"))
            pieces = true;
        else
            file = argv[i];
    }
    if (!model || (!file && !pieces)) {
        fprintf(stderr, "usage: tokdump -m MODEL [--add-special] [--parse-special] [--replace-invalid] FILE\n"
                        "       tokdump -m MODEL --pieces\n");
        return 2;
    }
    struct sd_err err;
    sd_err_clear(&err);
    struct sd_gguf *g = NULL;
    struct sd_vocab *v = NULL;
    if (sd_gguf_open(model, true, &g, &err) || sd_vocab_load(g, &v, &err)) {
        fprintf(stderr, "tokdump: %s: %s\n", model, err.msg);
        sd_gguf_close(g);
        return 1;
    }
    if (pieces) {
        char buf[4096];
        for (int32_t id = 0; id < sd_vocab_n_tokens(v); id++) {
            printf("%d", id);
            for (int special = 0; special < 2; special++) {
                int32_t n = sd_token_to_piece(v, id, special, buf, sizeof buf);
                putchar(' ');
                for (int32_t k = 0; k < n; k++)
                    printf("%02x", (unsigned char)buf[k]);
                if (n == 0) putchar('-');
            }
            printf(" %d\n", sd_vocab_is_eog(v, id) ? 1 : 0);
        }
        sd_vocab_free(v);
        sd_gguf_close(g);
        return 0;
    }
    FILE *f = fopen(file, "rb");
    if (!f) {
        perror(file);
        return 1;
    }
    struct strbuf line = {0}, text = {0}, dec = {0};
    struct sd_tokvec tv = {0};
    int rc = 0;
    for (;;) {
        line.n = 0;
        int c;
        while ((c = fgetc(f)) != EOF && c != '\n') {
            char ch = (char)c;
            sb_put(&line, &ch, 1);
        }
        if (c == EOF && line.n == 0) break;
        sb_put(&line, "", 1);
        if (json_text(line.p, &text)) {
            fprintf(stderr, "tokdump: a line without a readable \"text\" string\n");
            rc = 1;
            break;
        }
        tv.n = 0;
        sd_err_clear(&err);
        if (sd_tokenize(v, text.p ? text.p : "", text.n, flags, &tv, &err)) {
            printf("{\"error\":");
            print_json_str(err.msg);
            printf("}\n");
            continue;
        }
        /* The round trip leaves out the BOS/EOS that ADD_SPECIAL added. */
        const int32_t *ids = tv.ids;
        size_t n = tv.n;
        if ((flags & SD_TOK_ADD_SPECIAL) && sd_vocab_add_bos(v) && n && ids[0] == sd_vocab_bos(v)) ids++, n--;
        if ((flags & SD_TOK_ADD_SPECIAL) && sd_vocab_add_eos(v) && n && ids[n - 1] == sd_vocab_eos(v)) n--;
        int64_t need = sd_detokenize(v, ids, n, true, dec.p, dec.cap);
        if (need < 0) {
            dec.n = 0;
            sb_reserve(&dec, (size_t)-need);
            need = sd_detokenize(v, ids, n, true, dec.p, dec.cap);
        }
        bool rt = need == (int64_t)text.n && (text.n == 0 || !memcmp(dec.p, text.p, text.n));
        printf("{\"ids\":[");
        for (size_t i = 0; i < tv.n; i++)
            printf(i ? ",%d" : "%d", tv.ids[i]);
        printf("],\"rt\":%s}\n", rt ? "true" : "false");
    }
    fclose(f);
    free(line.p);
    free(text.p);
    free(dec.p);
    sd_tokvec_free(&tv);
    sd_vocab_free(v);
    sd_gguf_close(g);
    return rc;
}
