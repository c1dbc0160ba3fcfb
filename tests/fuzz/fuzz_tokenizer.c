/* tests/fuzz/fuzz_tokenizer.c - encode and decode any bytes with every
 * vocabulary type the suite writes (SentencePiece from the tiny llama and
 * gemma3 files, byte-level BPE as test_tokenizer writes it): the first byte
 * picks the vocabulary and the flags. BPE must give plain text back byte
 * for byte. */
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "tok/tokenizer.h"
#include "fuzz.h"
#include "util_gguf_writer.h"
#include "util_tiny_model.h"

static struct sd_vocab *g_vocab[3];
static struct sd_gguf *g_bpe_gguf;

/* A byte-level BPE vocabulary (qwen2 pre-tokenizer): the 256 byte tokens in
 * GPT-2's byte-to-unicode mapping, a few merges, two special tokens. */
static struct sd_vocab *bpe_vocab(void) {
    static char chars[256][4];
    const char *toks[262];
    int32_t types[262];
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = self ? (uint32_t)b : (uint32_t)(256 + extra++);
        if (cp < 0x80) chars[b][0] = (char)cp;
        else chars[b][0] = (char)(0xC0 | (cp >> 6)), chars[b][1] = (char)(0x80 | (cp & 0x3F));
        toks[b] = chars[b];
        types[b] = 1;
    }
    const char *rest[6] = {"\xc4\xa0t", "he", "\xc4\xa0the", "lo", "<|endoftext|>", "<tool>"};
    for (int i = 0; i < 6; i++) toks[256 + i] = rest[i], types[256 + i] = i < 4 ? 1 : i == 4 ? 3 : 4;
    const char *merges[4] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "l o"};
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.architecture", "qwen2");
    sdt_gw_kv_str(w, "tokenizer.ggml.model", "gpt2");
    sdt_gw_kv_str(w, "tokenizer.ggml.pre", "qwen2");
    sdt_gw_kv_str_arr(w, "tokenizer.ggml.tokens", toks, 262);
    sdt_gw_kv_arr(w, "tokenizer.ggml.token_type", SD_GGUF_INT32, types, 262);
    sdt_gw_kv_str_arr(w, "tokenizer.ggml.merges", merges, 4);
    sdt_gw_kv_u32(w, "tokenizer.ggml.bos_token_id", 260);
    sdt_gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 260);
    size_t n;
    const uint8_t *bytes = sdt_gw_bytes(w, &n);
    static uint8_t *copy;
    copy = malloc(n);
    FUZZ_CHECK(bytes && copy);
    memcpy(copy, bytes, n);
    sdt_gw_free(w);
    struct sd_err err = {0};
    struct sd_vocab *v = NULL;
    FUZZ_CHECK(sd_gguf_open_buffer(copy, n, &g_bpe_gguf, &err) == SDNPU_OK);
    FUZZ_CHECK(sd_vocab_load(g_bpe_gguf, &v, &err) == SDNPU_OK);
    return v;
}

/* The tiny llama and gemma3 files' SentencePiece vocabularies, and BPE. */
static void load_vocabs(void) {
    static const char *archs[2] = {"llama", "gemma3"};
    for (int a = 0; a < 2; a++) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/sdnpu-fuzz-tok-%d-%s.gguf", (int)getpid(), archs[a]);
        struct sdt_tiny_opts o = {.arch = archs[a]};
        struct sd_gguf *g = NULL;
        struct sd_err err = {0};
        FUZZ_CHECK(sdt_tiny_write(&o, path) == 0);
        FUZZ_CHECK(sd_gguf_open(path, false, &g, &err) == SDNPU_OK);
        FUZZ_CHECK(sd_vocab_load(g, &g_vocab[2 * a], &err) == SDNPU_OK);
        sd_gguf_close(g);
        unlink(path);
    }
    g_vocab[1] = bpe_vocab();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vocab[0]) load_vocabs();
    if (size == 0) return 0;
    const struct sd_vocab *v = g_vocab[data[0] % 3];
    unsigned flags = (data[0] & 4 ? SD_TOK_ADD_SPECIAL : 0) | (data[0] & 8 ? SD_TOK_PARSE_SPECIAL : 0);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct sd_tokvec tv = {0};
    struct sd_err err = {0};
    int rc = sd_tokenize(v, text, len, flags, &tv, &err);
    if (rc == SDNPU_OK) {
        size_t cap = len * 4 + 64;
        char *out = malloc(cap);
        FUZZ_CHECK(out != NULL);
        int64_t n = sd_detokenize(v, tv.ids, tv.n, false, out, cap);
        FUZZ_CHECK(n >= 0 && (size_t)n <= cap);
        /* Plain text (no special-token parsing, no BOS) comes back byte
         * for byte from byte-level BPE, which covers every byte
         * (tokenizer.h's contract; SentencePiece adds its space prefix). */
        if (!flags && sd_vocab_kind(v) == SD_VOCAB_BPE) {
            char *want = malloc(len + 1);
            FUZZ_CHECK(want != NULL);
            size_t w = 0;
            for (size_t i = 0; i < len; i++) want[w++] = text[i];
            if ((size_t)n != w || memcmp(out, want, w) != 0) {
                fprintf(stderr, "round trip: %zu bytes in, %lld out\n", w, (long long)n);
                abort();
            }
            free(want);
        }
        for (size_t i = 0; i < tv.n; i++) {
            char piece[256];
            FUZZ_CHECK(sd_token_to_piece(v, tv.ids[i], true, piece, sizeof piece) >= -256);
        }
        free(out);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
    }
    sd_tokvec_free(&tv);
    /* Any id decodes to something or says it does not fit. */
    if (size >= 5) {
        int32_t id;
        memcpy(&id, data + 1, 4);
        char piece[64];
        sd_token_to_piece(v, id, data[0] & 16, piece, sizeof piece);
    }
    return 0;
}
