/*
 * tok/tokenizer.h - the tokenizer, read entirely from a GGUF file's
 * tokenizer.ggml.* keys.
 *
 * Two algorithms:
 *   - "llama" (SentencePiece BPE with byte fallback: Gemma, Llama 2): merges
 *     by piece score, "\xe2\x96\x81" for spaces, <0xNN> byte tokens.
 *   - "gpt2" (byte-level BPE: Qwen2, Llama 3): pre-tokenizer chosen by
 *     tokenizer.ggml.pre (llama.cpp's hand-written splitters for the GPT-2,
 *     Llama 3, Qwen2 expressions; PCRE2 for the others), GPT-2
 *     byte-to-unicode map, ranked merges.
 * Special/control tokens are matched in the text when SD_TOK_PARSE_SPECIAL
 * is set; user-defined tokens (Gemma's "\n", runs of spaces and tabs, HTML
 * tags) always are, as in llama.cpp.
 *
 * Token ids are those of llama.cpp's llama_tokenize for the same file and
 * flags (tests/conformance/tokenizer_conformance.py checks it). A loaded
 * vocabulary is immutable: any number of threads may tokenize and decode
 * with it at once; each sd_tokenize call allocates its own scratch.
 */
#ifndef SD_TOKENIZER_H
#define SD_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "gguf/gguf.h"

struct sd_vocab;

enum sd_tok_flags {
    SD_TOK_ADD_SPECIAL = 1u << 0,     /* add BOS (and EOS) as the vocabulary's add_bos/add_eos say */
    SD_TOK_PARSE_SPECIAL = 1u << 1,   /* match special token texts in the input */
    SD_TOK_REPLACE_INVALID = 1u << 2  /* invalid UTF-8 -> U+FFFD instead of SDNPU_ERR_INVALID_UTF8 */
};

enum sd_vocab_kind { SD_VOCAB_SPM = 1, SD_VOCAB_BPE = 2 };

/* Token attribute bits, from tokenizer.ggml.token_type. */
enum sd_token_type {
    SD_TOKEN_NORMAL = 1,
    SD_TOKEN_UNKNOWN = 2,
    SD_TOKEN_CONTROL = 3,
    SD_TOKEN_USER_DEFINED = 4,
    SD_TOKEN_UNUSED = 5,
    SD_TOKEN_BYTE = 6
};

/* Read the tokenizer.ggml.* keys. The vocabulary copies what it needs, so
 * the file may be closed afterwards. Bad or missing keys are
 * SDNPU_ERR_FORMAT, an unknown tokenizer.ggml.model or .pre
 * SDNPU_ERR_UNSUPPORTED, each with a message naming the key. */
int sd_vocab_load(const struct sd_gguf *g, struct sd_vocab **out, struct sd_err *err);
void sd_vocab_free(struct sd_vocab *v);

enum sd_vocab_kind sd_vocab_kind(const struct sd_vocab *v);
const char *sd_vocab_pre(const struct sd_vocab *v); /* tokenizer.ggml.pre or "default" */
int32_t sd_vocab_n_tokens(const struct sd_vocab *v);
int32_t sd_vocab_bos(const struct sd_vocab *v);  /* -1 if none */
int32_t sd_vocab_eos(const struct sd_vocab *v);  /* -1 if none */
int32_t sd_vocab_eot(const struct sd_vocab *v);  /* end of turn, -1 if none */
bool sd_vocab_is_eog(const struct sd_vocab *v, int32_t id); /* EOS, EOT or another end-of-generation token */
int32_t sd_vocab_find(const struct sd_vocab *v, const char *text, size_t len); /* exact token text, -1 if none */
const char *sd_vocab_text(const struct sd_vocab *v, int32_t id, size_t *len);
enum sd_token_type sd_vocab_type(const struct sd_vocab *v, int32_t id);
/* Additions: the SPM merge score of a token (0 for BPE), the unknown token
 * (-1 if none) and whether ADD_SPECIAL adds BOS / EOS. */
float sd_vocab_score(const struct sd_vocab *v, int32_t id);
int32_t sd_vocab_unk(const struct sd_vocab *v);
bool sd_vocab_add_bos(const struct sd_vocab *v);
bool sd_vocab_add_eos(const struct sd_vocab *v);

/* Growable token vector owned by the caller; reuse it to avoid allocation. */
struct sd_tokvec {
    int32_t *ids;
    size_t n, cap;
};
void sd_tokvec_free(struct sd_tokvec *tv);

/* Append the tokens of text to out (out->n grows). On failure out->n is left
 * as it was on entry. Invalid UTF-8 is SDNPU_ERR_INVALID_UTF8 with the byte
 * offset in the message, unless SD_TOK_REPLACE_INVALID: then each maximal
 * ill-formed subpart (the Unicode recommendation, what Python's
 * decode(errors="replace") does) becomes one U+FFFD. At most 2^30 bytes. */
int sd_tokenize(const struct sd_vocab *v, const char *text, size_t len, unsigned flags, struct sd_tokvec *out,
                struct sd_err *err);

/* The bytes of one token as it appears in decoded text (for streaming).
 * Control tokens give "" unless render_special. Returns the number of bytes
 * written, or the negative of the size needed if cap is too small. */
int32_t sd_token_to_piece(const struct sd_vocab *v, int32_t id, bool render_special, char *buf, size_t cap);

/* Decode a sequence (handles the SentencePiece leading-space rule: with
 * add_space_prefix, the one space tokenize put at the start and after each
 * special token is dropped). For valid input, decoding the ids of
 * sd_tokenize (without the BOS/EOS it added, with render_special when
 * special tokens were parsed) gives the text back byte for byte, except
 * that SentencePiece vocabularies turn U+2581 into a space (llama.cpp does
 * the same). Ids outside the vocabulary decode to nothing. Returns the byte
 * count, or the negative of the size needed (buf may be NULL if cap is 0).
 * Any of the cap bytes may be written, also past the returned count. */
int64_t sd_detokenize(const struct sd_vocab *v, const int32_t *ids, size_t n, bool render_special, char *buf,
                      size_t cap);

#endif /* SD_TOKENIZER_H */
