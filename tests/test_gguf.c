/*
 * tests/test_gguf.c - the GGUF reader: round trips through the test writer,
 * typed getters, a catalogue of malformed files, a truncation sweep, a
 * byte-mutation fuzz loop, an allocation-failure sweep, and the real model.
 *
 * Every buffer handed to sd_gguf_open_buffer is a fresh heap copy of exactly
 * the file's size, so AddressSanitizer catches any read past the end.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "graphs/quant.h"
#include "util_common.h"
#include "util_gguf_writer.h"

#ifndef SD_GEMMA_MODEL
#define SD_GEMMA_MODEL "models/gemma3-270m.gguf"
#endif

/* ------------------------------------------------------------ helpers */

/* A heap copy of exactly size bytes (at least 1 allocated, so size 0 still
 * gives a valid pointer). */
static uint8_t *exact_copy(const void *src, size_t size) {
    uint8_t *p = malloc(size ? size : 1);
    assert_non_null(p);
    if (size) memcpy(p, src, size);
    return p;
}

static int open_copy(const void *bytes, size_t size, uint8_t **copy, struct sd_gguf **g, struct sd_err *err) {
    *copy = exact_copy(bytes, size);
    sd_err_clear(err);
    return sd_gguf_open_buffer(*copy, size, g, err);
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)sdt_rand_u64(&seed);
}

/* The file used by round trips and the sweeps: every key/value type and
 * tensors of several types and ranks. */
enum { RICH_N_TENSORS = 5 };
static const char *const k_strs[] = {"a", "", "ccc", "h\xc3\xa9llo"};
static const uint8_t k_u8s[] = {0, 1, 255};
static const int8_t k_i8s[] = {-128, 0, 127};
static const uint16_t k_u16s[] = {0, 65535};
static const int16_t k_i16s[] = {-32768, 32767};
static const uint32_t k_u32s[] = {1, 2, 4000000000u};
static const int32_t k_i32s[] = {-5, 0, 5, 2147483647};
static const float k_f32s[] = {1.0f, 2.5f, -3.0f, 0.0f};
static const bool k_bools[] = {true, false, true};
static const uint64_t k_u64s[] = {UINT64_MAX, 7};
static const int64_t k_i64s[] = {INT64_MIN, -1};
static const double k_f64s[] = {0.125, -1e300};

struct rich_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];
    int type;
    size_t nbytes;
};
static const struct rich_tensor k_rich_tensors[RICH_N_TENSORS] = {
    {"t.f32", 1, {8, 1, 1, 1}, SD_TYPE_F32, 8 * 4},
    {"t.f16", 2, {4, 3, 1, 1}, SD_TYPE_F16, 12 * 2},
    {"blk.0.q8_0", 2, {64, 2, 1, 1}, SD_TYPE_Q8_0, 2 * 2 * 34},
    {"blk.0.q4_K", 3, {256, 1, 2, 1}, SD_TYPE_Q4_K, 2 * 144},
    {"t.bf16", 4, {2, 3, 4, 5}, SD_TYPE_BF16, 120 * 2},
};

static void add_nested(struct sdt_gguf_writer *w, const char *key) {
    /* [[-5, 0, 5, INT32_MAX], ["a", "", "ccc", "héllo"], [[]]] */
    struct sdt_buf v = {0};
    sdt_buf_arr_of_arr(&v, 3);
    sdt_buf_arr(&v, SD_GGUF_INT32, k_i32s, 4);
    sdt_buf_str_arr(&v, k_strs, 4);
    sdt_buf_arr_of_arr(&v, 1);
    sdt_buf_arr(&v, SD_GGUF_UINT8, NULL, 0);
    assert_false(v.oom);
    sdt_gw_kv_raw(w, key, SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}

static struct sdt_gguf_writer *rich_writer(uint32_t version) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    assert_non_null(w);
    sdt_gw_set_version(w, version);
    sdt_gw_kv_str(w, "general.architecture", "llama");
    sdt_gw_kv_u8(w, "t.u8", 200);
    sdt_gw_kv_i8(w, "t.i8", -100);
    sdt_gw_kv_u16(w, "t.u16", 60000);
    sdt_gw_kv_i16(w, "t.i16", -30000);
    sdt_gw_kv_u32(w, "t.u32", 4000000000u);
    sdt_gw_kv_i32(w, "t.i32", -2000000000);
    sdt_gw_kv_u64(w, "t.u64", (1ull << 60) + 5);
    sdt_gw_kv_i64(w, "t.i64", -(1ll << 60));
    sdt_gw_kv_f32(w, "t.f32", 0.1f);
    sdt_gw_kv_f64(w, "t.f64", -2.5e300);
    sdt_gw_kv_bool(w, "t.true", true);
    sdt_gw_kv_bool(w, "t.false", false);
    sdt_gw_kv_str(w, "t.str", "h\xc3\xa9llo\nworld");
    sdt_gw_kv_str(w, "t.empty_str", "");
    sdt_gw_kv_arr(w, "t.arr.u8", SD_GGUF_UINT8, k_u8s, 3);
    sdt_gw_kv_arr(w, "t.arr.i8", SD_GGUF_INT8, k_i8s, 3);
    sdt_gw_kv_arr(w, "t.arr.u16", SD_GGUF_UINT16, k_u16s, 2);
    sdt_gw_kv_arr(w, "t.arr.i16", SD_GGUF_INT16, k_i16s, 2);
    sdt_gw_kv_arr(w, "t.arr.u32", SD_GGUF_UINT32, k_u32s, 3);
    sdt_gw_kv_arr(w, "t.arr.i32", SD_GGUF_INT32, k_i32s, 4);
    sdt_gw_kv_arr(w, "t.arr.f32", SD_GGUF_FLOAT32, k_f32s, 4);
    sdt_gw_kv_arr(w, "t.arr.bool", SD_GGUF_BOOL, k_bools, 3);
    sdt_gw_kv_arr(w, "t.arr.u64", SD_GGUF_UINT64, k_u64s, 2);
    sdt_gw_kv_arr(w, "t.arr.i64", SD_GGUF_INT64, k_i64s, 2);
    sdt_gw_kv_arr(w, "t.arr.f64", SD_GGUF_FLOAT64, k_f64s, 2);
    sdt_gw_kv_arr(w, "t.arr.empty", SD_GGUF_INT32, NULL, 0);
    sdt_gw_kv_str_arr(w, "t.arr.str", k_strs, 4);
    sdt_gw_kv_str_arr(w, "t.arr.str_empty", NULL, 0);
    add_nested(w, "t.arr.nested");
    for (int i = 0; i < RICH_N_TENSORS; i++) {
        const struct rich_tensor *t = &k_rich_tensors[i];
        uint8_t data[512];
        assert_true(t->nbytes <= sizeof data);
        fill_random(data, t->nbytes, 100 + (uint64_t)i);
        sdt_gw_tensor(w, t->name, t->n_dims, t->ne, t->type, data, t->nbytes);
    }
    return w;
}

enum { RICH_N_KV = 30 };

/* ------------------------------------------------------------ round trips */

static void check_rich(const struct sd_gguf *g, struct sdt_gguf_writer *w) {
    struct sd_err err = {0};
    assert_int_equal(sd_gguf_n_kv(g), RICH_N_KV);
    assert_int_equal(sd_gguf_n_tensors(g), RICH_N_TENSORS);
    assert_int_equal(sd_gguf_alignment(g), 32);

    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    const char *s;
    size_t len;
    assert_int_equal(sd_gguf_get_u32(g, "t.u8", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(sd_gguf_get_i32(g, "t.i8", &i32, &err), SDNPU_OK);
    assert_int_equal(i32, -100);
    assert_int_equal(sd_gguf_get_u32(g, "t.u16", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 60000);
    assert_int_equal(sd_gguf_get_i32(g, "t.i16", &i32, &err), SDNPU_OK);
    assert_int_equal(i32, -30000);
    assert_int_equal(sd_gguf_get_u32(g, "t.u32", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(sd_gguf_get_i32(g, "t.i32", &i32, &err), SDNPU_OK);
    assert_int_equal(i32, -2000000000);
    assert_int_equal(sd_gguf_get_u64(g, "t.u64", &u64, &err), SDNPU_OK);
    assert_true(u64 == (1ull << 60) + 5);
    assert_int_equal(sd_gguf_get_i64(g, "t.i64", &i64, &err), SDNPU_OK);
    assert_true(i64 == -(1ll << 60));
    assert_int_equal(sd_gguf_get_f32(g, "t.f32", &f, &err), SDNPU_OK);
    assert_true(f == 0.1f);
    assert_int_equal(sd_gguf_get_bool(g, "t.true", &b, &err), SDNPU_OK);
    assert_true(b);
    assert_int_equal(sd_gguf_get_bool(g, "t.false", &b, &err), SDNPU_OK);
    assert_false(b);
    assert_int_equal(sd_gguf_get_str(g, "t.str", &s, &len, &err), SDNPU_OK);
    assert_int_equal(len, 12);
    assert_memory_equal(s, "h\xc3\xa9llo\nworld", 12);
    assert_int_equal(sd_gguf_get_str(g, "t.empty_str", &s, &len, &err), SDNPU_OK);
    assert_int_equal(len, 0);

    /* Every scalar array comes back element for element (the host is
     * little-endian, as the file is). */
    static const struct {
        const char *key;
        enum sd_gguf_type t;
        const void *data;
        size_t n, esz;
    } arrs[] = {
        {"t.arr.u8", SD_GGUF_UINT8, k_u8s, 3, 1},     {"t.arr.i8", SD_GGUF_INT8, k_i8s, 3, 1},
        {"t.arr.u16", SD_GGUF_UINT16, k_u16s, 2, 2},  {"t.arr.i16", SD_GGUF_INT16, k_i16s, 2, 2},
        {"t.arr.u32", SD_GGUF_UINT32, k_u32s, 3, 4},  {"t.arr.i32", SD_GGUF_INT32, k_i32s, 4, 4},
        {"t.arr.f32", SD_GGUF_FLOAT32, k_f32s, 4, 4}, {"t.arr.bool", SD_GGUF_BOOL, k_bools, 3, 1},
        {"t.arr.u64", SD_GGUF_UINT64, k_u64s, 2, 8},  {"t.arr.i64", SD_GGUF_INT64, k_i64s, 2, 8},
        {"t.arr.f64", SD_GGUF_FLOAT64, k_f64s, 2, 8}, {"t.arr.empty", SD_GGUF_INT32, NULL, 0, 4},
    };
    for (size_t i = 0; i < SD_ARRAY_LEN(arrs); i++) {
        enum sd_gguf_type et;
        uint64_t n;
        const void *data;
        assert_int_equal(sd_gguf_get_arr(g, arrs[i].key, &et, &n, &data, &err), SDNPU_OK);
        assert_int_equal(et, arrs[i].t);
        assert_int_equal(n, arrs[i].n);
        if (n) assert_memory_equal(data, arrs[i].data, arrs[i].n * arrs[i].esz);
    }

    enum sd_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(sd_gguf_get_arr(g, "t.arr.str", &et, &n, &data, &err), SDNPU_OK);
    assert_int_equal(et, SD_GGUF_STRING);
    assert_int_equal(n, 4);
    int64_t ki = sd_gguf_find_key(g, "t.arr.str");
    assert_true(ki >= 0);
    for (uint64_t i = 0; i < 4; i++) {
        assert_int_equal(sd_gguf_arr_str_at(g, ki, i, &s, &len), SDNPU_OK);
        assert_int_equal(len, strlen(k_strs[i]));
        assert_memory_equal(s, k_strs[i], len);
        assert_int_equal(sd_gguf_get_arr_str(g, "t.arr.str", i, &s, &len, &err), SDNPU_OK);
        assert_int_equal(len, strlen(k_strs[i]));
    }
    assert_int_equal(sd_gguf_get_arr(g, "t.arr.str_empty", &et, &n, &data, &err), SDNPU_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sd_gguf_get_arr(g, "t.arr.nested", &et, &n, &data, &err), SDNPU_OK);
    assert_int_equal(et, SD_GGUF_ARRAY);
    assert_int_equal(n, 3);

    /* Key order and types are the file's. */
    assert_string_equal(sd_gguf_key_name(g, 0), "general.architecture");
    assert_int_equal(sd_gguf_key_type(g, 0), SD_GGUF_STRING);
    assert_string_equal(sd_gguf_key_name(g, RICH_N_KV - 1), "t.arr.nested");
    assert_int_equal(sd_gguf_key_type(g, RICH_N_KV - 1), SD_GGUF_ARRAY);
    for (int64_t i = 0; i < RICH_N_KV; i++) assert_int_equal(sd_gguf_find_key(g, sd_gguf_key_name(g, i)), i);

    /* Tensors: shape, type, size, offset and bytes as written. */
    size_t size;
    const uint8_t *bytes = sdt_gw_bytes(w, &size);
    size_t ds = sd_gguf_data_offset(g);
    assert_int_equal(ds, sdt_gw_offset(w, SDT_GW_DATA_START, 0));
    assert_int_equal(ds % 32, 0);
    for (int64_t i = 0; i < RICH_N_TENSORS; i++) {
        const struct rich_tensor *rt = &k_rich_tensors[i];
        const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
        assert_non_null(t);
        assert_ptr_equal(sd_gguf_find_tensor(g, rt->name), t);
        assert_string_equal(t->name, rt->name);
        assert_int_equal(t->n_dims, rt->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], rt->ne[d]);
        assert_int_equal(t->type, rt->type);
        assert_int_equal(t->nbytes, rt->nbytes);
        assert_int_equal(t->offset % 32, 0);
        assert_int_equal(ds + t->offset, sdt_gw_offset(w, SDT_GW_TENSOR_DATA, (size_t)i));
        assert_memory_equal(t->data, bytes + ds + t->offset, t->nbytes);
        uint8_t expect[512];
        fill_random(expect, rt->nbytes, 100 + (uint64_t)i);
        assert_memory_equal(t->data, expect, rt->nbytes);
    }
    (void)size;
}

static void test_roundtrip_v3(void **state) {
    (void)state;
    struct sdt_gguf_writer *w = rich_writer(3);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    assert_non_null(bytes);
    uint8_t *copy;
    struct sd_gguf *g;
    struct sd_err err = {0};
    assert_int_equal(open_copy(bytes, size, &copy, &g, &err), SDNPU_OK);
    assert_int_equal(sd_gguf_version(g), 3);
    assert_int_equal(sd_gguf_file_size(g), size);
    check_rich(g, w);
    sd_gguf_close(g);
    free(copy);
    sdt_gw_free(w);
}

/* v2 has the same layout as v3 (u64 counts; v1 had u32 counts). */
static void test_roundtrip_v2(void **state) {
    (void)state;
    struct sdt_gguf_writer *w = rich_writer(2);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    uint8_t *copy;
    struct sd_gguf *g;
    struct sd_err err = {0};
    assert_int_equal(open_copy(bytes, size, &copy, &g, &err), SDNPU_OK);
    assert_int_equal(sd_gguf_version(g), 2);
    check_rich(g, w);
    sd_gguf_close(g);
    free(copy);
    sdt_gw_free(w);
}

/* The same file from disk, mapped and read: same contents, and tensor data
 * aligned in memory as in the file (page-aligned map, 64-byte heap copy). */
static void test_open_file(void **state) {
    (void)state;
    struct sdt_gguf_writer *w = rich_writer(3);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    const char *path = sdt_write_temp(bytes, size);
    assert_non_null(path);
    for (int mm = 0; mm < 2; mm++) {
        struct sd_gguf *g = NULL;
        struct sd_err err = {0};
        assert_int_equal(sd_gguf_open(path, mm == 1, &g, &err), SDNPU_OK);
        check_rich(g, w);
        for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
            assert_int_equal((uintptr_t)sd_gguf_tensor(g, i)->data % 32, 0);
        }
        sd_gguf_close(g);
    }
    unlink(path);
    sdt_gw_free(w);
}

static void test_open_errors(void **state) {
    (void)state;
    struct sd_gguf *g = (struct sd_gguf *)1;
    struct sd_err err = {0};
    assert_int_equal(sd_gguf_open("/nonexistent/dir/x.gguf", true, &g, &err), SDNPU_ERR_NOT_FOUND);
    assert_null(g);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/x.gguf"));
    assert_int_equal(sd_gguf_open("/tmp", true, &g, &err), SDNPU_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(sd_gguf_open(NULL, true, &g, &err), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_open_buffer(NULL, 5, &g, &err), SDNPU_ERR_INVALID_ARG);

    /* An empty file on disk (mmap cannot map 0 bytes) and a malformed one:
     * the message carries the path. */
    const char *empty = sdt_write_temp("", 0);
    for (int mm = 0; mm < 2; mm++) {
        assert_int_equal(sd_gguf_open(empty, mm == 1, &g, &err), SDNPU_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "empty"));
        assert_non_null(strstr(err.msg, empty));
    }
    unlink(empty);
    const char *bad = sdt_write_temp("GGUF\x01\0\0\0", 8);
    assert_int_equal(sd_gguf_open(bad, false, &g, &err), SDNPU_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, bad));
    assert_non_null(strstr(err.msg, "version 1"));
    unlink(bad);

    /* NULL handles answer without crashing. */
    sd_gguf_close(NULL);
    assert_int_equal(sd_gguf_n_kv(NULL), 0);
    assert_int_equal(sd_gguf_n_tensors(NULL), 0);
    assert_int_equal(sd_gguf_find_key(NULL, "x"), -1);
    assert_null(sd_gguf_find_tensor(NULL, "x"));
}

static void test_alignment(void **state) {
    (void)state;
    static const uint32_t aligns[] = {1, 8, 64, 4096};
    for (size_t k = 0; k < SD_ARRAY_LEN(aligns); k++) {
        struct sdt_gguf_writer *w = sdt_gw_new();
        sdt_gw_kv_str(w, "general.architecture", "llama");
        sdt_gw_set_alignment(w, aligns[k]);
        int64_t ne1[1] = {3};
        int64_t ne2[2] = {32, 1};
        float vals[3] = {1, 2, 3};
        sdt_gw_tensor_f32(w, "a", 1, ne1, SD_TYPE_F32, vals);
        sdt_gw_tensor(w, "b", 2, ne2, SD_TYPE_Q8_0, NULL, 34);
        sdt_gw_tensor_f32(w, "c", 1, ne1, SD_TYPE_F16, vals);
        size_t size;
        uint8_t *bytes = sdt_gw_bytes(w, &size);
        uint8_t *copy;
        struct sd_gguf *g;
        struct sd_err err = {0};
        assert_int_equal(open_copy(bytes, size, &copy, &g, &err), SDNPU_OK);
        assert_int_equal(sd_gguf_alignment(g), aligns[k]);
        assert_int_equal(sd_gguf_data_offset(g) % aligns[k], 0);
        for (int64_t i = 0; i < 3; i++) {
            const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
            assert_int_equal(t->offset % aligns[k], 0);
            assert_int_equal(sd_gguf_data_offset(g) + t->offset, sdt_gw_offset(w, SDT_GW_TENSOR_DATA, (size_t)i));
        }
        /* Alignment 1 packs the data back to back: 12 bytes, then 34. */
        if (aligns[k] == 1) assert_int_equal(sd_gguf_tensor(g, 2)->offset, 46);
        const float *a = sd_gguf_tensor(g, 0)->data;
        float a2;
        memcpy(&a2, (const uint8_t *)a + 8, 4);
        assert_true(a2 == 3.0f);
        const uint8_t *c = sd_gguf_tensor(g, 2)->data;
        assert_true(sd_fp16_to_fp32((uint16_t)(c[2] | c[3] << 8)) == 2.0f);
        sd_gguf_close(g);
        free(copy);
        sdt_gw_free(w);
    }
}

/* ------------------------------------------------------------ getters */

static struct sd_gguf *open_rich(uint8_t **copy, struct sdt_gguf_writer **wout) {
    struct sdt_gguf_writer *w = rich_writer(3);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    struct sd_gguf *g;
    struct sd_err err = {0};
    assert_int_equal(open_copy(bytes, size, copy, &g, &err), SDNPU_OK);
    if (wout) *wout = w;
    else sdt_gw_free(w);
    return g;
}

/* Call a getter that takes &err; check the status and that the message
 * holds every substring given. */
#define ASSERT_ERR(call, status, ...)                                                                        \
    do {                                                                                                     \
        sd_err_clear(&err);                                                                                  \
        int rc_ = (call);                                                                                    \
        assert_int_equal(rc_, status);                                                                       \
        const char *subs_[] = {__VA_ARGS__};                                                                 \
        for (size_t s_ = 0; s_ < SD_ARRAY_LEN(subs_); s_++) {                                                \
            if (!strstr(err.msg, subs_[s_])) fail_msg("message '%s' lacks '%s'", err.msg, subs_[s_]);        \
        }                                                                                                    \
    } while (0)

static void test_getter_errors(void **state) {
    (void)state;
    uint8_t *copy;
    struct sd_gguf *g = open_rich(&copy, NULL);
    struct sd_err err = {0};
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    const char *s;
    size_t len;
    enum sd_gguf_type et;
    uint64_t n;
    const void *data;

    ASSERT_ERR(sd_gguf_get_u32(g, "no.such.key", &u32, &err), SDNPU_ERR_NOT_FOUND, "no.such.key");
    ASSERT_ERR(sd_gguf_get_str(g, "no.such.key", &s, &len, &err), SDNPU_ERR_NOT_FOUND, "no.such.key");
    ASSERT_ERR(sd_gguf_get_arr(g, "no.such.key", &et, &n, &data, &err), SDNPU_ERR_NOT_FOUND, "no.such.key");
    /* Wrong type: FORMAT naming key, found type and wanted type. */
    ASSERT_ERR(sd_gguf_get_u32(g, "t.str", &u32, &err), SDNPU_ERR_FORMAT, "t.str", "string", "uint32");
    ASSERT_ERR(sd_gguf_get_u32(g, "t.f32", &u32, &err), SDNPU_ERR_FORMAT, "t.f32", "float32");
    ASSERT_ERR(sd_gguf_get_f32(g, "t.u32", &f, &err), SDNPU_ERR_FORMAT, "t.u32", "uint32", "float32");
    ASSERT_ERR(sd_gguf_get_bool(g, "t.u8", &b, &err), SDNPU_ERR_FORMAT, "t.u8", "bool");
    ASSERT_ERR(sd_gguf_get_str(g, "t.arr.str", &s, &len, &err), SDNPU_ERR_FORMAT, "t.arr.str", "array");
    ASSERT_ERR(sd_gguf_get_arr(g, "t.u32", &et, &n, &data, &err), SDNPU_ERR_FORMAT, "t.u32", "array");
    ASSERT_ERR(sd_gguf_get_arr_str(g, "t.arr.f32", 0, &s, &len, &err), SDNPU_ERR_FORMAT, "t.arr.f32", "float32");
    ASSERT_ERR(sd_gguf_get_arr_str(g, "t.arr.str", 4, &s, &len, &err), SDNPU_ERR_INVALID_ARG, "t.arr.str", "4");
    /* Integers convert when the value fits, and only then. */
    ASSERT_ERR(sd_gguf_get_u32(g, "t.i8", &u32, &err), SDNPU_ERR_FORMAT, "t.i8", "-100", "uint32");
    ASSERT_ERR(sd_gguf_get_u32(g, "t.u64", &u32, &err), SDNPU_ERR_FORMAT, "t.u64", "1152921504606846981");
    ASSERT_ERR(sd_gguf_get_i32(g, "t.u32", &i32, &err), SDNPU_ERR_FORMAT, "4000000000", "int32");
    ASSERT_ERR(sd_gguf_get_i32(g, "t.i64", &i32, &err), SDNPU_ERR_FORMAT, "-1152921504606846976");
    ASSERT_ERR(sd_gguf_get_u64(g, "t.i32", &u64, &err), SDNPU_ERR_FORMAT, "-2000000000", "uint64");
    assert_int_equal(sd_gguf_get_u64(g, "t.u32", &u64, &err), SDNPU_OK);
    assert_true(u64 == 4000000000u);
    assert_int_equal(sd_gguf_get_i64(g, "t.u16", &i64, &err), SDNPU_OK);
    assert_true(i64 == 60000);
    assert_int_equal(sd_gguf_get_i32(g, "t.u8", &i32, &err), SDNPU_OK);
    assert_int_equal(i32, 200);
    assert_int_equal(sd_gguf_get_f32(g, "t.f64", &f, &err), SDNPU_OK); /* f64 narrows */
    assert_true(f == (float)-2.5e300);

    /* Index-based access answers without a message. */
    int64_t ks = sd_gguf_find_key(g, "t.arr.str");
    int64_t kf = sd_gguf_find_key(g, "t.arr.f32");
    assert_int_equal(sd_gguf_arr_str_at(g, -1, 0, &s, &len), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_arr_str_at(g, RICH_N_KV, 0, &s, &len), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_arr_str_at(g, ks, 4, &s, &len), SDNPU_ERR_INVALID_ARG);
    assert_int_equal(sd_gguf_arr_str_at(g, kf, 0, &s, &len), SDNPU_ERR_FORMAT);
    assert_int_equal(sd_gguf_arr_str_at(g, sd_gguf_find_key(g, "t.arr.nested"), 0, &s, &len), SDNPU_ERR_FORMAT);
    assert_int_equal(sd_gguf_find_key(g, "t.u"), -1);
    assert_int_equal(sd_gguf_find_key(g, ""), -1);
    assert_null(sd_gguf_key_name(g, -1));
    assert_null(sd_gguf_key_name(g, RICH_N_KV));
    assert_int_equal(sd_gguf_key_type(g, RICH_N_KV), SD_GGUF_TYPE_COUNT);
    assert_null(sd_gguf_tensor(g, -1));
    assert_null(sd_gguf_tensor(g, RICH_N_TENSORS));
    assert_null(sd_gguf_find_tensor(g, "t.f3"));
    sd_gguf_close(g);
    free(copy);
}

static void check_value_str(const struct sd_gguf *g, const char *key, const char *want) {
    char buf[256];
    int64_t i = sd_gguf_find_key(g, key);
    assert_true(i >= 0);
    sd_gguf_value_str(g, i, buf, sizeof buf);
    if (strcmp(buf, want) != 0) fail_msg("value_str(%s) = '%s', want '%s'", key, buf, want);
}

static void test_value_str(void **state) {
    (void)state;
    uint8_t *copy;
    struct sd_gguf *g = open_rich(&copy, NULL);
    check_value_str(g, "general.architecture", "llama");
    check_value_str(g, "t.u8", "200");
    check_value_str(g, "t.i8", "-100");
    check_value_str(g, "t.u64", "1152921504606846981");
    check_value_str(g, "t.i64", "-1152921504606846976");
    check_value_str(g, "t.f32", "0.1");
    check_value_str(g, "t.f64", "-2.5e+300");
    check_value_str(g, "t.true", "true");
    check_value_str(g, "t.str", "h\xc3\xa9llo\\nworld");
    check_value_str(g, "t.empty_str", "");
    check_value_str(g, "t.arr.f32", "[1, 2.5, -3, 0]");
    check_value_str(g, "t.arr.f64", "[0.125, -1e+300]");
    check_value_str(g, "t.arr.bool", "[true, false, true]");
    check_value_str(g, "t.arr.empty", "[]");
    check_value_str(g, "t.arr.str", "[4 x string]");
    check_value_str(g, "t.arr.nested", "[3 x array]");

    /* Truncation keeps to the buffer and says so; a UTF-8 character is
     * never cut in half. */
    char small[10];
    sd_gguf_value_str(g, sd_gguf_find_key(g, "t.str"), small, sizeof small);
    assert_string_equal(small, "h\xc3\xa9llo...");
    sd_gguf_value_str(g, sd_gguf_find_key(g, "t.str"), small, 5);
    assert_string_equal(small, "h...");
    sd_gguf_value_str(g, sd_gguf_find_key(g, "t.str"), small, 2);
    assert_int_equal(strlen(small), 1);
    sd_gguf_value_str(g, -1, small, sizeof small);
    assert_string_equal(small, "?");
    sd_gguf_close(g);
    free(copy);

    /* Long numeric arrays are summarized. */
    struct sdt_gguf_writer *w = sdt_gw_new();
    int32_t v[20];
    for (int i = 0; i < 20; i++) v[i] = i;
    sdt_gw_kv_arr(w, "long", SD_GGUF_INT32, v, 20);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    struct sd_err err = {0};
    assert_int_equal(open_copy(bytes, size, &copy, &g, &err), SDNPU_OK);
    check_value_str(g, "long", "[20 x int32: 0, 1, 2, 3, 4, 5, 6, 7, ...]");
    sd_gguf_close(g);
    free(copy);
    sdt_gw_free(w);
}

/* A vocabulary-sized array of strings: every element reachable by index,
 * in any order, through the offsets indexed at open. */
static void test_big_string_array(void **state) {
    (void)state;
    enum { N = 262144 };
    char *text = malloc((size_t)N * 24);
    const char **strs = malloc(N * sizeof *strs);
    assert_non_null(text);
    assert_non_null(strs);
    for (int i = 0; i < N; i++) {
        /* Varying lengths, so a wrong offset cannot land on a right answer. */
        snprintf(text + (size_t)i * 24, 24, "t%d%.*s", i, i % 5, "xxxxx");
        strs[i] = text + (size_t)i * 24;
    }
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str_arr(w, "tokenizer.ggml.tokens", strs, N);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    uint8_t *copy;
    struct sd_gguf *g;
    struct sd_err err = {0};
    assert_int_equal(open_copy(bytes, size, &copy, &g, &err), SDNPU_OK);
    int64_t k = sd_gguf_find_key(g, "tokenizer.ggml.tokens");
    uint64_t j = 12345;
    for (int i = 0; i < N; i++) {
        j = (j + 7919) % N; /* 7919 is prime, so this visits every index once */
        const char *s;
        size_t len;
        assert_int_equal(sd_gguf_arr_str_at(g, k, j, &s, &len), SDNPU_OK);
        if (len != strlen(strs[j]) || memcmp(s, strs[j], len) != 0) fail_msg("string %" PRIu64 " differs", j);
    }
    sd_gguf_close(g);
    free(copy);
    sdt_gw_free(w);
    free(strs);
    free(text);
}

/* ------------------------------------------------------------ bad input */

static void take(struct sdt_gguf_writer *w, struct sdt_buf *out) {
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    assert_non_null(bytes);
    sdt_buf_put(out, bytes, size);
    sdt_gw_free(w);
}

/* A small valid file: two keys, two tensors "w0" (F32 [8]) and "w1" (Q8_0 [32, 2]). */
static struct sdt_gguf_writer *small_writer(void) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.architecture", "llama");
    sdt_gw_kv_u32(w, "llama.block_count", 1);
    int64_t ne0[1] = {8};
    int64_t ne1[2] = {32, 2};
    sdt_gw_tensor(w, "w0", 1, ne0, SD_TYPE_F32, NULL, 32);
    sdt_gw_tensor(w, "w1", 2, ne1, SD_TYPE_Q8_0, NULL, 68);
    return w;
}

/* A writer with one tensor of the given shape/type (and a valid key). */
static void one_tensor(struct sdt_buf *out, uint32_t n_dims, int64_t ne0, int64_t ne1, int type) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.architecture", "llama");
    int64_t ne[5] = {ne0, ne1, 1, 1, 1};
    sdt_gw_tensor(w, "blk.3.attn_q.weight", n_dims, ne, type, NULL, 64);
    take(w, out);
}

/* A file holding one key whose value is raw bytes; cut right after them, so
 * no padding follows for the parser to misread. */
static void one_raw_kv(struct sdt_buf *out, const char *key, uint32_t type, const void *value, size_t len) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_raw(w, key, type, value, len);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    sdt_buf_put(out, bytes, sdt_gw_offset(w, SDT_GW_KV_VALUE, 0) + len);
    sdt_gw_free(w);
}

static void patch_small(struct sdt_buf *out, enum sdt_gw_field f, size_t i, uint64_t v, int width) {
    struct sdt_gguf_writer *w = small_writer();
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    size_t off = sdt_gw_offset(w, f, i);
    if (width == 4) sdt_patch_u32(bytes, off, (uint32_t)v);
    else sdt_patch_u64(bytes, off, v);
    take(w, out);
}

static void bad_empty(struct sdt_buf *o) { (void)o; }
static void bad_tiny(struct sdt_buf *o) { sdt_buf_put(o, "GGU", 3); }
static void bad_header_truncated(struct sdt_buf *o) { sdt_buf_put(o, "GGUF\x03\0\0\0\x01\0", 10); }
static void bad_magic(struct sdt_buf *o) { patch_small(o, SDT_GW_MAGIC, 0, 0x4c4d4747u /* "GGML" */, 4); }
static void bad_version1(struct sdt_buf *o) { patch_small(o, SDT_GW_VERSION, 0, 1, 4); }
static void bad_version99(struct sdt_buf *o) { patch_small(o, SDT_GW_VERSION, 0, 99, 4); }
static void bad_big_endian(struct sdt_buf *o) { patch_small(o, SDT_GW_VERSION, 0, 0x03000000u, 4); }
static void bad_n_tensors(struct sdt_buf *o) { patch_small(o, SDT_GW_N_TENSORS, 0, 1ull << 60, 8); }
static void bad_n_kv(struct sdt_buf *o) { patch_small(o, SDT_GW_N_KV, 0, 1ull << 60, 8); }

static void header(struct sdt_buf *o, uint64_t n_tensors, uint64_t n_kv) {
    sdt_buf_put(o, "GGUF", 4);
    sdt_buf_u32(o, 3);
    sdt_buf_u64(o, n_tensors);
    sdt_buf_u64(o, n_kv);
}
static void bad_key_truncated(struct sdt_buf *o) {
    header(o, 0, 1);
    sdt_buf_u64(o, 10);
    sdt_buf_put(o, "general", 7);
}
static void bad_key_len_huge(struct sdt_buf *o) {
    header(o, 0, 1);
    sdt_buf_u64(o, 1ull << 63);
    sdt_buf_put(o, "general.name\x08\0\0\0", 16);
}
static void bad_key_empty(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_rawn(w, "", 0, SD_GGUF_UINT8, "\1", 1);
    take(w, o);
}
static void bad_key_nul(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_rawn(w, "gen\0eral", 8, SD_GGUF_UINT8, "\1", 1);
    take(w, o);
}
static void bad_kv_type(struct sdt_buf *o) { one_raw_kv(o, "test.weird", 13, "\0\0\0\0", 4); }
static void bad_value_truncated(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    one_raw_kv(&v, "llama.block_count", SD_GGUF_UINT32, "\1\0\0\0", 4);
    sdt_buf_put(o, v.data, v.len - 2);
    sdt_buf_free(&v);
}
static void bad_bool(struct sdt_buf *o) { one_raw_kv(o, "test.flag", SD_GGUF_BOOL, "\2", 1); }
static void bad_str_len(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    sdt_buf_u64(&v, 1ull << 63);
    sdt_buf_put(&v, "abcdefgh", 8);
    one_raw_kv(o, "general.name", SD_GGUF_STRING, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_arr_count(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    sdt_buf_u32(&v, SD_GGUF_INT32);
    sdt_buf_u64(&v, 1ull << 61);
    sdt_buf_put(&v, "\0\0\0\0\0\0\0\0", 8);
    one_raw_kv(o, "tokenizer.ggml.token_type", SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_arr_str_count(struct sdt_buf *o) {
    /* 100 strings cannot fit in 40 bytes (each needs at least 8). */
    struct sdt_buf v = {0};
    sdt_buf_u32(&v, SD_GGUF_STRING);
    sdt_buf_u64(&v, 100);
    for (int i = 0; i < 5; i++) sdt_buf_str(&v, "");
    one_raw_kv(o, "tokenizer.ggml.tokens", SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_arr_elem_type(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    sdt_buf_u32(&v, 42);
    sdt_buf_u64(&v, 0);
    one_raw_kv(o, "test.arr", SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_arr_string_truncated(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    sdt_buf_u32(&v, SD_GGUF_STRING);
    sdt_buf_u64(&v, 2);
    sdt_buf_str(&v, "<pad>");
    sdt_buf_u64(&v, 6);
    sdt_buf_put(&v, "<eo", 3);
    one_raw_kv(o, "tokenizer.ggml.tokens", SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_nested_truncated(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    int32_t ints[2] = {1, 2};
    sdt_buf_arr_of_arr(&v, 2);
    sdt_buf_arr(&v, SD_GGUF_INT32, ints, 2);
    sdt_buf_u32(&v, SD_GGUF_INT32); /* second element claims 5 ints, has 2 */
    sdt_buf_u64(&v, 5);
    sdt_buf_put(&v, ints, 8);
    one_raw_kv(o, "test.nested", SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_nested_deep(struct sdt_buf *o) {
    struct sdt_buf v = {0};
    for (int i = 0; i < 12; i++) sdt_buf_arr_of_arr(&v, 1);
    sdt_buf_arr(&v, SD_GGUF_UINT8, NULL, 0);
    one_raw_kv(o, "test.deep", SD_GGUF_ARRAY, v.data, v.len);
    sdt_buf_free(&v);
}
static void bad_dup_key(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    sdt_gw_kv_str(w, "general.name", "a");
    sdt_gw_kv_u32(w, "x", 1);
    sdt_gw_kv_str(w, "general.name", "b");
    take(w, o);
}
static void bad_align(struct sdt_buf *o, int kind) {
    struct sdt_gguf_writer *w = small_writer();
    if (kind == 0) sdt_gw_kv_u32(w, "general.alignment", 0);
    if (kind == 1) sdt_gw_kv_u32(w, "general.alignment", 48);
    if (kind == 2) sdt_gw_kv_str(w, "general.alignment", "32");
    if (kind == 3) sdt_gw_kv_i32(w, "general.alignment", -32);
    take(w, o);
}
static void bad_align0(struct sdt_buf *o) { bad_align(o, 0); }
static void bad_align48(struct sdt_buf *o) { bad_align(o, 1); }
static void bad_align_str(struct sdt_buf *o) { bad_align(o, 2); }
static void bad_align_neg(struct sdt_buf *o) { bad_align(o, 3); }
static void bad_ndims5(struct sdt_buf *o) { one_tensor(o, 5, 16, 1, SD_TYPE_F32); }
static void bad_ndims0(struct sdt_buf *o) { one_tensor(o, 0, 16, 1, SD_TYPE_F32); }
static void bad_dim0(struct sdt_buf *o) { one_tensor(o, 2, 16, 0, SD_TYPE_F32); }
static void bad_dim_neg(struct sdt_buf *o) { one_tensor(o, 2, -32, 1, SD_TYPE_F32); }
static void bad_nelem_ovf(struct sdt_buf *o) { one_tensor(o, 2, 1ll << 32, 1ll << 32, SD_TYPE_F32); }
static void bad_nbytes_ovf(struct sdt_buf *o) { one_tensor(o, 1, 1ll << 62, 1, SD_TYPE_F32); }
static void bad_ttype(struct sdt_buf *o) { one_tensor(o, 2, 16, 1, 99); }
static void bad_ttype_gap(struct sdt_buf *o) { one_tensor(o, 2, 16, 1, 4); /* Q4_2, removed from ggml */ }
static void bad_block(struct sdt_buf *o) { one_tensor(o, 2, 40, 1, SD_TYPE_Q8_0); }
static void bad_past_end(struct sdt_buf *o) { patch_small(o, SDT_GW_TENSOR_OFFSET, 1, 1024, 8); }
static void bad_misaligned(struct sdt_buf *o) { patch_small(o, SDT_GW_TENSOR_OFFSET, 1, 40, 8); }
static void bad_offset_ovf(struct sdt_buf *o) { patch_small(o, SDT_GW_TENSOR_OFFSET, 1, UINT64_MAX - 31, 8); }
static void bad_data_cut(struct sdt_buf *o) {
    /* The file ends 5 bytes into the last tensor's data. */
    struct sdt_gguf_writer *w = small_writer();
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    sdt_buf_put(o, bytes, sdt_gw_offset(w, SDT_GW_TENSOR_DATA, 1) + 5);
    sdt_gw_free(w);
}
static void bad_dup_tensor(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = small_writer();
    int64_t ne[1] = {8};
    sdt_gw_tensor(w, "w0", 1, ne, SD_TYPE_F32, NULL, 32);
    take(w, o);
}
static void bad_tinfo_cut(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = small_writer();
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    sdt_buf_put(o, bytes, sdt_gw_offset(w, SDT_GW_TENSOR_NE, 1) + 3); /* inside w1's ne[0] */
    sdt_gw_free(w);
}
static void bad_tname_nul(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    int64_t ne[1] = {8};
    sdt_gw_tensorn(w, "w\0x", 3, 1, ne, SD_TYPE_F32, NULL, 32);
    take(w, o);
}
static void bad_tname_empty(struct sdt_buf *o) {
    struct sdt_gguf_writer *w = sdt_gw_new();
    int64_t ne[1] = {8};
    sdt_gw_tensorn(w, "", 0, 1, ne, SD_TYPE_F32, NULL, 32);
    take(w, o);
}
static void bad_tname_len(struct sdt_buf *o) { patch_small(o, SDT_GW_TENSOR, 1, 1ull << 62, 8); }

struct bad_case {
    const char *name;
    void (*build)(struct sdt_buf *out);
    int status;
    const char *sub[3]; /* substrings the message must contain */
};

static const struct bad_case k_bad[] = {
    {"empty file", bad_empty, SDNPU_ERR_FORMAT, {"empty", "0 bytes"}},
    {"3-byte file", bad_tiny, SDNPU_ERR_FORMAT, {"header", "truncated", "3 bytes"}},
    {"truncated header", bad_header_truncated, SDNPU_ERR_FORMAT, {"header", "n_tensors", "ends at 10"}},
    {"wrong magic", bad_magic, SDNPU_ERR_FORMAT, {"magic", "47 47 4d 4c"}},
    {"version 1", bad_version1, SDNPU_ERR_UNSUPPORTED, {"version 1"}},
    {"version 99", bad_version99, SDNPU_ERR_UNSUPPORTED, {"version 99"}},
    {"big-endian", bad_big_endian, SDNPU_ERR_UNSUPPORTED, {"big-endian", "0x03000000"}},
    {"n_tensors 2^60", bad_n_tensors, SDNPU_ERR_FORMAT, {"n_tensors", "1152921504606846976"}},
    {"n_kv 2^60", bad_n_kv, SDNPU_ERR_FORMAT, {"n_kv", "1152921504606846976"}},
    {"truncated key", bad_key_truncated, SDNPU_ERR_FORMAT, {"key/value 0", "key name", "needs 10 bytes"}},
    {"key length 2^63", bad_key_len_huge, SDNPU_ERR_FORMAT, {"key/value 0", "9223372036854775808"}},
    {"empty key", bad_key_empty, SDNPU_ERR_FORMAT, {"key/value 0", "empty key name"}},
    {"key with NUL", bad_key_nul, SDNPU_ERR_FORMAT, {"key name 'gen'", "NUL"}},
    {"kv type 13", bad_kv_type, SDNPU_ERR_FORMAT, {"test.weird", "value type 13"}},
    {"truncated value", bad_value_truncated, SDNPU_ERR_FORMAT, {"llama.block_count", "needs 4 bytes"}},
    {"bool value 2", bad_bool, SDNPU_ERR_FORMAT, {"test.flag", "value 2"}},
    {"string length 2^63", bad_str_len, SDNPU_ERR_FORMAT, {"general.name", "9223372036854775808"}},
    {"array count 2^61", bad_arr_count, SDNPU_ERR_FORMAT, {"tokenizer.ggml.token_type", "2305843009213693952"}},
    {"string array count", bad_arr_str_count, SDNPU_ERR_FORMAT, {"tokenizer.ggml.tokens", "100 string"}},
    {"array elem type 42", bad_arr_elem_type, SDNPU_ERR_FORMAT, {"test.arr", "element type 42"}},
    {"array string cut", bad_arr_string_truncated, SDNPU_ERR_FORMAT, {"tokenizer.ggml.tokens", "needs 6 bytes"}},
    {"nested array cut", bad_nested_truncated, SDNPU_ERR_FORMAT, {"test.nested", "nested", "5 int32"}},
    {"nesting too deep", bad_nested_deep, SDNPU_ERR_FORMAT, {"test.deep", "deeper than 8"}},
    {"duplicate key", bad_dup_key, SDNPU_ERR_FORMAT, {"duplicate key 'general.name'", "0 and 2"}},
    {"alignment 0", bad_align0, SDNPU_ERR_FORMAT, {"general.alignment", "= 0"}},
    {"alignment 48", bad_align48, SDNPU_ERR_FORMAT, {"general.alignment", "48", "power of two"}},
    {"alignment string", bad_align_str, SDNPU_ERR_FORMAT, {"general.alignment", "type string"}},
    {"alignment -32", bad_align_neg, SDNPU_ERR_FORMAT, {"general.alignment", "-32"}},
    {"n_dims 5", bad_ndims5, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "n_dims = 5"}},
    {"n_dims 0", bad_ndims0, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "n_dims = 0"}},
    {"dim 0", bad_dim0, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "ne[1] = 0"}},
    {"dim negative", bad_dim_neg, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "ne[0] = -32"}},
    {"element count overflow", bad_nelem_ovf, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "4294967296", "overflow"}},
    {"byte size overflow", bad_nbytes_ovf, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "4611686018427387904 f32"}},
    {"tensor type 99", bad_ttype, SDNPU_ERR_UNSUPPORTED, {"blk.3.attn_q.weight", "type id 99"}},
    {"tensor type 4", bad_ttype_gap, SDNPU_ERR_UNSUPPORTED, {"blk.3.attn_q.weight", "type id 4"}},
    {"ne[0] vs block", bad_block, SDNPU_ERR_FORMAT, {"blk.3.attn_q.weight", "ne[0] = 40", "q8_0 block size 32"}},
    {"tensor past end", bad_past_end, SDNPU_ERR_FORMAT, {"tensor 'w1'", "extends beyond file end"}},
    {"misaligned offset", bad_misaligned, SDNPU_ERR_FORMAT, {"'w1'", "offset 40", "alignment 32"}},
    {"offset overflow", bad_offset_ovf, SDNPU_ERR_FORMAT, {"'w1'", "18446744073709551584", "overflows"}},
    {"data cut short", bad_data_cut, SDNPU_ERR_FORMAT, {"tensor 'w1'", "extends beyond file end"}},
    {"duplicate tensor", bad_dup_tensor, SDNPU_ERR_FORMAT, {"duplicate tensor name 'w0'", "0 and 2"}},
    {"tensor infos cut", bad_tinfo_cut, SDNPU_ERR_FORMAT, {"tensor 1 'w1'", "truncated", "dimension"}},
    {"tensor name NUL", bad_tname_nul, SDNPU_ERR_FORMAT, {"tensor 0", "NUL"}},
    {"tensor name empty", bad_tname_empty, SDNPU_ERR_FORMAT, {"tensor 0", "empty tensor name"}},
    {"tensor name length", bad_tname_len, SDNPU_ERR_FORMAT, {"tensor 1", "4611686018427387904"}},
};

static void check_bad(const struct bad_case *c, int rc, const struct sd_gguf *g, const struct sd_err *err) {
    if (rc != c->status) fail_msg("case '%s': status %d (%s), want %d; message: %s", c->name, rc, err->msg, c->status, err->msg);
    if (g) fail_msg("case '%s': handle not NULL on failure", c->name);
    if (err->status != rc) fail_msg("case '%s': err.status %d != %d", c->name, err->status, rc);
    for (int k = 0; k < 3 && c->sub[k]; k++) {
        if (!strstr(err->msg, c->sub[k])) fail_msg("case '%s': message '%s' lacks '%s'", c->name, err->msg, c->sub[k]);
    }
}

static void test_bad_inputs(void **state) {
    (void)state;
    for (size_t i = 0; i < SD_ARRAY_LEN(k_bad); i++) {
        const struct bad_case *c = &k_bad[i];
        struct sdt_buf b = {0};
        c->build(&b);
        assert_false(b.oom);
        uint8_t *copy;
        struct sd_gguf *g = (struct sd_gguf *)1;
        struct sd_err err = {0};
        int rc = open_copy(b.data, b.len, &copy, &g, &err);
        check_bad(c, rc, g, &err);
        if (getenv("SDT_VERBOSE")) print_message("%-22s %s: %s\n", c->name, sdnpu_status_str(rc), err.msg);
        free(copy);

        /* The same from a file, mapped and read: same status, and the
         * message also names the file. */
        const char *path = sdt_write_temp(b.data, b.len);
        assert_non_null(path);
        for (int mm = 0; mm < 2; mm++) {
            g = (struct sd_gguf *)1;
            rc = sd_gguf_open(path, mm == 1, &g, &err);
            check_bad(c, rc, g, &err);
            if (!strstr(err.msg, path)) fail_msg("case '%s': message '%s' lacks the path", c->name, err.msg);
        }
        unlink(path);
        sdt_buf_free(&b);
    }
    print_message("%zu malformed files rejected with the expected status and message\n", SD_ARRAY_LEN(k_bad));
}

/* ------------------------------------------------------------ sweeps */

/* Touch everything a successful open exposes, so ASan sees any pointer
 * that leads outside the file. */
static unsigned exercise(const struct sd_gguf *g) {
    unsigned sum = 0;
    char buf[96];
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        const char *key = sd_gguf_key_name(g, i);
        sd_gguf_value_str(g, i, buf, sizeof buf);
        sum += (unsigned char)buf[0];
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f;
        bool b;
        const char *s;
        size_t len;
        enum sd_gguf_type et;
        uint64_t n;
        const void *data;
        sd_gguf_get_u32(g, key, &u32, NULL);
        sd_gguf_get_i32(g, key, &i32, NULL);
        sd_gguf_get_u64(g, key, &u64, NULL);
        sd_gguf_get_i64(g, key, &i64, NULL);
        sd_gguf_get_f32(g, key, &f, NULL);
        sd_gguf_get_bool(g, key, &b, NULL);
        if (sd_gguf_get_str(g, key, &s, &len, NULL) == SDNPU_OK && len) sum += (unsigned char)s[len - 1];
        if (sd_gguf_get_arr(g, key, &et, &n, &data, NULL) == SDNPU_OK && et == SD_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                if (sd_gguf_arr_str_at(g, i, j, &s, &len) == SDNPU_OK && len) sum += (unsigned char)s[len - 1];
            }
        }
    }
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const struct sd_gguf_tensor *t = sd_gguf_tensor(g, i);
        const uint8_t *d = t->data;
        if (t->nbytes) sum += d[0] + d[t->nbytes - 1];
        assert_ptr_equal(sd_gguf_find_tensor(g, t->name), t);
    }
    return sum;
}

/* Every prefix of a valid file is rejected, except those that only drop
 * the trailing padding after the last tensor's data. */
static void test_truncation_sweep(void **state) {
    (void)state;
    struct sdt_gguf_writer *w = rich_writer(3);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    size_t last = RICH_N_TENSORS - 1;
    size_t data_end = sdt_gw_offset(w, SDT_GW_TENSOR_DATA, last) + k_rich_tensors[last].nbytes;
    for (size_t len = 0; len < size; len++) {
        uint8_t *copy;
        struct sd_gguf *g;
        struct sd_err err = {0};
        int rc = open_copy(bytes, len, &copy, &g, &err);
        if (len < data_end) {
            if (rc != SDNPU_ERR_FORMAT) fail_msg("prefix %zu of %zu: status %d (%s)", len, size, rc, err.msg);
            assert_null(g);
            assert_true(err.msg[0] != '\0');
        } else {
            assert_int_equal(rc, SDNPU_OK);
            exercise(g);
            sd_gguf_close(g);
        }
        free(copy);
    }
    sdt_gw_free(w);
}

/* Deterministic mutations of a valid file: random bytes, bit flips, and
 * interesting 64-bit values dropped at random offsets. Whatever happens,
 * nothing may crash or read out of bounds; what opens must be usable. */
static void test_fuzz(void **state) {
    (void)state;
    struct sdt_gguf_writer *w = rich_writer(3);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    static const uint64_t interesting[] = {0, 1, 0x7f, 0xff, 0xffffffffull, 1ull << 32, 1ull << 62, 1ull << 63,
                                           UINT64_MAX, UINT64_MAX - 7};
    uint64_t seed = 0x5eed;
    int n_ok = 0, n_fail = 0;
    enum { ITERS = 5000 };
    for (int it = 0; it < ITERS; it++) {
        uint8_t *m = exact_copy(bytes, size);
        size_t len = size;
        int n_mut = 1 + (int)(sdt_rand_u64(&seed) % 4);
        for (int k = 0; k < n_mut; k++) {
            size_t off = (size_t)(sdt_rand_u64(&seed) % size);
            switch (sdt_rand_u64(&seed) % 5) {
            case 0: m[off] = (uint8_t)sdt_rand_u64(&seed); break;
            case 1: m[off] ^= (uint8_t)(1u << (sdt_rand_u64(&seed) % 8)); break;
            case 2: m[off] = (uint8_t)(m[off] + 1); break;
            case 3:
                if (off + 8 <= size) sdt_patch_u64(m, off, interesting[sdt_rand_u64(&seed) % SD_ARRAY_LEN(interesting)]);
                break;
            case 4: len = (size_t)(sdt_rand_u64(&seed) % size); break;
            }
        }
        uint8_t *copy;
        struct sd_gguf *g;
        struct sd_err err = {0};
        int rc = open_copy(m, len, &copy, &g, &err);
        if (rc == SDNPU_OK) {
            n_ok++;
            exercise(g);
            sd_gguf_close(g);
        } else {
            n_fail++;
            assert_true(rc < 0);
            assert_null(g);
            assert_true(err.msg[0] != '\0');
        }
        free(copy);
        free(m);
    }
    print_message("fuzz: %d mutations, %d opened, %d rejected\n", ITERS, n_ok, n_fail);
    sdt_gw_free(w);
}

/* Fail the n-th allocation for n = 0, 1, ... until the open succeeds: every
 * failing open says OOM and leaves no block behind. */
static void alloc_sweep(const uint8_t *bytes, size_t size, const char *path) {
    long live0 = sdt_alloc_live();
    long n;
    for (n = 0;; n++) {
        sdt_alloc_fail_after(n);
        struct sd_gguf *g = NULL;
        struct sd_err err = {0};
        int rc = path ? sd_gguf_open(path, false, &g, &err) : sd_gguf_open_buffer(bytes, size, &g, &err);
        if (rc == SDNPU_OK) {
            sdt_alloc_fail_after(-1);
            assert_true(sdt_alloc_live() > live0);
            sd_gguf_close(g);
            assert_int_equal(sdt_alloc_live(), live0);
            break;
        }
        if (rc != SDNPU_ERR_OOM) fail_msg("fail_after %ld: status %d (%s)", n, rc, err.msg);
        assert_null(g);
        assert_non_null(strstr(err.msg, "out of memory"));
        if (sdt_alloc_live() != live0) fail_msg("fail_after %ld: %ld blocks leaked", n, sdt_alloc_live() - live0);
        assert_true(n < 100000);
    }
    sdt_alloc_fail_after(-1);
    assert_true(n > 3); /* handle, tables, names: the sweep did cover several failure points */
}

static void test_alloc_failures(void **state) {
    (void)state;
    struct sdt_gguf_writer *w = rich_writer(3);
    size_t size;
    uint8_t *bytes = sdt_gw_bytes(w, &size);
    alloc_sweep(bytes, size, NULL);
    const char *path = sdt_write_temp(bytes, size);
    alloc_sweep(NULL, 0, path); /* the read-into-heap path allocates the file buffer too */
    unlink(path);
    sdt_gw_free(w);
}

/* ------------------------------------------------------------ the real model */

/* Facts about Gemma 3 270M Q4_K_M read with the independent `gguf` Python
 * package (GGUFReader), not with this reader. */
static void test_real_model(void **state) {
    (void)state;
    if (!sdt_file_exists(SD_GEMMA_MODEL)) {
        print_message("%s absent: skipped\n", SD_GEMMA_MODEL);
        skip();
    }
    struct sd_gguf *g = NULL;
    struct sd_err err = {0};
    int rc = sd_gguf_open(SD_GEMMA_MODEL, true, &g, &err);
    if (rc) fail_msg("open %s: %s", SD_GEMMA_MODEL, err.msg);
    assert_int_equal(sd_gguf_version(g), 3);
    assert_int_equal(sd_gguf_alignment(g), 32);
    assert_int_equal(sd_gguf_n_kv(g), 33);
    assert_int_equal(sd_gguf_n_tensors(g), 236);
    assert_int_equal(sd_gguf_data_offset(g), 6525120);

    const char *s;
    size_t len;
    uint32_t u32;
    float f;
    bool b;
    assert_int_equal(sd_gguf_get_str(g, "general.architecture", &s, &len, &err), SDNPU_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(s, "gemma3", 6);
    assert_int_equal(sd_gguf_get_u32(g, "gemma3.block_count", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 18);
    assert_int_equal(sd_gguf_get_u32(g, "gemma3.embedding_length", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 640);
    assert_int_equal(sd_gguf_get_u32(g, "gemma3.attention.head_count_kv", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 1);
    assert_int_equal(sd_gguf_get_f32(g, "gemma3.rope.freq_base", &f, &err), SDNPU_OK);
    assert_true(f == 1000000.0f);
    assert_int_equal(sd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), SDNPU_OK);
    assert_true(b);
    assert_int_equal(sd_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u32, &err), SDNPU_OK);
    assert_int_equal(u32, 2);

    enum sd_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data, &err), SDNPU_OK);
    assert_int_equal(et, SD_GGUF_STRING);
    assert_int_equal(n, 262144);
    static const struct {
        uint64_t i;
        const char *text;
    } toks[] = {{0, "<pad>"}, {1, "<eos>"}, {2, "<bos>"}, {3, "<unk>"}, {106, "<end_of_turn>"}, {262143, "<unused6241>"}};
    for (size_t i = 0; i < SD_ARRAY_LEN(toks); i++) {
        assert_int_equal(sd_gguf_get_arr_str(g, "tokenizer.ggml.tokens", toks[i].i, &s, &len, &err), SDNPU_OK);
        assert_int_equal(len, strlen(toks[i].text));
        assert_memory_equal(s, toks[i].text, len);
    }
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data, &err), SDNPU_OK);
    assert_int_equal(et, SD_GGUF_FLOAT32);
    assert_int_equal(n, 262144);

    const struct sd_gguf_tensor *t = sd_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 640);
    assert_int_equal(t->ne[1], 262144);
    assert_int_equal(t->type, SD_TYPE_Q8_0);
    assert_int_equal(t->nbytes, (size_t)640 / 32 * 34 * 262144);
    t = sd_gguf_tensor(g, 0);
    assert_string_equal(t->name, "output_norm.weight");
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(t->ne[0], 640);
    assert_int_equal(t->type, SD_TYPE_F32);

    /* Tensor type census and parameter count, also from GGUFReader. */
    int count[SD_TYPE_COUNT] = {0};
    int64_t params = 0;
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        t = sd_gguf_tensor(g, i);
        count[t->type]++;
        params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    }
    assert_int_equal(count[SD_TYPE_F32], 109);
    assert_int_equal(count[SD_TYPE_Q5_0], 81);
    assert_int_equal(count[SD_TYPE_Q4_K], 27);
    assert_int_equal(count[SD_TYPE_Q8_0], 10);
    assert_int_equal(count[SD_TYPE_Q6_K], 9);
    assert_true(params == 268098176);
    exercise(g);

    /* Read into the heap instead of mapped: the same bytes. */
    struct sd_gguf *h = NULL;
    rc = sd_gguf_open(SD_GEMMA_MODEL, false, &h, &err);
    if (rc) fail_msg("read %s: %s", SD_GEMMA_MODEL, err.msg);
    assert_int_equal(sd_gguf_n_tensors(h), 236);
    const struct sd_gguf_tensor *tm = sd_gguf_find_tensor(g, "token_embd.weight");
    const struct sd_gguf_tensor *th = sd_gguf_find_tensor(h, "token_embd.weight");
    assert_int_equal(th->nbytes, tm->nbytes);
    assert_memory_equal(th->data, tm->data, tm->nbytes);
    assert_int_equal((uintptr_t)th->data % 32, 0);
    sd_gguf_close(h);
    sd_gguf_close(g);
}

static int setup(void **state) {
    (void)state;
    sdt_alloc_install();
    sdt_alloc_fail_after(-1);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_v3),
        cmocka_unit_test(test_roundtrip_v2),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_getter_errors),
        cmocka_unit_test(test_value_str),
        cmocka_unit_test(test_big_string_array),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_truncation_sweep),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
