/* cli/eval_results.c - the records of `sdnpu eval` (cli/eval.h): the store
 * the run fills, and results.json, rewritten after each sample and read
 * back (with jansson) to resume an interrupted run. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "eval.h"
#include "json.h"

char *eval_strdup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (!d) {
        fprintf(stderr, "sdnpu eval: out of memory\n");
        exit(1);
    }
    memcpy(d, s, n + 1);
    return d;
}

void eval_rec_free(struct rec *r) {
    free(r->dataset);
    free(r->id);
    free(r->task);
    free(r->method);
    free(r->msg);
    free(r->output);
}

struct rec *eval_rec_push(struct eval *ev) {
    if (ev->n_recs == ev->cap_recs) {
        size_t nc = ev->cap_recs ? ev->cap_recs * 2 : 256;
        struct rec *nr = realloc(ev->recs, nc * sizeof *nr);
        if (!nr) {
            fprintf(stderr, "sdnpu eval: out of memory\n");
            exit(1);
        }
        ev->recs = nr;
        ev->cap_recs = nc;
    }
    struct rec *r = &ev->recs[ev->n_recs++];
    memset(r, 0, sizeof *r);
    r->lossless = -1;
    r->stop_reason = -1;
    return r;
}

const struct rec *eval_rec_find(const struct eval *ev, const char *dataset, const char *id, const char *method) {
    for (size_t i = ev->n_recs; i-- > 0;) {
        const struct rec *r = &ev->recs[i];
        if (!strcmp(r->dataset, dataset) && !strcmp(r->id, id) && !strcmp(r->method, method)) return r;
    }
    return NULL;
}

/* ------------------------------------------------------------ results.json */

int eval_write_results(const struct eval *ev) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/results.json", ev->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n\"format\": \"sdnpu-eval-1\",\n\"model\": ");
    cli_json_write_cstr(f, ev->model_path);
    fprintf(f, ",\n\"kernels\": ");
    cli_json_write_cstr(f, ev->kernels);
    fprintf(f, ",\n\"guard\": %s", ev->guard ? "true" : "false");
    fprintf(f,
            ",\n\"n_predict\": %d,\n\"n_verify\": %d,\n\"l2\": %d,\n\"draft_max\": %d,\n\"limit\": "
            "%ld,\n\"seed\": %llu,\n\"methods\": [",
            ev->n_predict, ev->n_verify, ev->l2, ev->draft_max, ev->limit, (unsigned long long)ev->seed);
    for (size_t i = 0; i < ev->n_methods; i++) {
        if (i) fputs(", ", f);
        cli_json_write_cstr(f, ev->methods[i].name);
    }
    fputs("],\n\"unavailable\": {", f);
    bool first = true;
    for (size_t i = 0; i < ev->n_methods; i++) {
        if (!ev->methods[i].unavailable) continue;
        fputs(first ? "" : ", ", f);
        first = false;
        cli_json_write_cstr(f, ev->methods[i].name);
        fputs(": ", f);
        cli_json_write_cstr(f, ev->methods[i].why);
    }
    fputs("},\n\"records\": [\n", f);
    for (size_t i = 0; i < ev->n_recs; i++) {
        const struct rec *r = &ev->recs[i];
        fputs("{\"dataset\": ", f);
        cli_json_write_cstr(f, r->dataset);
        fputs(", \"id\": ", f);
        cli_json_write_cstr(f, r->id);
        fputs(", \"task\": ", f);
        cli_json_write_cstr(f, r->task);
        fputs(", \"method\": ", f);
        cli_json_write_cstr(f, r->method);
        fprintf(f, ", \"status\": \"%s\", \"message\": ", r->status == REC_OK ? "ok" : "error");
        cli_json_write_cstr(f, r->msg);
        fprintf(f,
                ", \"prompt_tokens\": %d, \"generated\": %d, \"prefill_ms\": %.3f, \"decode_ms\": %.3f, "
                "\"verify_steps\": %d, \"acceptance\": %.4f, \"drafted\": %d, \"accepted\": %d, \"draft_ms\": %.3f, "
                "\"verify_ms\": %.3f, \"graph_rows\": %lld, \"pad_rows\": %lld, \"stop_reason\": %d, "
                "\"out_tokens\": %zu, \"out_hash\": ",
                r->n_prompt, r->n_generated, r->prefill_ms, r->decode_ms, r->verify_steps, r->acceptance, r->drafted,
                r->accepted, r->draft_ms, r->verify_ms, (long long)r->graph_rows, (long long)r->pad_rows,
                r->stop_reason, r->n_out_tokens);
        if (r->have_tokens) fprintf(f, "\"%016llx\"", (unsigned long long)r->out_hash);
        else fputs("null", f);
        fprintf(f, ", \"lossless\": %s, \"output\": ", r->lossless < 0 ? "null" : r->lossless ? "true" : "false");
        cli_json_write_cstr(f, r->output);
        fprintf(f, "}%s\n", i + 1 < ev->n_recs ? "," : "");
    }
    fputs("]\n}\n", f);
    int bad = ferror(f);
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        fprintf(stderr, "sdnpu eval: cannot write '%s': %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* A member's number, 0 when it is missing or no number. */
static double num_of(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* A member's number as a count or an index: 0 when it is missing, no
 * number or outside [lo, hi] (a cast out of range would be undefined). */
static int64_t int_of(const json_t *o, const char *k, int64_t lo, int64_t hi) {
    const double v = num_of(o, k);
    return v >= (double)lo && v <= (double)hi ? (int64_t)v : 0;
}
#define I32_OF(o, k) ((int32_t)int_of(o, k, INT32_MIN, INT32_MAX))

/* A member's string, NULL when it is missing or no string. */
static const char *str_of(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

/* The file as eval_write_results writes it: duplicate keys refused, every
 * number a double (as the old reader held them). */
#define EVAL_JSON_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL)

int eval_load_results(struct eval *ev) {
    char path[4096];
    snprintf(path, sizeof path, "%s/results.json", ev->out_dir);
    if (access(path, F_OK) != 0) return 0;
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return -1;
    json_error_t je;
    int rc = -1;
    json_t *v = json_loadb(text, len, EVAL_JSON_FLAGS, &je);
    free(text);
    if (!v) {
        fprintf(stderr,
                "sdnpu eval: %s:%d: column %d: %s; move it away or use another --out to start afresh\n", path,
                je.line, je.column, je.text);
        return -1;
    }
    const char *model = str_of(v, "model"), *format = str_of(v, "format");
    const json_t *recs = json_object_get(v, "records");
    if (!format || strcmp(format, "sdnpu-eval-1") || !json_is_array(recs)) {
        fprintf(stderr, "sdnpu eval: %s is not an sdnpu eval result file; use another --out\n", path);
        goto done;
    }
    char diff[512] = "";
    if (!model || strcmp(model, ev->model_path))
        snprintf(diff, sizeof diff, "model %.200s there, %.200s here", model ? model : "?", ev->model_path);
    else if (I32_OF(v, "n_predict") != ev->n_predict)
        snprintf(diff, sizeof diff, "n_predict %.0f there, %d here", num_of(v, "n_predict"), ev->n_predict);
    else if (I32_OF(v, "n_verify") != ev->n_verify)
        snprintf(diff, sizeof diff, "n_verify %.0f there, %d here", num_of(v, "n_verify"), ev->n_verify);
    else if (strcmp(str_of(v, "kernels") ? str_of(v, "kernels") : "fast", ev->kernels))
        snprintf(diff, sizeof diff, "kernels %.20s there, %s here",
                 str_of(v, "kernels") ? str_of(v, "kernels") : "fast", ev->kernels);
    else if (I32_OF(v, "draft_max") != ev->draft_max)
        snprintf(diff, sizeof diff, "draft_max %.0f there, %d here", num_of(v, "draft_max"), ev->draft_max);
    else if (json_is_true(json_object_get(v, "guard")) != ev->guard)
        snprintf(diff, sizeof diff, "guard %s there, %s here", ev->guard ? "off" : "on",
                 ev->guard ? "on" : "off");
    if (diff[0]) {
        fprintf(stderr,
                "sdnpu eval: %s was made with other settings (%s); use the same settings to resume, or "
                "--no-resume to start afresh\n",
                path, diff);
        goto done;
    }
    /* Methods the engine refused last time are left out again (start
     * afresh with --no-resume after an engine update). */
    const char *name;
    json_t *why;
    json_object_foreach(json_object_get(v, "unavailable"), name, why) {
        for (size_t m = 0; m < ev->n_methods; m++) {
            if (strcmp(ev->methods[m].name, name) || !json_is_string(why)) continue;
            ev->methods[m].unavailable = true;
            snprintf(ev->methods[m].why, sizeof ev->methods[m].why, "%s", json_string_value(why));
        }
    }
    for (size_t i = 0; i < json_array_size(recs); i++) {
        const json_t *o = json_array_get(recs, i);
        const char *ds = str_of(o, "dataset"), *id = str_of(o, "id"), *task = str_of(o, "task"),
                   *method = str_of(o, "method"), *status = str_of(o, "status"),
                   *hash = str_of(o, "out_hash");
        if (!ds || !id || !task || !method || !status) {
            fprintf(stderr, "sdnpu eval: %s: record %zu lacks dataset, id, task, method or status; skipped\n",
                    path, i + 1);
            continue;
        }
        struct rec *r = eval_rec_push(ev);
        r->dataset = eval_strdup(ds);
        r->id = eval_strdup(id);
        r->task = eval_strdup(task);
        r->method = eval_strdup(method);
        r->status = strcmp(status, "ok") ? REC_ERROR : REC_OK;
        r->msg = eval_strdup(str_of(o, "message") ? str_of(o, "message") : "");
        r->output = eval_strdup(str_of(o, "output") ? str_of(o, "output") : "");
        r->n_prompt = I32_OF(o, "prompt_tokens");
        r->n_generated = I32_OF(o, "generated");
        r->prefill_ms = num_of(o, "prefill_ms");
        r->decode_ms = num_of(o, "decode_ms");
        r->verify_steps = I32_OF(o, "verify_steps");
        r->acceptance = num_of(o, "acceptance");
        r->drafted = I32_OF(o, "drafted");
        r->accepted = I32_OF(o, "accepted");
        r->draft_ms = num_of(o, "draft_ms");
        r->verify_ms = num_of(o, "verify_ms");
        r->graph_rows = int_of(o, "graph_rows", -(INT64_C(1) << 53), INT64_C(1) << 53);
        r->pad_rows = int_of(o, "pad_rows", -(INT64_C(1) << 53), INT64_C(1) << 53);
        r->stop_reason = json_object_get(o, "stop_reason") ? I32_OF(o, "stop_reason") : -1;
        r->n_out_tokens = (size_t)int_of(o, "out_tokens", 0, INT64_C(1) << 53);
        r->have_tokens = hash != NULL;
        r->out_hash = hash ? strtoull(hash, NULL, 16) : 0;
        const json_t *l = json_object_get(o, "lossless");
        r->lossless = json_is_boolean(l) ? json_is_true(l) : -1;
    }
    rc = 0;
done:
    json_decref(v);
    return rc;
}
