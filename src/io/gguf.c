/* gguf.c — GGUF containers (io/gguf.h): a read-only view that checks every byte it relies on, and
 * a writer of the layout llama.cpp's gguf_write_to_file produces (tensors in order, each padded to
 * the alignment, so every offset is the sum of the padded sizes before it). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "internal.h"
#include "io/gguf.h"

/* ---------------------------------------------------------------- types */

typedef struct {
    const char *name;
    int64_t block;
    size_t bytes;
} ggml_type_info;

/* ggml's types by number (block size, bytes per block); numbers ggml retired stay NULL. */
static const ggml_type_info GGML_TYPES[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},     [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},     [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},  [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50}, [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},       [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},  [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},   [41] = {"Q1_0", 128, 18},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

const char *ggml_type_name(uint32_t type) { return type < N_GGML_TYPES ? GGML_TYPES[type].name : NULL; }

void ggml_type_size(uint32_t type, int64_t *block, size_t *bytes) {
    const int known = type < N_GGML_TYPES && GGML_TYPES[type].name;
    *block = known ? GGML_TYPES[type].block : 0;
    *bytes = known ? GGML_TYPES[type].bytes : 0;
}

static const char *const VALUE_TYPE_NAMES[] = {"u8",     "i8",    "u16",    "i16", "u32", "i32", "f32",
                                               "bool",   "string", "array", "u64", "i64", "f64"};

const char *gguf_value_type_name(uint32_t type) { return type <= GGUF_TYPE_FLOAT64 ? VALUE_TYPE_NAMES[type] : "?"; }

/* Bytes of one value of a fixed-size type (0 for string and array). */
static size_t value_size(uint32_t type) {
    static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type <= GGUF_TYPE_FLOAT64 ? sizes[type] : 0;
}

/* ---------------------------------------------------------------- little-endian */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ---------------------------------------------------------------- reading */

/* A cursor over the map: every read checks the bytes that remain first. */
typedef struct {
    const gguf_file *f;
    size_t pos;
    dt_error *err;
} cursor;

static size_t remain(const cursor *c) { return c->f->size - c->pos; }

static int need(cursor *c, size_t n, const char *what) {
    if (n <= remain(c)) return 0;
    return dt_fail_format(c->err, "%s: truncated: %s needs %zu bytes at offset %zu, the file has %zu left", c->f->path,
                          what, n, c->pos, remain(c));
}

static int read_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    *v = le32(c->f->map + c->pos);
    c->pos += 4;
    return 0;
}

static int read_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    *v = le64(c->f->map + c->pos);
    c->pos += 8;
    return 0;
}

static int read_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    if (read_u64(c, &len, what)) return -1;
    if (len > remain(c))
        return dt_fail_format(c->err, "%s: %s claims %llu bytes at offset %zu, past the end of the file (%zu left)",
                              c->f->path, what, (unsigned long long)len, c->pos - 8, remain(c));
    s->p = (const char *)c->f->map + c->pos;
    s->len = (size_t)len;
    c->pos += (size_t)len;
    return 0;
}

/* A key or name with a NUL in it would read as a shorter one everywhere it is compared. */
static int has_nul(const gguf_str *s) { return s->len && memchr(s->p, 0, s->len) != NULL; }

static int str_eq(const gguf_str *s, const char *z) {
    const size_t n = strlen(z);
    return s->len == n && memcmp(s->p, z, n) == 0;
}

static int cmp_str(const gguf_str *a, const gguf_str *b) {
    const size_t n = a->len < b->len ? a->len : b->len;
    const int c = memcmp(a->p, b->p, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* For messages: a key as text, cut short and with what is not printable replaced. */
static void printable(char *out, size_t n, const char *p, size_t len) {
    size_t k = 0;
    for (size_t i = 0; i < len && k + 4 < n; i++) out[k++] = p[i] >= 0x20 && p[i] < 0x7F ? p[i] : '?';
    if (len > 0 && k + 4 >= n) out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = '\0';
}

static int read_kv(cursor *c, int64_t index, gguf_kv *kv) {
    char what[96];
    snprintf(what, sizeof what, "key %lld", (long long)index);
    if (read_str(c, &kv->key, what)) return -1;
    char key[80];
    printable(key, sizeof key, kv->key.p, kv->key.len);
    if (kv->key.len == 0) return dt_fail_format(c->err, "%s: key %lld is empty", c->f->path, (long long)index);
    if (has_nul(&kv->key))
        return dt_fail_format(c->err, "%s: key %lld ('%s') holds a NUL byte", c->f->path, (long long)index, key);
    snprintf(what, sizeof what, "the value of '%s'", key);
    if (read_u32(c, &kv->type, what)) return -1;
    kv->elem = kv->type;
    kv->n = 1;
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (read_u32(c, &kv->elem, what) || read_u64(c, &kv->n, what)) return -1;
        if (kv->elem == GGUF_TYPE_ARRAY)
            return dt_fail_format(c->err, "%s: key '%s' is an array of arrays (GGUF has none)", c->f->path, key);
    }
    if (kv->elem > GGUF_TYPE_FLOAT64)
        return dt_fail_format(c->err, "%s: key '%s' has value type %u, which GGUF does not define", c->f->path, key,
                              kv->elem);
    kv->data = c->f->map + c->pos;
    const size_t start = c->pos;
    if (kv->elem == GGUF_TYPE_STRING) {
        /* each string has at least its 8-byte length: a count past that is a lie, found before the loop */
        if (kv->n > remain(c) / 8)
            return dt_fail_format(c->err, "%s: key '%s' claims %llu strings, more than the %zu bytes left can hold",
                                  c->f->path, key, (unsigned long long)kv->n, remain(c));
        for (uint64_t i = 0; i < kv->n; i++) {
            gguf_str s;
            if (read_str(c, &s, what)) return -1;
        }
    } else {
        const size_t w = value_size(kv->elem);
        if (kv->n > remain(c) / w)
            return dt_fail_format(c->err, "%s: key '%s' claims %llu values of %zu bytes, past the end of the file (%zu left)",
                                  c->f->path, key, (unsigned long long)kv->n, w, remain(c));
        c->pos += (size_t)kv->n * w;
    }
    kv->size = c->pos - start;
    return 0;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

static int read_tensor_info(cursor *c, int64_t index, gguf_tensor *t) {
    char what[96];
    snprintf(what, sizeof what, "tensor %lld's name", (long long)index);
    gguf_str name;
    if (read_str(c, &name, what)) return -1;
    char shown[80];
    printable(shown, sizeof shown, name.p, name.len);
    if (name.len == 0) return dt_fail_format(c->err, "%s: tensor %lld has an empty name", c->f->path, (long long)index);
    if (name.len >= GGUF_MAX_NAME)
        return dt_fail_format(c->err, "%s: tensor %lld's name '%s' has %zu bytes; ggml's names are shorter than %d",
                              c->f->path, (long long)index, shown, name.len, GGUF_MAX_NAME);
    if (has_nul(&name))
        return dt_fail_format(c->err, "%s: tensor %lld's name ('%s') holds a NUL byte", c->f->path, (long long)index,
                              shown);
    memcpy(t->name, name.p, name.len);
    t->name[name.len] = '\0';
    snprintf(what, sizeof what, "tensor '%s'", t->name);
    if (read_u32(c, &t->n_dims, what)) return -1;
    if (t->n_dims > GGUF_MAX_DIMS)
        return dt_fail_format(c->err, "%s: tensor '%s' has %u dimensions; ggml has at most %d", c->f->path, t->name,
                              t->n_dims, GGUF_MAX_DIMS);
    t->nelem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d >= t->n_dims) continue;
        uint64_t v;
        if (read_u64(c, &v, what)) return -1;
        if (v > (uint64_t)INT64_MAX)
            return dt_fail_format(c->err, "%s: tensor '%s' has a negative dimension %d (%lld)", c->f->path, t->name, d,
                                  (long long)(int64_t)v);
        t->ne[d] = (int64_t)v;
    }
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] == 0) t->nelem = 0;
        else if (t->nelem && t->nelem > (uint64_t)INT64_MAX / (uint64_t)t->ne[d])
            return dt_fail_format(c->err, "%s: tensor '%s' has more elements than an int64 counts (%lld x %lld x %lld x %lld)",
                                  c->f->path, t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                                  (long long)t->ne[3]);
        else if (t->nelem) t->nelem *= (uint64_t)t->ne[d];
    }
    if (read_u32(c, &t->type, what)) return -1;
    int64_t block;
    size_t bytes;
    ggml_type_size(t->type, &block, &bytes);
    if (!block)
        return dt_fail_format(c->err, "%s: tensor '%s' has type %u, which is no ggml type", c->f->path, t->name,
                              t->type);
    if (t->ne[0] % block != 0)
        return dt_fail_format(c->err, "%s: tensor '%s' (%s) has rows of %lld elements, not a whole number of its "
                                      "%lld-element blocks",
                              c->f->path, t->name, ggml_type_name(t->type), (long long)t->ne[0], (long long)block);
    const uint64_t blocks = t->nelem / (uint64_t)block;
    if (blocks > SIZE_MAX / bytes)
        return dt_fail_format(c->err, "%s: tensor '%s' would take more bytes than memory can address", c->f->path,
                              t->name);
    t->nbytes = (size_t)blocks * bytes;
    return read_u64(c, &t->offset, what);
}

static int cmp_kv_key(const void *a, const void *b) {
    return cmp_str(&(*(const gguf_kv *const *)a)->key, &(*(const gguf_kv *const *)b)->key);
}

static int check_unique_keys(const gguf_file *f, dt_error *err) {
    if (f->n_kv < 2) return 0;
    const gguf_kv **v = malloc((size_t)f->n_kv * sizeof *v);
    if (!v) return dt_fail_oom(err, "%s: out of memory", f->path);
    for (int64_t i = 0; i < f->n_kv; i++) v[i] = &f->kv[i];
    qsort(v, (size_t)f->n_kv, sizeof *v, cmp_kv_key);
    int rc = 0;
    for (int64_t i = 1; i < f->n_kv && rc == 0; i++)
        if (cmp_str(&v[i - 1]->key, &v[i]->key) == 0) {
            char key[80];
            printable(key, sizeof key, v[i]->key.p, v[i]->key.len);
            rc = dt_fail_format(err, "%s: key '%s' appears twice", f->path, key);
        }
    free(v);
    return rc;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Names unique; every tensor aligned, inside the file, and none overlapping another. */
static int check_tensors(gguf_file *f, dt_error *err) {
    const size_t data_size = f->size - f->data_offset;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0)
            return dt_fail_format(err, "%s: tensor '%s' starts at offset %llu of the data section, not a multiple of "
                                       "the alignment %zu",
                                  f->path, t->name, (unsigned long long)t->offset, f->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return dt_fail_format(err, "%s: tensor '%s' (%zu bytes at offset %llu of the data section) runs past the "
                                       "end of the file (a data section of %zu bytes)",
                                  f->path, t->name, t->nbytes, (unsigned long long)t->offset, data_size);
        t->data = f->map + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return 0;
    gguf_tensor **v = malloc((size_t)f->n_tensors * sizeof *v);
    if (!v) return dt_fail_oom(err, "%s: out of memory", f->path);
    for (int64_t i = 0; i < f->n_tensors; i++) v[i] = &f->tensors[i];
    int rc = 0;
    qsort(v, (size_t)f->n_tensors, sizeof *v, cmp_tensor_name);
    for (int64_t i = 1; i < f->n_tensors && rc == 0; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = dt_fail_format(err, "%s: tensor '%s' appears twice", f->path, v[i]->name);
    qsort(v, (size_t)f->n_tensors, sizeof *v, cmp_tensor_offset);
    const gguf_tensor *prev = NULL; /* the tensor ending last so far among those holding bytes */
    for (int64_t i = 0; i < f->n_tensors && rc == 0; i++) {
        if (v[i]->nbytes == 0) continue;
        if (prev && v[i]->offset < prev->offset + prev->nbytes)
            rc = dt_fail_format(err, "%s: tensors '%s' and '%s' overlap (bytes %llu..%llu and %llu..%llu of the data "
                                     "section)",
                                f->path, prev->name, v[i]->name, (unsigned long long)prev->offset,
                                (unsigned long long)(prev->offset + prev->nbytes), (unsigned long long)v[i]->offset,
                                (unsigned long long)(v[i]->offset + v[i]->nbytes));
        if (!prev || v[i]->offset + v[i]->nbytes > prev->offset + prev->nbytes) prev = v[i];
    }
    free(v);
    return rc;
}

static int parse(gguf_file *f, dt_error *err) {
    cursor c = {f, 0, err};
    if (f->size < 4 || memcmp(f->map, "GGUF", 4) != 0)
        return dt_fail_format(err, "%s: not a GGUF file (it does not begin with the magic \"GGUF\")", f->path);
    c.pos = 4;
    uint64_t n_tensors, n_kv;
    if (read_u32(&c, &f->version, "the version")) return -1;
    if (f->version == 1)
        return dt_fail_format(err, "%s: GGUF version 1 (32-bit counts, before llama.cpp's 2023 change) is not read: "
                                   "convert it with a current llama.cpp",
                              f->path);
    if (f->version != 2 && f->version != 3)
        return dt_fail_format(err, "%s: GGUF version %u is not read (versions 2 and 3 are)%s", f->path, f->version,
                              (f->version & 0xFFFF) == 0 ? "; a big-endian file?" : "");
    if (read_u64(&c, &n_tensors, "the tensor count") || read_u64(&c, &n_kv, "the key-value count")) return -1;
    /* the smallest key-value pair takes 14 bytes, the smallest tensor info 25 */
    if (n_kv > remain(&c) / 14)
        return dt_fail_format(err, "%s: the header claims %llu key-value pairs, more than the file's %zu bytes hold",
                              f->path, (unsigned long long)n_kv, f->size);
    if (n_tensors > remain(&c) / 25)
        return dt_fail_format(err, "%s: the header claims %llu tensors, more than the file's %zu bytes hold", f->path,
                              (unsigned long long)n_tensors, f->size);
    if (!(f->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *f->kv)))
        return dt_fail_oom(err, "%s: out of memory for %llu key-value pairs", f->path, (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        if (read_kv(&c, (int64_t)i, &f->kv[i])) return -1;
        f->n_kv = (int64_t)i + 1;
    }
    if (check_unique_keys(f, err)) return -1;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32)
            return dt_fail_format(err, "%s: general.alignment is a %s; it must be a u32", f->path,
                                  gguf_value_type_name(al->type));
        const uint32_t a = le32(al->data);
        if (a == 0 || (a & (a - 1)) != 0)
            return dt_fail_format(err, "%s: general.alignment %u is not a power of two", f->path, a);
        f->alignment = a;
    }
    if (!(f->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *f->tensors)))
        return dt_fail_oom(err, "%s: out of memory for %llu tensors", f->path, (unsigned long long)n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (read_tensor_info(&c, (int64_t)i, &f->tensors[i])) return -1;
        f->n_tensors = (int64_t)i + 1;
    }
    /* the data section starts at the next multiple of the alignment (a file without tensors may end here) */
    const uint64_t start = n_tensors ? pad_to(c.pos, f->alignment) : c.pos;
    if (start > f->size)
        return dt_fail_format(err, "%s: truncated: the data section would start at offset %llu of a %zu-byte file",
                              f->path, (unsigned long long)start, f->size);
    f->data_offset = (size_t)start;
    return check_tensors(f, err);
}

int gguf_has_magic(const char *path) {
    int fd = open_regular_fd(path, NULL, NULL);
    if (fd < 0) return 0;
    char magic[4];
    const ssize_t n = read(fd, magic, 4);
    close(fd);
    return n == 4 && memcmp(magic, "GGUF", 4) == 0;
}

int gguf_open(gguf_file *f, const char *path, dt_error *err) {
    memset(f, 0, sizeof *f);
    if (strlen(path) >= sizeof f->path) return dt_fail(err, "%.200s...: path too long", path);
    memcpy(f->path, path, strlen(path) + 1);
    struct stat sb;
    int fd = open_regular_fd(path, &sb, err);
    if (fd < 0) return -1;
    if (sb.st_size == 0) {
        close(fd);
        return dt_fail_format(err, "%s: empty file: not a GGUF file", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return dt_fail_io(err, "%s: cannot mmap: %s", path, strerror(e));
    f->map = map;
    f->size = (size_t)sb.st_size;
    if (parse(f, err) != 0) {
        gguf_close(f);
        return -1;
    }
    return 0;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->size);
    free(f->kv);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (str_eq(&f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

/* ---------------------------------------------------------------- typed metadata */

static int is_int_type(uint32_t t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

/* Element i of an integer value: signed types widened, u64 past INT64_MAX reported through *big. */
static int64_t int_at(uint32_t type, const uint8_t *p, uint64_t i, int *big) {
    *big = 0;
    switch (type) {
    case GGUF_TYPE_UINT8: return p[i];
    case GGUF_TYPE_INT8: return (int8_t)p[i];
    case GGUF_TYPE_UINT16: return le16(p + 2 * i);
    case GGUF_TYPE_INT16: return (int16_t)le16(p + 2 * i);
    case GGUF_TYPE_UINT32: return le32(p + 4 * i);
    case GGUF_TYPE_INT32: return (int32_t)le32(p + 4 * i);
    case GGUF_TYPE_UINT64: {
        const uint64_t v = le64(p + 8 * i);
        *big = v > (uint64_t)INT64_MAX;
        return *big ? INT64_MAX : (int64_t)v;
    }
    default: return (int64_t)le64(p + 8 * i); /* INT64 */
    }
}

int gguf_is_int_array(const gguf_kv *kv) { return kv->type == GGUF_TYPE_ARRAY && is_int_type(kv->elem); }

int64_t gguf_array_int(const gguf_kv *kv, uint64_t i) {
    int big;
    return int_at(kv->elem, kv->data, i, &big);
}

float gguf_array_f32(const gguf_kv *kv, uint64_t i) { return base_bits_float(le32(kv->data + 4 * i)); }

static const char *kind_of(const gguf_kv *kv, char *buf, size_t n) {
    if (kv->type == GGUF_TYPE_ARRAY) snprintf(buf, n, "an array of %llu %s", (unsigned long long)kv->n, gguf_value_type_name(kv->elem));
    else snprintf(buf, n, "a %s", gguf_value_type_name(kv->type));
    return buf;
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out, dt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    char kind[64];
    if (!is_int_type(kv->type))
        return dt_fail_format(err, "%s: %s is %s; an integer was expected", f->path, key, kind_of(kv, kind, sizeof kind));
    int big;
    const int64_t v = int_at(kv->type, kv->data, 0, &big);
    if (big || v < lo || v > hi)
        return dt_fail_format(err, "%s: %s = %s%lld is outside [%lld, %lld]", f->path, key, big ? "more than " : "",
                              (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int gguf_get_float(const gguf_file *f, const char *key, double *out, dt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    char kind[64];
    if (kv->type == GGUF_TYPE_FLOAT32) *out = base_bits_float(le32(kv->data));
    else if (kv->type == GGUF_TYPE_FLOAT64) {
        const uint64_t u = le64(kv->data);
        double d;
        memcpy(&d, &u, sizeof d);
        *out = d;
    } else
        return dt_fail_format(err, "%s: %s is %s; a number (f32) was expected", f->path, key,
                              kind_of(kv, kind, sizeof kind));
    if (!isfinite(*out)) return dt_fail_format(err, "%s: %s = %g is not finite", f->path, key, *out);
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, dt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    char kind[64];
    if (kv->type != GGUF_TYPE_BOOL)
        return dt_fail_format(err, "%s: %s is %s; a bool was expected", f->path, key, kind_of(kv, kind, sizeof kind));
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, dt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    char kind[64];
    if (kv->type != GGUF_TYPE_STRING)
        return dt_fail_format(err, "%s: %s is %s; a string was expected", f->path, key, kind_of(kv, kind, sizeof kind));
    out->len = (size_t)le64(kv->data);
    out->p = (const char *)kv->data + 8;
    return 0;
}

int gguf_get_str_array(const gguf_file *f, const gguf_kv *kv, gguf_str **out, dt_error *err) {
    char key[80], kind[64];
    printable(key, sizeof key, kv->key.p, kv->key.len);
    *out = NULL;
    if (kv->type != GGUF_TYPE_ARRAY || kv->elem != GGUF_TYPE_STRING)
        return dt_fail_format(err, "%s: %s is %s; an array of strings was expected", f->path, key,
                              kind_of(kv, kind, sizeof kind));
    gguf_str *v = malloc((size_t)(kv->n ? kv->n : 1) * sizeof *v);
    if (!v) return dt_fail_oom(err, "%s: out of memory for the %llu strings of %s", f->path, (unsigned long long)kv->n, key);
    const uint8_t *p = kv->data; /* every length was checked against the file in gguf_open */
    for (uint64_t i = 0; i < kv->n; i++) {
        v[i].len = (size_t)le64(p);
        v[i].p = (const char *)p + 8;
        p += 8 + v[i].len;
    }
    *out = v;
    return 0;
}

/* ---------------------------------------------------------------- writing */

static void put(gguf_writer *w, int ti, const void *p, size_t n) {
    uint8_t **buf = ti ? &w->ti : &w->kv;
    size_t *len = ti ? &w->ti_len : &w->kv_len, *cap = ti ? &w->ti_cap : &w->kv_cap;
    if (w->oom) return;
    if (n > SIZE_MAX - *len || grow_array(buf, cap, *len + n, 1, 4096) != 0) {
        w->oom = 1;
        return;
    }
    if (n) memcpy(*buf + *len, p, n);
    *len += n;
}

static void put_u32(gguf_writer *w, int ti, uint32_t v) {
    const uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(w, ti, b, 4);
}

static void put_u64(gguf_writer *w, int ti, uint64_t v) {
    put_u32(w, ti, (uint32_t)v);
    put_u32(w, ti, (uint32_t)(v >> 32));
}

static void put_str(gguf_writer *w, int ti, const char *s, size_t len) {
    put_u64(w, ti, len);
    put(w, ti, s, len);
}

static void put_key(gguf_writer *w, const char *key, uint32_t type) {
    put_str(w, 0, key, strlen(key));
    put_u32(w, 0, type);
    w->n_kv++;
}

void gguf_writer_init(gguf_writer *w, uint32_t alignment) {
    memset(w, 0, sizeof *w);
    w->alignment = alignment;
    gguf_w_u32(w, "general.alignment", alignment);
}

void gguf_writer_free(gguf_writer *w) {
    free(w->kv);
    free(w->ti);
    free(w->nbytes);
    memset(w, 0, sizeof *w);
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) {
    put_key(w, key, GGUF_TYPE_UINT32);
    put_u32(w, 0, v);
}

void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) {
    put_key(w, key, GGUF_TYPE_INT32);
    put_u32(w, 0, (uint32_t)v);
}

void gguf_w_f32(gguf_writer *w, const char *key, float v) {
    put_key(w, key, GGUF_TYPE_FLOAT32);
    put_u32(w, 0, base_float_bits(v));
}

void gguf_w_f64(gguf_writer *w, const char *key, double v) {
    put_key(w, key, GGUF_TYPE_FLOAT64);
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_u64(w, 0, u);
}

void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    put_key(w, key, GGUF_TYPE_BOOL);
    const uint8_t b = v ? 1 : 0;
    put(w, 0, &b, 1);
}

void gguf_w_str(gguf_writer *w, const char *key, const char *s, size_t len) {
    put_key(w, key, GGUF_TYPE_STRING);
    put_str(w, 0, s, len);
}

void gguf_w_str_array(gguf_writer *w, const char *key, uint64_t n, const char *(*get)(void *ctx, uint64_t i, size_t *len),
                      void *ctx) {
    put_key(w, key, GGUF_TYPE_ARRAY);
    put_u32(w, 0, GGUF_TYPE_STRING);
    put_u64(w, 0, n);
    for (uint64_t i = 0; i < n && !w->oom; i++) {
        size_t len = 0;
        const char *s = get(ctx, i, &len);
        put_str(w, 0, s, len);
    }
}

void gguf_w_i32_array(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    put_key(w, key, GGUF_TYPE_ARRAY);
    put_u32(w, 0, GGUF_TYPE_INT32);
    put_u64(w, 0, n);
    for (uint64_t i = 0; i < n && !w->oom; i++) put_u32(w, 0, (uint32_t)v[i]);
}

void gguf_w_f32_array(gguf_writer *w, const char *key, const float *v, uint64_t n) {
    put_key(w, key, GGUF_TYPE_ARRAY);
    put_u32(w, 0, GGUF_TYPE_FLOAT32);
    put_u64(w, 0, n);
    for (uint64_t i = 0; i < n && !w->oom; i++) put_u32(w, 0, base_float_bits(v[i]));
}

void gguf_w_kv_copy(gguf_writer *w, const gguf_kv *kv) {
    put_str(w, 0, kv->key.p, kv->key.len);
    put_u32(w, 0, kv->type);
    if (kv->type == GGUF_TYPE_ARRAY) {
        put_u32(w, 0, kv->elem);
        put_u64(w, 0, kv->n);
    }
    put(w, 0, kv->data, kv->size);
    w->n_kv++;
}

int gguf_w_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne, uint32_t type) {
    int64_t block;
    size_t bytes;
    ggml_type_size(type, &block, &bytes);
    if (!block || n_dims < 1 || n_dims > GGUF_MAX_DIMS || ne[0] % block != 0 || strlen(name) >= GGUF_MAX_NAME) return -1;
    uint64_t nelem = 1;
    for (int d = 0; d < n_dims; d++) nelem *= (uint64_t)ne[d];
    if (grow_array(&w->nbytes, &w->nbytes_cap, (size_t)w->n_tensors + 1, sizeof *w->nbytes, 64) != 0) {
        w->oom = 1;
        return 0;
    }
    const size_t nbytes = (size_t)(nelem / (uint64_t)block) * bytes;
    w->nbytes[w->n_tensors++] = nbytes;
    put_str(w, 1, name, strlen(name));
    put_u32(w, 1, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) put_u64(w, 1, (uint64_t)ne[d]);
    put_u32(w, 1, type);
    put_u64(w, 1, w->data_size);
    w->data_size += pad_to(nbytes, w->alignment);
    return 0;
}

int gguf_sink_write(gguf_sink *s, const void *p, size_t n) {
    if (s->failed) return -1;
    if (n && fwrite(p, 1, n, s->fp) != n) {
        s->failed = errno ? errno : EIO;
        return -1;
    }
    s->written += n;
    return 0;
}

static int pad_sink(gguf_sink *s, uint64_t alignment) {
    static const uint8_t zeros[64];
    uint64_t k = (alignment - s->written % alignment) % alignment;
    while (k > 0) {
        const size_t step = k < sizeof zeros ? (size_t)k : sizeof zeros;
        if (gguf_sink_write(s, zeros, step)) return -1;
        k -= step;
    }
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, int (*emit)(void *ctx, uint64_t i, gguf_sink *s, dt_error *err),
                      void *ctx, dt_error *err) {
    if (w->oom) return dt_fail_oom(err, "%s: out of memory building the GGUF metadata", path);
    dt_atomic_file af;
    if (dt_atomic_open(&af, path, err) != 0) return -1;
    gguf_sink s = {af.fp, 0, 0};
    uint8_t head[24];
    memcpy(head, "GGUF", 4);
    const uint64_t fields[2] = {w->n_tensors, w->n_kv};
    head[4] = 3, head[5] = head[6] = head[7] = 0;
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 8; b++) head[8 + 8 * k + b] = (uint8_t)(fields[k] >> (8 * b));
    gguf_sink_write(&s, head, sizeof head);
    gguf_sink_write(&s, w->kv, w->kv_len);
    gguf_sink_write(&s, w->ti, w->ti_len);
    pad_sink(&s, w->alignment);
    const uint64_t data_start = s.written;
    int rc = s.failed ? -1 : 0;
    for (uint64_t i = 0; i < w->n_tensors && rc == 0 && !s.failed; i++) {
        const uint64_t before = s.written;
        rc = emit(ctx, i, &s, err);
        if (rc == 0 && !s.failed && s.written - before != w->nbytes[i])
            rc = dt_fail(err, "%s: tensor %llu: %llu bytes written where its shape takes %zu", path,
                         (unsigned long long)i, (unsigned long long)(s.written - before), w->nbytes[i]);
        if (rc == 0) pad_sink(&s, w->alignment);
    }
    if (rc == 0 && !s.failed && s.written - data_start != w->data_size)
        rc = dt_fail(err, "%s: the data section has %llu bytes where the tensor infos say %llu", path,
                     (unsigned long long)(s.written - data_start), (unsigned long long)w->data_size);
    if (rc == 0 && s.failed) rc = dt_fail_io(err, "%s: write failed: %s", path, strerror(s.failed));
    if (rc != 0) {
        dt_atomic_abort(&af);
        return -1;
    }
    return dt_atomic_commit(&af, err);
}
