/*
 * tok/names.c - what llama.cpp knows about a vocabulary by name rather than
 * from the file's keys: the pre-tokenizer each tokenizer.ggml.pre value
 * stands for (its expressions and flags), and the token texts that mark a
 * token as end of turn, end of generation, FIM or control.
 *
 * These are tables copied from llama.cpp (src/llama-vocab.cpp), kept apart
 * from the loader so that following a new llama.cpp release means editing
 * this file alone.
 */
#include "tok/tokenizer.h"

#include <string.h>

#include "tok/internal.h"

/* --------------------------------------------------- pre-tokenizers */

static const char *const k_re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
static const char *const k_re_gpt2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const k_re_llama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const k_re_qwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const k_re_qwen35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const k_re_starcoder[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
};
static const char *const k_re_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
};

#define PRE(name, re, flags)                                                                                 \
    { name, re, (int)SD_ARRAY_LEN(re), flags }
/* tokenizer.ggml.pre values, grouped as llama.cpp groups them. */
static const struct sd_tok_pre k_pre[] = {
    PRE("default", k_re_default, 0),
    PRE("llama3", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("llama-v3", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("llama-bpe", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("falcon3", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("falcon-h1", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("pixtral", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("midm-2.0", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("lfm2", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("jina-v5-nano", k_re_llama3, PRE_IGNORE_MERGES | PRE_ADD_BOS),
    PRE("dbrx", k_re_llama3, 0),
    PRE("smaug-bpe", k_re_llama3, 0),
    PRE("qwen2", k_re_qwen2, 0),
    PRE("deepseek-r1-qwen", k_re_qwen2, 0),
    PRE("kormo", k_re_qwen2, 0),
    PRE("f2llmv2", k_re_qwen2, 0),
    PRE("stablelm2", k_re_qwen2, 0),
    PRE("megrez", k_re_qwen2, 0),
    PRE("hunyuan", k_re_qwen2, 0),
    PRE("solar-open", k_re_qwen2, 0),
    PRE("qwen35", k_re_qwen35, 0),
    PRE("gpt-2", k_re_gpt2, 0),
    PRE("phi-2", k_re_gpt2, 0),
    PRE("jina-es", k_re_gpt2, 0),
    PRE("jina-de", k_re_gpt2, 0),
    PRE("gigachat", k_re_gpt2, 0),
    PRE("jina-v2-es", k_re_gpt2, 0),
    PRE("jina-v2-de", k_re_gpt2, 0),
    PRE("a.x-4.0", k_re_gpt2, 0),
    PRE("mellum", k_re_gpt2, 0),
    PRE("modern-bert", k_re_gpt2, 0),
    PRE("mpt", k_re_gpt2, 0),
    PRE("olmo", k_re_gpt2, 0),
    PRE("jais", k_re_gpt2, 0),
    PRE("trillion", k_re_gpt2, 0),
    PRE("granite-docling", k_re_gpt2, 0),
    PRE("exaone4", k_re_gpt2, 0),
    PRE("jina-v1-en", k_re_gpt2, 0),
    PRE("jina-v2-code", k_re_gpt2, 0),
    PRE("roberta-bpe", k_re_gpt2, 0),
    PRE("starcoder", k_re_starcoder, 0),
    PRE("refact", k_re_starcoder, 0),
    PRE("command-r", k_re_starcoder, 0),
    PRE("smollm", k_re_starcoder, 0),
    PRE("codeshell", k_re_starcoder, 0),
    PRE("exaone", k_re_starcoder, 0),
    PRE("minerva-7b", k_re_starcoder, 0),
    PRE("mellum2", k_re_starcoder, 0),
    PRE("falcon", k_re_falcon, 0),
};
#undef PRE

const struct sd_tok_pre *sd_tok_pre_find(const char *name) {
    const struct sd_tok_pre *pre = NULL;
    for (size_t i = 0; i < SD_ARRAY_LEN(k_pre); i++)
        if (!strcmp(name, k_pre[i].name)) pre = &k_pre[i];
    return pre;
}

/* ------------------------------------------------------- token marks */

/* Names llama.cpp recognizes by text (llama_vocab::impl::load). */
static const char *const k_eot_names[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "<end_of_utterance>",
};
static const char *const k_eog_names[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81"
    "of\xe2\x96\x81"
    "sentence\xef\xbd\x9c>",
    "[e~[",
};
static const char *const k_fim_names[] = {
    /* pre, suf, mid, pad, rep, sep: only their CONTROL marking matters here */
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<PRE>",
    "\xe2\x96\x81<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<SUF>",
    "\xe2\x96\x81<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<MID>",
    "\xe2\x96\x81<MID>",
    "<|code_middle|>",
    "<|middle|>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
};
/* FIM pad/rep/sep also end generation in llama.cpp. */
static const char *const k_fim_eog_names[] = {
    "<|fim_pad|>",   "<fim-pad>",  "<fim_pad>", "<PAD>",      "[PAD]",        "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>",    "<reponame>", "<|file_sep|>",
};

static int32_t find_cstr(const struct sd_vocab *v, const char *s) {
    int32_t id = sd_tok_map_find(v, s, strlen(s));
    return id < v->n_tokens ? id : -1;
}

/* The marks in llama.cpp's order (llama_vocab::impl::load), which matters:
 * a later mark may replace an earlier one (gpt-oss's channel tokens become
 * user-defined, not control), and the file's own EOS, EOT and EOM end
 * generation whatever their texts. */
void sd_tok_mark_by_name(struct sd_vocab *v) {
    if (v->eot < 0) {
        int32_t best = -1;
        for (size_t i = 0; i < SD_ARRAY_LEN(k_eot_names); i++) {
            int32_t id = find_cstr(v, k_eot_names[i]);
            if (id >= 0 && (best < 0 || id < best)) best = id;
        }
        v->eot = best;
        if (best >= 0) v->attr[best] |= TA_CONTROL;
    }
    if (v->eom < 0) {
        v->eom = find_cstr(v, "<|eom_id|>");
        if (v->eom >= 0) v->attr[v->eom] |= TA_CONTROL;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_fim_names); i++) {
        int32_t id = find_cstr(v, k_fim_names[i]);
        if (id >= 0) v->attr[id] |= TA_CONTROL;
    }
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if ((v->attr[i] & TA_CONTROL) && strstr(v->ptext + v->poff[i], "unused")) v->attr[i] |= TA_UNUSED;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_eog_names); i++) {
        int32_t id = find_cstr(v, k_eog_names[i]);
        if (id >= 0) v->attr[id] |= TA_CONTROL | TA_EOG;
    }
    for (size_t i = 0; i < SD_ARRAY_LEN(k_fim_eog_names); i++) {
        int32_t id = find_cstr(v, k_fim_eog_names[i]);
        if (id >= 0) v->attr[id] |= TA_EOG;
    }
    static const char *const k_gptoss_ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < SD_ARRAY_LEN(k_gptoss_ud); i++) {
        int32_t id = find_cstr(v, k_gptoss_ud[i]);
        if (id >= 0) v->attr[id] = TA_USER_DEFINED;
    }
    if (v->eos >= 0) v->attr[v->eos] |= TA_EOG;
    if (v->eot >= 0) v->attr[v->eot] |= TA_EOG;
    if (v->eom >= 0) v->attr[v->eom] |= TA_EOG;
}
