/* cli/info.c - `sdnpu info [FILE] [-a]`: describe a GGUF model.
 *
 * Reads only the GGUF metadata and tensor table (gguf/gguf.h), so it works
 * on any architecture, even one the engine cannot run; the chat template is
 * recognized as the engine recognizes it (engine/chat.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/chat.h"
#include "gguf/gguf.h"
#include "graphs/graph.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sdnpu info [FILE] [-a|--all] | sdnpu info --devices\n"
               "  FILE       a GGUF model (default: %s)\n"
               "  -a, --all  also list every key/value and every tensor\n"
               "  --devices  list the graph backends, AMX and the OpenCL devices of this machine\n",
               cli_default_model());
}

/* The chat template: its size, the family's format sdnpu renders for it
 * (it never runs the Jinja), and the system turn it writes where a
 * conversation brings none, as sdnpu then writes it too. */
static void print_chat_template(const struct sd_gguf *g) {
    const char *tmpl;
    size_t len;
    if (sd_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &len, NULL) != SDNPU_OK) {
        printf("%-16s no\n", "chat template");
        return;
    }
    char *text = malloc(len + 1); /* the file's string is not NUL-terminated */
    struct sd_chat chat = {0};
    bool recognized = false;
    if (text) {
        memcpy(text, tmpl, len);
        text[len] = '\0';
    }
    if (!text || sd_chat_detect(text, &chat, &recognized) != SDNPU_OK) {
        printf("%-16s yes (%zu bytes)\n", "chat template", len);
    } else {
        printf("%-16s yes (%zu bytes), rendered as %s%s\n", "chat template", len,
               sd_chat_format_name(chat.format), recognized ? "" : " (a format sdnpu does not recognize)");
        if (chat.default_system) printf("%-16s \"%s\"\n", "system turn", chat.default_system);
    }
    sd_chat_free(&chat);
    free(text);
}

/* "253113024 bytes (241.4 MiB)" */
static void print_bytes(const char *label, uint64_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    printf("%-16s %" PRIu64 " bytes (%.1f %s)\n", label, n, v, units[u]);
}

/* Print a string key's value if present, else "-". */
static void print_str_key(const struct sd_gguf *g, const char *label, const char *key) {
    const char *s;
    size_t len;
    if (sd_gguf_get_str(g, key, &s, &len, NULL) == SDNPU_OK) {
        printf("%-16s %.*s\n", label, (int)SD_MIN(len, (size_t)200), s);
    } else {
        printf("%-16s -\n", label);
    }
}

static void print_u32_key(const struct sd_gguf *g, const char *label, const char *key) {
    uint32_t v;
    if (sd_gguf_get_u32(g, key, &v, NULL) == SDNPU_OK) printf("%-16s %" PRIu32 "\n", label, v);
    else printf("%-16s -\n", label);
}

/* "268.1M" */
static void human_count(char *buf, size_t cap, int64_t n) {
    if (n >= 1000000000) snprintf(buf, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000) snprintf(buf, cap, "%.1fM", (double)n / 1e6);
    else if (n >= 1000) snprintf(buf, cap, "%.1fK", (double)n / 1e3);
    else snprintf(buf, cap, "%" PRId64, n);
}

/* --devices: the graph backends this machine offers. */
static int list_devices(const char *flag, const char *v, void *field) {
    char buf[8192];
    struct sd_err e = {0};
    printf("cpu: %s kernels\n", sd_cpu_kernels_desc());
    printf("amx: %s\n", sd_cpu_amx_desc());
    if (sd_opencl_list_devices(buf, sizeof buf, &e))
        printf("opencl: none (%s)\n", e.msg);
    else
        printf("opencl devices (--backend opencl --cl-device N):\n%s", buf);
    return 0;
}

struct info_opts {
    const char *path;
    bool all;
};

static const struct cli_flag k_flags[] = {
    {"--devices", NULL, CLI_RUN, .fn = list_devices},
    {"-a", "--all", CLI_CONST, CLI_AT(struct info_opts, all), .lo = true},
    {0},
};

/* FILE: one argument that is no flag ("-" is one). */
static int take_path(const char *arg, void *ctx) {
    struct info_opts *o = ctx;
    if (arg[0] == '-' && arg[1] != '\0') return 0;
    if (o->path) {
        fprintf(stderr, "sdnpu info: more than one file given\n");
        usage(stderr);
        return -1;
    }
    o->path = arg;
    return 1;
}

/* Every "<arch>." key, in file order. */
static void print_hyperparameters(const struct sd_gguf *g) {
    const char *arch;
    size_t arch_len;
    char val[160];
    if (sd_gguf_get_str(g, "general.architecture", &arch, &arch_len, NULL) != SDNPU_OK || arch_len == 0)
        return;
    printf("hyperparameters:\n");
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        const char *key = sd_gguf_key_name(g, i);
        if (strncmp(key, arch, arch_len) != 0 || key[arch_len] != '.') continue;
        sd_gguf_value_str(g, i, val, sizeof val);
        printf("  %-44s %s\n", key + arch_len + 1, val);
    }
}

static void print_tokenizer(const struct sd_gguf *g) {
    const char *tmodel = NULL, *tpre = NULL;
    size_t tmodel_len = 0, tpre_len = 0;
    sd_gguf_get_str(g, "tokenizer.ggml.model", &tmodel, &tmodel_len, NULL);
    sd_gguf_get_str(g, "tokenizer.ggml.pre", &tpre, &tpre_len, NULL);
    if (tmodel) {
        printf("%-16s %.*s (pre: %.*s)\n", "tokenizer", (int)tmodel_len, tmodel, tpre ? (int)tpre_len : 1,
               tpre ? tpre : "-");
    } else {
        printf("%-16s -\n", "tokenizer");
    }
    enum sd_gguf_type et;
    uint64_t n_vocab;
    const void *data;
    if (sd_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_vocab, &data, NULL) == SDNPU_OK) {
        printf("%-16s %" PRIu64 " tokens\n", "vocabulary", n_vocab);
    } else {
        printf("%-16s -\n", "vocabulary");
    }
    print_u32_key(g, "bos id", "tokenizer.ggml.bos_token_id");
    print_u32_key(g, "eos id", "tokenizer.ggml.eos_token_id");
    print_chat_template(g);
}

/* One line of the tensors-by-type table. */
static void print_type_row(const char *name, int64_t count, uint64_t bytes, int64_t params) {
    char hc[32];
    human_count(hc, sizeof hc, params);
    printf("  %-8s %6" PRId64 " %14" PRIu64 " %10.1f %12s\n", name, count, bytes,
           (double)bytes / (1024.0 * 1024.0), hc);
}

/* Tensors by type. The reader has checked every type id is known, so
 * indexing by it is safe. */
static void print_tensor_types(const struct sd_gguf *g) {
    int64_t count[SD_TYPE_COUNT] = {0}, params[SD_TYPE_COUNT] = {0}, total_params = 0;
    uint64_t bytes[SD_TYPE_COUNT] = {0}, total_bytes = 0;
    const int64_t nt = sd_gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
        int64_t ne = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; /* checked not to overflow at open */
        count[t->type]++;
        bytes[t->type] += t->nbytes;
        params[t->type] += ne;
        total_params += ne;
        total_bytes += t->nbytes;
    }
    printf("%-16s %" PRId64 "\n", "tensors", nt);
    if (nt == 0) return;
    printf("  %-8s %6s %14s %10s %12s\n", "type", "count", "bytes", "MiB", "params");
    for (int t = 0; t < SD_TYPE_COUNT; t++)
        if (count[t]) print_type_row(sd_type_name(t), count[t], bytes[t], params[t]);
    print_type_row("total", nt, total_bytes, total_params);
    char hc[32];
    human_count(hc, sizeof hc, total_params);
    printf("%-16s %" PRId64 " (%s), %.2f bits per weight\n", "parameters", total_params, hc,
           total_params ? 8.0 * (double)total_bytes / (double)total_params : 0.0);
}

/* -a: every key/value and every tensor. */
static void print_all(const struct sd_gguf *g) {
    char val[160];
    printf("\nkey/values (%" PRId64 "):\n", sd_gguf_n_kv(g));
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        sd_gguf_value_str(g, i, val, sizeof val);
        printf("  %-44s %-8s %s\n", sd_gguf_key_name(g, i), sd_gguf_type_name(sd_gguf_key_type(g, i)), val);
    }
    const int64_t nt = sd_gguf_n_tensors(g);
    printf("\ntensors (%" PRId64 "):\n", nt);
    for (int64_t i = 0; i < nt; i++) {
        const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
        char shape[96];
        int off = snprintf(shape, sizeof shape, "[%" PRId64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && off > 0 && (size_t)off < sizeof shape; d++) {
            off += snprintf(shape + off, sizeof shape - (size_t)off, ", %" PRId64, t->ne[d]);
        }
        if (off > 0 && (size_t)off < sizeof shape) snprintf(shape + off, sizeof shape - (size_t)off, "]");
        printf("  %-40s %-6s %-20s %12zu @ %" PRIu64 "\n", t->name, sd_type_name((int)t->type), shape,
               t->nbytes, t->offset);
    }
}

int cli_info(int argc, char **argv) {
    struct info_opts o = {0};
    const struct cli_parser parser = {
        "sdnpu info", usage, {{k_flags, &o}}, .style = CLI_USAGE_ON_ERROR, .positional = take_path,
        .ctx = &o};
    int parsed = cli_parse_flags(&parser, argc, argv);
    if (parsed != CLI_PARSED) return parsed;
    const char *path = cli_model(o.path);
    struct sd_gguf *g = NULL;
    struct sd_err err = {0};
    int rc = sd_gguf_open(path, true, &g, &err);
    if (rc) {
        fprintf(stderr, "sdnpu info: %s: %s\n", sdnpu_status_str((enum sdnpu_status)rc), err.msg);
        return 1;
    }
    printf("%-16s %s\n", "file", path);
    print_bytes("size", sd_gguf_file_size(g));
    printf("%-16s %" PRIu32 "\n", "gguf version", sd_gguf_version(g));
    print_str_key(g, "architecture", "general.architecture");
    print_str_key(g, "name", "general.name");
    print_str_key(g, "size label", "general.size_label");
    print_u32_key(g, "file type", "general.file_type");
    print_hyperparameters(g);
    print_tokenizer(g);
    print_tensor_types(g);
    if (o.all) print_all(g);
    sd_gguf_close(g);
    return 0;
}
