/* test_safetensors.c — reader/writer round trips, dtype conversion, and hostile files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftrans.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

/* A .safetensors file from a literal header (no padding, so the data can start at any
 * alignment) and raw data bytes. */
static void write_raw(const char *path, const char *header, const void *data, size_t data_len) {
    size_t n = strlen(header);
    size_t total = 8 + n + data_len;
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    if (data_len) memcpy(buf + 8 + n, data, data_len);
    tu_write_file(path, buf, total);
    free(buf);
}

static void write_len_prefix(const char *path, uint64_t n, const char *rest) {
    uint8_t buf[256];
    size_t r = strlen(rest);
    assert_true(8 + r <= sizeof buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, rest, r);
    tu_write_file(path, buf, 8 + r);
}

/* dt_st_open must fail, leave the struct empty, and say "path: ...<problem>...". */
/* returns the error's code */
static dt_errcode expect_open_fails(const char *path, const char *problem) {
    dt_safetensors st;
    dt_error err = {0};
    assert_int_equal(dt_st_open(&st, path, &err), -1);
    assert_null(st.map);
    assert_null(st.tensors);
    assert_int_equal(st.n, 0);
    if (strncmp(err.msg, path, strlen(path)) != 0 || strncmp(err.msg + strlen(path), ": ", 2) != 0)
        fail_msg("message does not start with the path: %s", err.msg);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
    return err.code;
}

/* A header with one tensor "a" described by `body`, and `data_len` zero bytes of data. */
static dt_errcode expect_tensor_fails(const char *name, const char *body, size_t data_len, const char *problem) {
    char path[1200], header[1024];
    tu_path(path, sizeof path, name);
    snprintf(header, sizeof header, "{\"a\":%s}", body);
    uint8_t zeros[64] = {0};
    assert_true(data_len <= sizeof zeros);
    write_raw(path, header, zeros, data_len);
    return expect_open_fails(path, problem);
}

static int count_tmp_files(void) {
    DIR *d = opendir(tu_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static uint64_t file_u64_le(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t b[8];
    assert_int_equal(fread(b, 1, 8, f), 8);
    fclose(f);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long sz = ftell(f);
    assert_true(sz >= 0);
    rewind(f);
    uint8_t *buf = malloc((size_t)sz + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

/* ---------------------------------------------------------------- round trip */

static void test_round_trip(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "rt.safetensors");
    uint64_t rng = 42;
    float scalar = 3.25f, vec[5], cube[2 * 3 * 4], special[4] = {-0.0f, INFINITY, 1e-40f, -123456.789f};
    tu_fill_normal(vec, 5, 1.0f, &rng);
    tu_fill_normal(cube, 24, 2.0f, &rng);
    dt_st_entry e[5] = {
        {.name = "scalar", .ndim = 0, .data = &scalar},
        {.name = "model.vec", .ndim = 1, .shape = {5}, .data = vec},
        {.name = "cube", .ndim = 3, .shape = {2, 3, 4}, .data = cube},
        {.name = "empty", .ndim = 2, .shape = {0, 7}, .data = NULL},
        {.name = "quote\"back\\slash", .ndim = 1, .shape = {4}, .data = special},
    };
    dt_error err = {0};
    assert_int_equal(dt_st_write_f32(path, e, 5, &err), 0);
    assert_int_equal((8 + file_u64_le(path)) % 8, 0); /* data section aligned */
    assert_int_equal(count_tmp_files(), 0);

    dt_safetensors st;
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.n, 5);
    /* laid out as the reference's serialize does: one dtype here, so by name, back to back */
    const char *file_order[5] = {"cube", "empty", "model.vec", "quote\"back\\slash", "scalar"};
    size_t at = 0;
    for (int i = 0; i < 5; i++) {
        assert_string_equal(st.tensors[i].name, file_order[i]);
        assert_int_equal(st.tensors[i].begin, at);
        at = st.tensors[i].end;
    }
    assert_int_equal(at, st.data_size);
    for (int i = 0; i < 5; i++) {
        const dt_st_tensor *t = dt_st_find(&st, e[i].name);
        assert_non_null(t);
        assert_int_equal(t->dtype, DT_F32);
        assert_int_equal(t->ndim, e[i].ndim);
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            assert_int_equal(t->shape[d], e[i].shape[d]);
            numel *= (size_t)e[i].shape[d];
        }
        assert_int_equal(t->numel, numel);
        assert_int_equal(t->end - t->begin, 4 * numel);
        float *out = malloc((numel ? numel : 1) * sizeof *out);
        assert_non_null(out);
        dt_st_read_f32(&st, t, out);
        if (numel) assert_memory_equal(out, e[i].data, numel * sizeof *out); /* bit-exact, -0 included */
        free(out);
    }
    assert_null(dt_st_find(&st, "missing"));
    dt_st_close(&st);
    dt_st_close(&st); /* closing twice is harmless */
}

/* An independent decoding of IEEE binary16 bits (ldexp instead of bit surgery). */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double mag = e == 0 ? ldexp(m, -24) : e == 31 ? INFINITY : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -mag : mag;
}

/* Writes floats as one F16 or BF16 tensor and gives back the stored 16-bit words. */
static uint16_t *store_as(dt_dtype dtype, const float *x, size_t n) {
    char path[1200];
    tu_path(path, sizeof path, "narrow.safetensors");
    dt_st_entry e = {.name = "x", .ndim = 1, .shape = {(int64_t)n}, .data = x, .dtype = dtype};
    dt_error err = {0};
    if (dt_st_write(path, &e, 1, &err) != 0) fail_msg("%s", err.msg);
    dt_safetensors st;
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.tensors[0].dtype, dtype);
    assert_int_equal(st.tensors[0].end - st.tensors[0].begin, 2 * n);
    uint16_t *w = malloc(n * sizeof *w);
    assert_non_null(w);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = st.data + st.tensors[0].begin + 2 * i;
        w[i] = (uint16_t)(p[0] | (p[1] << 8));
    }
    dt_st_close(&st);
    return w;
}

/* Every finite half survives float → F16 exactly; the point halfway between two neighbours goes
 * to the one with an even mantissa; just off halfway goes to the nearer; overflow → inf. */
static void test_write_f16(void **state) {
    (void)state;
    enum { N = 31744 }; /* positive finite halves 0x0000..0x7BFF */
    float *x = malloc(4 * N * sizeof *x);
    assert_non_null(x);
    for (int h = 0; h < N; h++) x[h] = (float)half_value((uint16_t)h);
    for (int h = 0; h < N - 1; h++) {
        double lo = half_value((uint16_t)h), hi = half_value((uint16_t)(h + 1)), mid = (lo + hi) / 2;
        x[N + h] = (float)mid;                                  /* exact in float */
        x[2 * N + h] = nextafterf((float)mid, INFINITY);        /* just above: rounds up */
        x[3 * N + h] = -(float)mid;
    }
    x[2 * N - 1] = 65519.0f, x[3 * N - 1] = 65520.0f, x[4 * N - 1] = -1e30f;
    uint16_t *w = store_as(DT_F16, x, 4 * N);
    for (int h = 0; h < N; h++)
        if (w[h] != h) fail_msg("half 0x%04x (%g) stored as 0x%04x", h, (double)x[h], w[h]);
    for (int h = 0; h < N - 1; h++) {
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (w[N + h] != even) fail_msg("tie between 0x%04x and its successor stored as 0x%04x", h, w[N + h]);
        if (w[2 * N + h] != h + 1) fail_msg("above the tie after 0x%04x stored as 0x%04x", h, w[2 * N + h]);
        if (w[3 * N + h] != (0x8000 | even)) fail_msg("negative tie after 0x%04x stored as 0x%04x", h, w[3 * N + h]);
    }
    assert_int_equal(w[2 * N - 1], 0x7BFF); /* 65519 < 65520: the largest half */
    assert_int_equal(w[3 * N - 1], 0x7C00); /* the tie above 65504 rounds to even: infinity */
    assert_int_equal(w[4 * N - 1], 0xFC00);
    free(w);
    free(x);
}

static void test_write_bf16(void **state) {
    (void)state;
    const float x[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 0.0f, -0.0f,
                       3.4e38f, INFINITY, 1e-40f, NAN};
    const uint16_t want[] = {0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x0000, 0x8000, 0x7F80, 0x7F80, 0x0001};
    uint16_t *w = store_as(DT_BF16, x, 11);
    for (int i = 0; i < 10; i++)
        if (w[i] != want[i]) fail_msg("%g stored as 0x%04x, want 0x%04x", (double)x[i], w[i], want[i]);
    assert_true((w[10] & 0x7F80) == 0x7F80 && (w[10] & 0x7F) != 0); /* still a NaN */
    free(w);
    /* every bf16 value round-trips, and the reader widens it back exactly */
    float *all = malloc(65536 * sizeof *all), *back = malloc(65536 * sizeof *back);
    assert_non_null(all);
    assert_non_null(back);
    int n = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t u = b << 16;
        float f;
        memcpy(&f, &u, 4);
        if (!isnan(f)) all[n++] = f;
    }
    w = store_as(DT_BF16, all, (size_t)n);
    for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)w[i] << 16;
        memcpy(&back[i], &u, 4);
    }
    assert_memory_equal(back, all, (size_t)n * sizeof *all);
    free(w);
    free(all);
    free(back);
}

static void test_write_empty(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "empty_list.safetensors");
    dt_error err = {0};
    assert_int_equal(dt_st_write_f32(path, NULL, 0, &err), 0);
    dt_safetensors st;
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    assert_int_equal(st.n, 0);
    assert_int_equal(st.data_size, 0);
    dt_st_close(&st);
}

static void test_header_contents(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "hdr.safetensors");
    float x[6] = {1, 2, 3, 4, 5, 6};
    dt_st_entry e[2] = {{.name = "w", .ndim = 2, .shape = {2, 3}, .data = x}, {.name = "b", .ndim = 0, .data = x}};
    dt_error err = {0};
    assert_int_equal(dt_st_write_f32(path, e, 2, &err), 0);
    size_t n;
    uint8_t *buf = read_whole(path, &n);
    buf[n] = 0;
    const char *hdr = (const char *)buf + 8;
    /* what safetensors' serialize writes for {"w": .., "b": ..}: metadata first, then by name */
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[4,28]}}";
    uint64_t hl = file_u64_le(path);
    assert_int_equal(hl % 8, 0);
    assert_true(hl >= strlen(want) && hl < strlen(want) + 8);
    assert_memory_equal(hdr, want, strlen(want));
    for (size_t i = strlen(want); i < hl; i++) assert_int_equal(hdr[i], ' ');
    /* data little-endian: b = 1.0f = 00 00 80 3f, then w from 1.0f */
    assert_int_equal(n, 8 + hl + 28);
    const uint8_t one[4] = {0x00, 0x00, 0x80, 0x3f};
    assert_memory_equal(buf + 8 + hl, one, 4);
    assert_memory_equal(buf + 8 + hl + 4, one, 4);
    free(buf);
}

/* ---------------------------------------------------------------- dtype conversion */

static void test_f16(void **state) {
    (void)state;
    static const uint16_t bits[] = {0x0000, 0x8000, 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF,
                                    0x0400, 0x7C00, 0xFC00, 0x3555, 0x8001, 0x7E00};
    const float want[] = {0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, 0x1p-24f, 1023 * 0x1p-24f,
                          0x1p-14f, INFINITY, -INFINITY, 0.333251953125f, -0x1p-24f, NAN};
    enum { N = sizeof bits / sizeof bits[0] };
    uint8_t data[2 * N + 4];
    for (int i = 0; i < N; i++) {
        data[2 * i] = (uint8_t)bits[i];
        data[2 * i + 1] = (uint8_t)(bits[i] >> 8);
    }
    /* an F32 right after, at a 2-byte offset, to exercise unaligned reads */
    const uint8_t pi[4] = {0xdb, 0x0f, 0x49, 0x40}; /* 3.14159274f */
    memcpy(data + 2 * N, pi, 4);
    char path[1200], header[512];
    tu_path(path, sizeof path, "f16.safetensors");
    /* odd header length: the data section itself starts unaligned */
    snprintf(header, sizeof header,
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
             "\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%d,%d]}} ",
             N, 2 * N, 2 * N, 2 * N + 4);
    if (strlen(header) % 2 == 0) strcat(header, " ");
    write_raw(path, header, data, sizeof data);

    dt_safetensors st;
    dt_error err = {0};
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    const dt_st_tensor *h = dt_st_find(&st, "h");
    assert_non_null(h);
    assert_int_equal(h->dtype, DT_F16);
    float out[N];
    dt_st_read_f32(&st, h, out);
    for (int i = 0; i < N; i++) {
        if (isnan(want[i])) {
            assert_true(isnan(out[i]));
            continue;
        }
        if (memcmp(&out[i], &want[i], 4) != 0) fail_msg("F16 0x%04x: got %a want %a", bits[i], out[i], want[i]);
    }
    float f;
    dt_st_read_f32(&st, dt_st_find(&st, "f"), &f);
    assert_true(f == 3.14159274f);
    dt_st_close(&st);
}

static void test_bf16(void **state) {
    (void)state;
    static const uint16_t bits[] = {0x3F80, 0xC040, 0x4049, 0x7F80, 0xFF80, 0x0001, 0x8000, 0x7FC0};
    const float want[] = {1.0f, -3.0f, 3.140625f, INFINITY, -INFINITY, 0x1p-133f, -0.0f, NAN};
    enum { N = sizeof bits / sizeof bits[0] };
    uint8_t data[2 * N];
    for (int i = 0; i < N; i++) {
        data[2 * i] = (uint8_t)bits[i];
        data[2 * i + 1] = (uint8_t)(bits[i] >> 8);
    }
    char path[1200], header[256];
    tu_path(path, sizeof path, "bf16.safetensors");
    snprintf(header, sizeof header, "{\"__metadata__\":{\"k\":\"v\",\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2,%d],"
                                    "\"data_offsets\":[0,%d]}}",
             N / 2, 2 * N);
    write_raw(path, header, data, sizeof data);
    dt_safetensors st;
    dt_error err = {0};
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.n, 1);
    const dt_st_tensor *b = &st.tensors[0];
    assert_int_equal(b->dtype, DT_BF16);
    assert_int_equal(b->numel, N);
    float out[N];
    dt_st_read_f32(&st, b, out);
    for (int i = 0; i < N; i++) {
        if (isnan(want[i])) assert_true(isnan(out[i]));
        else if (memcmp(&out[i], &want[i], 4) != 0) fail_msg("BF16 0x%04x: got %a want %a", bits[i], out[i], want[i]);
    }
    dt_st_close(&st);
}

/* ---------------------------------------------------------------- hostile files */

static void test_missing_and_empty(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "does_not_exist.safetensors");
    expect_open_fails(path, "No such file");
    tu_path(path, sizeof path, "zero.safetensors");
    tu_write_file(path, "", 0);
    expect_open_fails(path, "truncated");
    tu_write_file(path, "\x05\0\0\0\0", 5);
    expect_open_fails(path, "truncated");
    expect_open_fails(tu_tmpdir(), "not a regular file");
}

static void test_truncated_everywhere(void **state) {
    (void)state;
    char good[1200], cut[1200];
    tu_path(good, sizeof good, "whole.safetensors");
    tu_path(cut, sizeof cut, "cut.safetensors");
    float x[10] = {0}, y[3] = {0};
    dt_st_entry e[2] = {{.name = "x", .ndim = 1, .shape = {10}, .data = x},
                        {.name = "y", .ndim = 2, .shape = {1, 3}, .data = y}};
    dt_error err = {0};
    assert_int_equal(dt_st_write_f32(good, e, 2, &err), 0);
    size_t n;
    uint8_t *buf = read_whole(good, &n);
    size_t hl = (size_t)file_u64_le(good);
    const size_t cuts[] = {0, 1, 4, 7, 8, 9, 8 + hl / 2, 8 + hl - 1, 8 + hl, 8 + hl + 3, 8 + hl + 40, n - 1};
    const char *problems[] = {"truncated", "truncated", "truncated", "truncated", "past end of file",
                              "past end of file", "past end of file", "past end of file", "out of bounds",
                              "out of bounds", "out of bounds", "out of bounds"};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        tu_write_file(cut, buf, cuts[i]);
        expect_open_fails(cut, problems[i]);
    }
    /* and the uncut file is fine */
    tu_write_file(cut, buf, n);
    dt_safetensors st;
    assert_int_equal(dt_st_open(&st, cut, &err), 0);
    dt_st_close(&st);
    free(buf);
}

static void test_bad_header_length(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "badlen.safetensors");
    write_len_prefix(path, 100, "{\"a\":1}   ");
    expect_open_fails(path, "header length 100 past end of file (size 18)");
    write_len_prefix(path, (uint64_t)1 << 40, "{}");
    expect_open_fails(path, "absurdly large");
    write_len_prefix(path, UINT64_MAX, "{}");
    expect_open_fails(path, "absurdly large");
}

static void test_bad_json(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "badjson.safetensors");
    const char *not_json[] = {"", "{not json", "{\"a\":", "{} trailing", "\"unterminated", "{}\x7f"};
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
        write_raw(path, not_json[i], NULL, 0);
        expect_open_fails(path, "header is not JSON");
    }
    const char *not_object[] = {"[1,2]", "42", "\"str\"", "null"};
    for (size_t i = 0; i < sizeof not_object / sizeof not_object[0]; i++) {
        write_raw(path, not_object[i], NULL, 0);
        expect_open_fails(path, "not an object");
    }
    /* trailing space padding is fine */
    write_raw(path, "{}       ", NULL, 0);
    dt_safetensors st;
    dt_error err = {0};
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    dt_st_close(&st);
    write_raw(path, "{\"__metadata__\":[1]}", NULL, 0);
    expect_open_fails(path, "__metadata__");
}

static void test_bad_dtype(void **state) {
    (void)state;
    /* the format's dtypes this library does not read: valid, unsupported; any other string: not the format */
    assert_int_equal(expect_tensor_fails("dt1.st", "{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}", 8,
                                         "tensor a: dtype F64 is not supported here"),
                     DT_ERR_UNSUPPORTED);
    assert_int_equal(expect_tensor_fails("dt2.st", "{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}", 2,
                                         "tensor a: dtype I16 is not supported here"),
                     DT_ERR_UNSUPPORTED);
    assert_int_equal(expect_tensor_fails("dt8.st", "{\"dtype\":\"F39\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                                         "tensor a: 'F39' is not a safetensors dtype"),
                     DT_ERR_FORMAT);
    /* I8 is one byte an element: a span of 2 for one element is a lie */
    expect_tensor_fails("dt7.st", "{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,2]}", 2,
                        "span 2 bytes but shape and dtype need 1");
}

/* Integer tensors (quantised checkpoints): raw bytes written as I8 / U8, read back as stored
 * and, through dt_st_read_f32, by value. */
static void test_integer_round_trip(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "ints.safetensors");
    const int8_t i8[5] = {-127, -1, 0, 5, 127};
    const uint8_t u8[3] = {0, 128, 255};
    const float f[2] = {1.5f, -2.0f};
    dt_st_entry e[3] = {{.name = "i", .ndim = 1, .shape = {5}, .dtype = DT_I8, .raw = i8},
                        {.name = "u", .ndim = 2, .shape = {1, 3}, .dtype = DT_U8, .raw = u8},
                        {.name = "f", .ndim = 1, .shape = {2}, .data = f}};
    dt_error err;
    assert_int_equal(dt_st_write_f32(path, e, 3, &err), 0);
    dt_safetensors st;
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    const dt_st_tensor *ti = dt_st_find(&st, "i"), *tu = dt_st_find(&st, "u"), *tf = dt_st_find(&st, "f");
    assert_non_null(ti);
    assert_int_equal(ti->dtype, DT_I8);
    assert_int_equal(tu->dtype, DT_U8);
    assert_int_equal(tf->dtype, DT_F32);
    assert_memory_equal(dt_st_data(&st, ti), i8, 5);
    assert_memory_equal(dt_st_data(&st, tu), u8, 3);
    float back[5];
    dt_st_read_f32(&st, ti, back);
    assert_true(back[0] == -127 && back[4] == 127);
    dt_st_read_f32(&st, tu, back);
    assert_true(back[1] == 128 && back[2] == 255);
    dt_st_close(&st);
    /* raw data of a float dtype is refused */
    dt_st_entry bad = {.name = "x", .ndim = 1, .shape = {1}, .dtype = DT_F16, .raw = u8};
    assert_int_equal(dt_st_write_f32(path, &bad, 1, &err), -1);
    assert_non_null(strstr(err.msg, "I8 or U8"));
    expect_tensor_fails("dt3.st", "{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4,
                        "tensor a: 'f32' is not a safetensors dtype");
    expect_tensor_fails("dt4.st", "{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}", 4, "tensor a: dtype");
    expect_tensor_fails("dt5.st", "{\"shape\":[1],\"data_offsets\":[0,4]}", 4, "tensor a: dtype");
    expect_tensor_fails("dt6.st", "[1,2]", 4, "tensor a: entry is not a JSON object");
}

static void test_bad_shape(void **state) {
    (void)state;
    const char *bodies[] = {
        "{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}",
        "{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}",
        "{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}",
        "{\"dtype\":\"F32\",\"shape\":[1,null],\"data_offsets\":[0,4]}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        expect_tensor_fails("shape.st", bodies[i], 8, "tensor a: shape[");
    expect_tensor_fails("shape.st", "{\"dtype\":\"F32\",\"shape\":7,\"data_offsets\":[0,28]}", 28,
                        "tensor a: shape is missing or not an array");
    expect_tensor_fails("shape.st", "{\"dtype\":\"F32\",\"data_offsets\":[0,4]}", 4,
                        "tensor a: shape is missing or not an array");
    expect_tensor_fails("shape.st", "{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}", 4,
                        "tensor a: shape has 9 dimensions");
}

static void test_overflow_shape(void **state) {
    (void)state;
    /* 2^32 · 2^32 · 16 wraps a 64-bit product to 0; so would the byte count of 2^62 F32s */
    expect_tensor_fails("ovf.st", "{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}", 0,
                        "tensor a: shape overflows");
    expect_tensor_fails("ovf.st", "{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}", 0,
                        "tensor a: shape overflows");
    expect_tensor_fails("ovf.st", "{\"dtype\":\"F16\",\"shape\":[1e300],\"data_offsets\":[0,0]}", 0,
                        "tensor a: shape overflows");
}

static void test_bad_offsets(void **state) {
    (void)state;
    /* out of bounds: the data section is 8 bytes */
    expect_tensor_fails("off.st", "{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 8,
                        "tensor a: data_offsets [0, 16] out of bounds");
    expect_tensor_fails("off.st", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}", 8, "out of bounds");
    expect_tensor_fails("off.st", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e30,1e30]}", 8,
                        "out of bounds");
    expect_tensor_fails("off.st", "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}", 8,
                        "tensor a: data_offsets [4, 0] has begin after end");
    /* disagreeing with shape */
    expect_tensor_fails("off.st", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}", 8,
                        "tensor a: data_offsets [0, 4] span 4 bytes but shape and dtype need 8");
    expect_tensor_fails("off.st", "{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "need 4");
    /* malformed */
    const char *bad[] = {
        "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}",
        "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}",
        "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}",
        "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}",
        "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0,4\"}",
        "{\"dtype\":\"F32\",\"shape\":[1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_tensor_fails("off.st", bad[i], 8, "tensor a: data_offsets must be [begin, end]");
}

static void test_bad_names(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "names.st");
    uint8_t zeros[8] = {0};
    write_raw(path,
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              zeros, 8);
    expect_open_fails(path, "duplicate tensor name a");
    char header[1024], name[301];
    memset(name, 'n', 300);
    name[300] = 0;
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    write_raw(path, header, zeros, 4);
    expect_open_fails(path, "tensor name too long");
    /* 255 characters is the longest name that fits */
    name[255] = 0;
    snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
    write_raw(path, header, zeros, 4);
    dt_safetensors st;
    dt_error err = {0};
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    assert_int_equal(strlen(st.tensors[0].name), 255);
    dt_st_close(&st);
}

/* ---------------------------------------------------------------- tensors tile the data */

/* A file from a header and `data_len` bytes counting up from 1, so that each tensor's values
 * show which bytes it was given. */
static void write_counting(const char *path, const char *header, size_t data_len) {
    uint8_t data[256];
    assert_true(data_len <= sizeof data);
    for (size_t i = 0; i < data_len; i++) data[i] = (uint8_t)(i + 1);
    write_raw(path, header, data, data_len);
}

static void expect_layout_fails(const char *name, const char *header, size_t data_len, const char *part1,
                                const char *part2) {
    char path[1200];
    tu_path(path, sizeof path, name);
    write_counting(path, header, data_len);
    expect_open_fails(path, part1);
    dt_safetensors st;
    dt_error err = {0};
    assert_int_equal(dt_st_open(&st, path, &err), -1);
    if (part2 && !strstr(err.msg, part2)) fail_msg("expected '%s' in: %s", part2, err.msg);
}

#define Q "\"model.layers.0.self_attn.q_proj.weight\""
#define K "\"model.layers.0.self_attn.k_proj.weight\""
#define U8T(b, e, n) "{\"dtype\":\"U8\",\"shape\":[" #n "],\"data_offsets\":[" #b "," #e "]}"

static void test_overlap(void **state) {
    (void)state;
    /* k_proj's offsets point at q_proj's bytes (its own are still there): the reference refuses
     * it; loaded, k_proj would silently be a copy of q_proj */
    expect_layout_fails("ovl1.st", "{" Q ":" U8T(0, 16, 16) "," K ":" U8T(0, 16, 16) "}", 32,
                        "tensors model.layers.0.self_attn.q_proj.weight [0, 16] and "
                        "model.layers.0.self_attn.k_proj.weight [0, 16] overlap",
                        NULL);
    /* partly, listed in either order */
    expect_layout_fails("ovl2.st", "{\"b\":" U8T(4, 12, 8) ",\"a\":" U8T(0, 8, 8) "}", 12,
                        "tensors a [0, 8] and b [4, 12] overlap", NULL);
    /* an empty tensor inside another one's bytes is refused too (the reference's offsets must
     * follow each other) */
    expect_layout_fails("ovl3.st", "{\"a\":" U8T(0, 8, 8) ",\"e\":" U8T(3, 3, 0) "}", 8,
                        "tensors a [0, 8] and e [3, 3] overlap", NULL);
}

static void test_hole(void **state) {
    (void)state;
    expect_layout_fails("hole1.st", "{\"a\":" U8T(0, 4, 4) ",\"b\":" U8T(8, 12, 4) "}", 12,
                        "data section bytes [4, 8) belong to no tensor", "between tensors a and b");
    expect_layout_fails("hole2.st", "{\"a\":" U8T(4, 8, 4) "}", 8, "data section bytes [0, 4) belong to no tensor",
                        "before tensor a");
    /* a tensor dropped from the header but not from the data */
    expect_layout_fails("hole3.st", "{\"c\":" U8T(8, 12, 4) ",\"a\":" U8T(0, 4, 4) "}", 12, "bytes [4, 8)",
                        "between tensors a and c");
}

static void test_trailing(void **state) {
    (void)state;
    expect_layout_fails("trail1.st", "{\"a\":" U8T(0, 4, 4) "}", 6,
                        "2 trailing bytes after the last tensor's data (tensor a ends at byte 4 of 6)", NULL);
    expect_layout_fails("trail2.st", "{\"__metadata__\":{\"format\":\"pt\"}}", 3,
                        "3 trailing bytes after the header, which lists no tensor data", NULL);
    expect_layout_fails("trail3.st", "{\"z\":" U8T(0, 0, 0) "}", 1, "1 trailing bytes", NULL);
}

/* What transformers writes must keep loading: empty tensors anywhere (several at one offset), a
 * header listing tensors in any order, a header padded with spaces. */
static void test_legal_layouts(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "legal.st");
    /* listed against their order in the data; the header padded to a multiple of 8 */
    char header[512];
    snprintf(header, sizeof header, "%s",
             "{\"last\":" U8T(6, 6, 0) ",\"c\":" U8T(3, 6, 3) ",\"mid\":{\"dtype\":\"F32\",\"shape\":[2,0],"
             "\"data_offsets\":[3,3]},\"b\":" U8T(1, 3, 2) ",\"first\":" U8T(0, 0, 0) ",\"a\":" U8T(0, 1, 1)
             ",\"first2\":" U8T(0, 0, 0) ",\"__metadata__\":{\"format\":\"pt\"}}");
    while ((8 + strlen(header)) % 8) strcat(header, " ");
    write_counting(path, header, 6);
    dt_safetensors st;
    dt_error err = {0};
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(st.n, 7);
    const char *names[] = {"a", "b", "c"};
    const uint8_t want[3][3] = {{1}, {2, 3}, {4, 5, 6}};
    for (int i = 0; i < 3; i++) {
        const dt_st_tensor *t = dt_st_find(&st, names[i]);
        assert_non_null(t);
        assert_memory_equal(dt_st_data(&st, t), want[i], (size_t)i + 1);
    }
    const char *empty[] = {"first", "first2", "mid", "last"};
    for (int i = 0; i < 4; i++) {
        const dt_st_tensor *t = dt_st_find(&st, empty[i]);
        assert_non_null(t);
        assert_int_equal(t->numel, 0);
    }
    dt_st_close(&st);
    /* nothing at all, and no __metadata__ (transformers checks the format only when there is one) */
    write_raw(path, "{}", NULL, 0);
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    dt_st_close(&st);
    write_raw(path, "{\"__metadata__\":null,\"a\":" U8T(0, 1, 1) "}", "x", 1);
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    dt_st_close(&st);
}

static void test_metadata_format(void **state) {
    (void)state;
    char path[1200], header[256];
    tu_path(path, sizeof path, "format.st");
    const char *ok[] = {"pt", "tf", "flax", "mlx"};
    for (int i = 0; i < 4; i++) {
        snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"%s\",\"x\":\"y\"},\"a\":" U8T(0, 1, 1) "}",
                 ok[i]);
        write_raw(path, header, "x", 1);
        dt_safetensors st;
        dt_error err = {0};
        if (dt_st_open(&st, path, &err) != 0) fail_msg("format %s: %s", ok[i], err.msg);
        dt_st_close(&st);
    }
    write_raw(path, "{\"__metadata__\":{\"format\":\"np\"},\"a\":" U8T(0, 1, 1) "}", "x", 1);
    expect_open_fails(path, "__metadata__ format \"np\" is not one transformers loads");
    write_raw(path, "{\"__metadata__\":{\"format\":\"PT\"}}", NULL, 0);
    expect_open_fails(path, "format \"PT\"");
    write_raw(path, "{\"__metadata__\":{\"k\":\"v\"}}", NULL, 0);
    expect_open_fails(path, "__metadata__ has no \"format\"");
    write_raw(path, "{\"__metadata__\":{}}", NULL, 0);
    expect_open_fails(path, "__metadata__ has no \"format\"");
    /* the last of a repeated key counts, as in the reference's map */
    write_raw(path, "{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"}}", NULL, 0);
    expect_open_fails(path, "format \"np\"");
    write_raw(path, "{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", NULL, 0);
    expect_open_fails(path, "__metadata__ value of \"n\" is not a string");
    write_raw(path, "{\"__metadata__\":{\"format\":\"pt\"},\"__metadata__\":{\"format\":\"pt\"}}", NULL, 0);
    expect_open_fails(path, "__metadata__ appears twice");
}

/* The header is UTF-8 of strict JSON, as the reference (serde_json over a Rust str) reads it. */
static void test_header_text(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "text.st");
    write_raw(path, "{\"caf\xc3\xa9\":" U8T(0, 1, 1) "}", "x", 1);
    dt_safetensors st;
    dt_error err = {0};
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_non_null(dt_st_find(&st, "caf\xc3\xa9"));
    dt_st_close(&st);
    const char *bad_utf8[] = {"{\"caf\xe9\":" U8T(0, 1, 1) "}", "{\"\xc0\xaf\":" U8T(0, 1, 1) "}",
                              "{\"\xed\xa0\x80\":" U8T(0, 1, 1) "}", "{\"\xf4\x90\x80\x80\":" U8T(0, 1, 1) "}",
                              "{\"a\":" U8T(0, 1, 1) "}\xe2\x82"};
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
        write_raw(path, bad_utf8[i], "x", 1);
        expect_open_fails(path, "header is not valid UTF-8");
    }
    write_raw(path, "{\"a\tb\":" U8T(0, 1, 1) "}", "x", 1);
    expect_open_fails(path, "header byte 3 is the control character 0x09");
    write_raw(path, "{\x01\"a\":" U8T(0, 1, 1) "}", "x", 1);
    expect_open_fails(path, "control character 0x01");
    /* JSON whitespace outside strings, and an escaped tab inside one, are fine */
    write_raw(path, "\t{\n\"a\\tb\" :\r" U8T(0, 1, 1) "}\n", "x", 1);
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    assert_non_null(dt_st_find(&st, "a\tb"));
    dt_st_close(&st);
}

/* ---------------------------------------------------------------- only regular files */

/* A FIFO must be refused at once: opened for reading it would block until a writer came. The
 * alarm turns a regression into a failure (SIGALRM ends the test) instead of a hang. */
static void test_not_regular(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "fifo.safetensors");
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(20);
    expect_open_fails(path, "not a regular file (a FIFO)");
    alarm(0);
    unlink(path);
    expect_open_fails(tu_tmpdir(), "not a regular file (a directory)");
    expect_open_fails("/dev/null", "not a regular file (a character device)");
}

/* ---------------------------------------------------------------- the writer's layout */

/* The reference's serialize: tensors by dtype, widest first (F32, BF16, F16, I8, U8 in its enum
 * order), then by name; each begins where the previous ended. */
static void test_writer_order(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "order.safetensors");
    float f[4] = {1, 2, 3, 4};
    int8_t i8[3] = {-1, 2, -3};
    uint8_t u8[2] = {7, 8};
    dt_st_entry e[] = {
        {.name = "z", .ndim = 1, .shape = {1}, .data = f},
        {.name = "u", .ndim = 1, .shape = {2}, .dtype = DT_U8, .raw = u8},
        {.name = "a", .ndim = 1, .shape = {3}, .dtype = DT_BF16, .data = f},
        {.name = "i", .ndim = 1, .shape = {3}, .dtype = DT_I8, .raw = i8},
        {.name = "m", .ndim = 1, .shape = {2}, .dtype = DT_F16, .data = f},
        {.name = "b", .ndim = 1, .shape = {4}, .data = f},
        {.name = "c", .ndim = 1, .shape = {1}, .dtype = DT_BF16, .data = f},
    };
    const int n = (int)(sizeof e / sizeof e[0]);
    dt_error err = {0};
    if (dt_st_write(path, e, n, &err) != 0) fail_msg("%s", err.msg);
    dt_safetensors st;
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    const char *want[] = {"b", "z", "a", "c", "m", "i", "u"};
    const size_t begin[] = {0, 16, 20, 26, 28, 32, 35}, end = 37;
    assert_int_equal(st.n, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(st.tensors[i].name, want[i]);
        assert_int_equal(st.tensors[i].begin, begin[i]);
    }
    assert_int_equal(st.data_size, end);
    assert_memory_equal(dt_st_data(&st, dt_st_find(&st, "i")), i8, 3);
    assert_memory_equal(dt_st_data(&st, dt_st_find(&st, "u")), u8, 2);
    dt_st_close(&st);
    /* a name the header could not carry */
    dt_st_entry bad = {.name = "caf\xe9", .ndim = 1, .shape = {1}, .data = f};
    assert_int_equal(dt_st_write(path, &bad, 1, &err), -1);
    assert_non_null(strstr(err.msg, "not valid UTF-8"));
}

/* ---------------------------------------------------------------- writer failures */

static void expect_write_fails(const char *path, const dt_st_entry *e, int n, const char *problem) {
    dt_error err = {0};
    assert_int_equal(dt_st_write_f32(path, e, n, &err), -1);
    if (!strstr(err.msg, path)) fail_msg("message does not name the path: %s", err.msg);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
    assert_false(tu_file_exists(path));
    assert_int_equal(count_tmp_files(), 0);
}

static void test_writer_failures(void **state) {
    (void)state;
    char path[1200];
    float x[4] = {1, 2, 3, 4};
    dt_st_entry ok = {.name = "x", .ndim = 1, .shape = {4}, .data = x};
    tu_path(path, sizeof path, "a_file");
    tu_write_file(path, "x", 1);
    tu_path(path, sizeof path, "a_file/out.safetensors"); /* its directory cannot be made */
    expect_write_fails(path, &ok, 1, "a_file exists and is not a directory");

    tu_path(path, sizeof path, "w_bad.safetensors");
    remove(path); /* left by a previous run of this test */
    dt_st_entry dup[2] = {ok, ok};
    expect_write_fails(path, dup, 2, "duplicate tensor name x");
    dt_st_entry e = ok;
    e.ndim = 9;
    expect_write_fails(path, &e, 1, "ndim 9");
    e = ok;
    e.shape[0] = -4;
    expect_write_fails(path, &e, 1, "negative shape");
    e = ok;
    e.data = NULL;
    expect_write_fails(path, &e, 1, "data is NULL");
    e = ok;
    e.name = NULL;
    expect_write_fails(path, &e, 1, "no name");
    e = ok;
    e.name = "__metadata__";
    expect_write_fails(path, &e, 1, "__metadata__");
    e = ok;
    e.ndim = 3;
    e.shape[0] = e.shape[1] = e.shape[2] = (int64_t)1 << 30;
    expect_write_fails(path, &e, 1, "overflows");
    expect_write_fails(path, NULL, 2, "invalid tensor list");

    /* a failed write leaves an existing file untouched */
    assert_int_equal(dt_st_write_f32(path, &ok, 1, &(dt_error){0}), 0);
    dt_error err = {0};
    assert_int_equal(dt_st_write_f32(path, dup, 2, &err), -1);
    dt_safetensors st;
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    assert_int_equal(st.n, 1);
    dt_st_close(&st);
    assert_int_equal(count_tmp_files(), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),        cmocka_unit_test(test_write_empty),
        cmocka_unit_test(test_write_f16),
        cmocka_unit_test(test_write_bf16),
        cmocka_unit_test(test_header_contents),   cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),              cmocka_unit_test(test_missing_and_empty),
        cmocka_unit_test(test_truncated_everywhere), cmocka_unit_test(test_bad_header_length),
        cmocka_unit_test(test_bad_json),          cmocka_unit_test(test_bad_dtype),
        cmocka_unit_test(test_integer_round_trip),
        cmocka_unit_test(test_bad_shape),         cmocka_unit_test(test_overflow_shape),
        cmocka_unit_test(test_bad_offsets),       cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_writer_failures),
        cmocka_unit_test(test_overlap),           cmocka_unit_test(test_hole),
        cmocka_unit_test(test_trailing),          cmocka_unit_test(test_legal_layouts),
        cmocka_unit_test(test_metadata_format),   cmocka_unit_test(test_header_text),
        cmocka_unit_test(test_not_regular),       cmocka_unit_test(test_writer_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
