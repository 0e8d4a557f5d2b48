/* safetensors.c — read (mmap'd, fully validated) and write (atomic) .safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header, then the data section.
 * The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
 * relative to the data section; "__metadata__" is a free-form string map.
 *
 * The reader treats the file as hostile: every number that later becomes a pointer offset or a
 * loop bound is checked here, once, so that dt_st_read_f32 can trust the tensor table and never
 * touches a byte outside the mapping. It accepts what the format's reference (the Rust
 * `safetensors` crate, which transformers reads through) accepts: a UTF-8 header of strict JSON,
 * tensors whose bytes cover the data section exactly once in any order (no overlap, no hole, no
 * trailing bytes; a zero-size tensor takes no bytes), a __metadata__ of strings; and, as
 * transformers' load_state_dict insists, a __metadata__ "format" of pt, tf, flax or mlx. Only a
 * regular file is opened, so that a FIFO or a device named as a checkpoint fails instead of
 * blocking.
 *
 * The writer lays a file out as the reference's serialize does: tensors sorted by dtype
 * (the reference's dtype order, widest first) and then by name, the header padded with spaces
 * so that the data section starts at a multiple of 8.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "internal.h"
#include "base/base.h"

/* Same limit as the reference Rust implementation: a header this big is an attack, not a model. */
#define ST_MAX_HEADER 100000000ull
/* 2^64 as a double: the first value that no longer fits in a uint64_t. */
#define ST_TWO_POW_64 18446744073709551616.0

/* ---------------------------------------------------------------- little-endian helpers */

/* Byte-wise loads/stores: correct on any host and at any alignment; compilers turn them into
 * single (unaligned) moves on x86 and ARM. */
static uint16_t load_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t load_le64(const uint8_t *p) { return (uint64_t)load_le32(p) | ((uint64_t)load_le32(p + 4) << 32); }

static void store_le16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void store_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void store_le64(uint8_t *p, uint64_t v) {
    store_le32(p, (uint32_t)v);
    store_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---------------------------------------------------------------- dtypes */

static size_t dtype_size(dt_dtype d) {
    switch (d) {
    case DT_F32: return 4;
    case DT_F16:
    case DT_BF16: return 2;
    case DT_I8:
    case DT_U8: return 1;
    }
    return 4;
}

static const char *dtype_name(dt_dtype d) {
    switch (d) {
    case DT_F32: return "F32";
    case DT_F16: return "F16";
    case DT_BF16: return "BF16";
    case DT_I8: return "I8";
    case DT_U8: return "U8";
    }
    return "?";
}

static int dtype_parse(const char *s, dt_dtype *out) {
    if (strcmp(s, "F32") == 0) *out = DT_F32;
    else if (strcmp(s, "F16") == 0) *out = DT_F16;
    else if (strcmp(s, "BF16") == 0) *out = DT_BF16;
    else if (strcmp(s, "I8") == 0) *out = DT_I8; /* quantised checkpoints (src/quant/) */
    else if (strcmp(s, "U8") == 0) *out = DT_U8;
    else return -1;
    return 0;
}

/* ---------------------------------------------------------------- UTF-8 */

/* Length of the longest valid UTF-8 prefix of p[0..n): n when all of it is valid. Valid as Rust's
 * str::from_utf8 (which the reference reads headers with) defines it: shortest forms only, no
 * surrogates, nothing past U+10FFFF. */
static size_t utf8_valid_prefix(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c < 0x80) len = 1;
        else if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;      /* no overlong forms */
            else if (c == 0xED) hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
        } else return i;
        if (len > n - i) return i;
        if (len > 1 && (p[i + 1] < lo || p[i + 1] > hi)) return i;
        for (size_t k = 2; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return n;
}

/* ---------------------------------------------------------------- duplicate names */

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sort a copy of the name pointers and compare neighbours: O(n log n), so a header with a
 * million entries cannot turn the duplicate check quadratic. Returns the duplicated name, NULL
 * when all differ; sets *oom on allocation failure. */
static const char *find_duplicate(const char **names, int n, int *oom) {
    *oom = 0;
    if (n < 2) return NULL;
    const char **sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        *oom = 1;
        return NULL;
    }
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_name_ptr);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

/* ---------------------------------------------------------------- reader: tensor entries */

/* A JSON number that is a non-negative integer. Values past 2^64 saturate to UINT64_MAX so that
 * the caller's bounds checks report them as out of range rather than as "not an integer". */
static int json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return -1;
    double v = item->valuedouble;
    if (isnan(v) || v < 0 || v != floor(v)) return -1;
    *out = v >= ST_TWO_POW_64 ? UINT64_MAX : (uint64_t)v;
    return 0;
}

static int parse_shape(const char *path, const char *name, const cJSON *shape, dt_st_tensor *t, dt_error *err) {
    if (!cJSON_IsArray(shape))
        return dt_fail_format(err, "%s: tensor %s: shape is missing or not an array", path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > DT_MAX_DIMS)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: tensor %s: shape has %d dimensions (at most %d supported)",
                            path, name, ndim, DT_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    int overflow = 0, i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;
        if (json_uint(d, &v) != 0)
            return dt_fail_format(err, "%s: tensor %s: shape[%d] is not a non-negative integer", path, name, i);
        if (v > (uint64_t)INT64_MAX) overflow = 1;
        else t->shape[i] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel)) overflow = 1;
        i++;
    }
    if (overflow || numel > SIZE_MAX / dtype_size(t->dtype))
        return dt_fail_format(err, "%s: tensor %s: shape overflows (element count too large)", path, name);
    t->numel = (size_t)numel;
    return 0;
}

static int parse_offsets(const char *path, const char *name, const cJSON *offs, size_t data_size, dt_st_tensor *t,
                         dt_error *err) {
    uint64_t b, e;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(cJSON_GetArrayItem(offs, 0), &b) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), &e) != 0)
        return dt_fail_format(err, "%s: tensor %s: data_offsets must be [begin, end] of non-negative integers", path,
                              name);
    if (b > e)
        return dt_fail_format(err, "%s: tensor %s: data_offsets [%llu, %llu] has begin after end", path, name,
                              (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return dt_fail_format(err,
                              "%s: tensor %s: data_offsets [%llu, %llu] out of bounds: data section is %zu bytes "
                              "(truncated file?)",
                              path, name, (unsigned long long)b, (unsigned long long)e, data_size);
    size_t want = t->numel * dtype_size(t->dtype); /* cannot overflow: parse_shape bounded numel */
    if (e - b != want)
        return dt_fail_format(
            err, "%s: tensor %s: data_offsets [%llu, %llu] span %llu bytes but shape and dtype need %zu", path, name,
            (unsigned long long)b, (unsigned long long)e, (unsigned long long)(e - b), want);
    t->begin = (size_t)b;
    t->end = (size_t)e;
    return 0;
}

static int parse_tensor(const char *path, const cJSON *item, size_t data_size, dt_st_tensor *t, dt_error *err) {
    const char *name = item->string;
    if (strlen(name) >= sizeof t->name)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: tensor name too long (%zu bytes, limit %zu): %.64s...", path,
                            strlen(name), sizeof t->name - 1, name);
    memcpy(t->name, name, strlen(name) + 1);
    if (!cJSON_IsObject(item)) return dt_fail_format(err, "%s: tensor %s: entry is not a JSON object", path, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dtype))
        return dt_fail_format(err, "%s: tensor %s: dtype is missing or not a string", path, name);
    if (dtype_parse(dtype->valuestring, &t->dtype) != 0) {
        /* the format's other dtypes are valid files this library does not read; any other string
         * is not safetensors at all */
        static const char *const format_dtypes[] = {"BOOL", "I16", "U16", "I32", "U32", "I64", "U64", "F64",
                                                    "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};
        for (size_t i = 0; i < sizeof format_dtypes / sizeof format_dtypes[0]; i++)
            if (strcmp(dtype->valuestring, format_dtypes[i]) == 0)
                return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                    "%s: tensor %s: dtype %s is not supported here (F32, F16, BF16, I8, U8)", path,
                                    name, dtype->valuestring);
        return dt_fail_format(err, "%s: tensor %s: '%.32s' is not a safetensors dtype", path, name,
                              dtype->valuestring);
    }
    if (parse_shape(path, name, cJSON_GetObjectItemCaseSensitive(item, "shape"), t, err) != 0) return -1;
    return parse_offsets(path, name, cJSON_GetObjectItemCaseSensitive(item, "data_offsets"), data_size, t, err);
}

/* ---------------------------------------------------------------- reader: header */

/* cJSON accepts a value followed by anything; we accept only the space padding writers add. */
static int only_whitespace(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return 0;
    return 1;
}

/* What strict JSON (serde_json, the reference's parser) refuses and cJSON lets through: a control
 * character inside a string, or one outside a string that is not JSON whitespace (cJSON skips
 * every byte up to 0x20 as if it were). Also catches a NUL, which would end cJSON's input early. */
static int check_header_bytes(const dt_safetensors *st, const uint8_t *h, size_t n, dt_error *err) {
    size_t valid = utf8_valid_prefix(h, n);
    if (valid < n) return dt_fail_format(err, "%s: header is not valid UTF-8 (byte %zu of %zu)", st->path, valid, n);
    int in_string = 0, escaped = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = h[i];
        if (c < 0x20 && (in_string || (c != '\t' && c != '\n' && c != '\r')))
            return dt_fail_format(err,
                                  "%s: header byte %zu is the control character 0x%02x, which JSON allows only escaped",
                                  st->path, i, c);
        if (!in_string) in_string = c == '"';
        else if (escaped) escaped = 0;
        else if (c == '\\') escaped = 1;
        else if (c == '"') in_string = 0;
    }
    return 0;
}

/* Parse N header bytes into a cJSON tree. The bytes are copied and NUL-terminated first so that
 * the parser can never look past them, whatever the file contains. */
static cJSON *parse_header_json(const dt_safetensors *st, size_t n, dt_error *err) {
    if (check_header_bytes(st, st->map + 8, n, err) != 0) return NULL;
    char *text = malloc(n + 1);
    if (!text) {
        dt_fail_oom(err, "%s: out of memory for a %zu-byte header", st->path, n);
        return NULL;
    }
    memcpy(text, st->map + 8, n);
    text[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    const int oom = !root && json_text_valid(text, n);
    if (root && !only_whitespace(end, text + n)) {
        cJSON_Delete(root);
        root = NULL;
    }
    if (oom) dt_fail_oom(err, "%s: out of memory parsing the %zu-byte header", st->path, n);
    else if (!root)
        dt_fail_format(err, "%s: header is not JSON (error near byte %ld of %zu)", st->path,
                       end ? (long)(end - text) : -1L, n);
    free(text);
    return root;
}

/* The "format" values transformers' load_state_dict accepts in a file's __metadata__. */
static const char *const ST_FORMATS[] = {"pt", "tf", "flax", "mlx"};

/* __metadata__: a map of strings (null counts as absent, as for the reference's Option), which,
 * when present, must say a format transformers loads: load_state_dict refuses a __metadata__
 * without "format", or with another one, rather than guess what the tensors mean. A key given twice
 * counts with its last value, as in the reference's map. */
static int check_metadata(const dt_safetensors *st, const cJSON *meta, dt_error *err) {
    if (cJSON_IsNull(meta)) return 0;
    if (!cJSON_IsObject(meta)) return dt_fail_format(err, "%s: __metadata__ is not a JSON object", st->path);
    const char *format = NULL;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta) {
        if (!cJSON_IsString(kv))
            return dt_fail_format(err, "%s: __metadata__ value of \"%s\" is not a string", st->path, kv->string);
        if (strcmp(kv->string, "format") == 0) format = kv->valuestring;
    }
    if (!format)
        return dt_fail_format(err, "%s: __metadata__ has no \"format\" (transformers loads only pt, tf, flax or mlx)",
                              st->path);
    for (size_t i = 0; i < sizeof ST_FORMATS / sizeof ST_FORMATS[0]; i++)
        if (strcmp(format, ST_FORMATS[i]) == 0) return 0;
    return dt_fail_format(err, "%s: __metadata__ format \"%s\" is not one transformers loads (pt, tf, flax or mlx)",
                          st->path, format);
}

static int count_tensors(const dt_safetensors *st, const cJSON *root, int *n, dt_error *err) {
    int count = 0, metas = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            /* the reference's header struct refuses a duplicate field */
            if (++metas > 1) return dt_fail_format(err, "%s: __metadata__ appears twice in the header", st->path);
            if (check_metadata(st, item, err) != 0) return -1;
            continue;
        }
        count++;
    }
    *n = count;
    return 0;
}

static int check_duplicates(const dt_safetensors *st, dt_error *err) {
    const char **names = malloc((size_t)(st->n > 0 ? st->n : 1) * sizeof *names);
    if (!names) return dt_fail_oom(err, "%s: out of memory", st->path);
    for (int i = 0; i < st->n; i++) names[i] = st->tensors[i].name;
    int oom;
    const char *dup = find_duplicate(names, st->n, &oom);
    int rc = 0;
    if (oom) rc = dt_fail_oom(err, "%s: out of memory", st->path);
    else if (dup) rc = dt_fail_format(err, "%s: duplicate tensor name %s", st->path, dup);
    free(names);
    return rc;
}

/* Tensor indices ordered by data_offsets (then by header position, so that the order and thus
 * the message about a bad file do not depend on qsort). */
struct offset_key {
    size_t begin, end;
    int index;
};

static int cmp_by_offset(const void *a, const void *b) {
    const struct offset_key *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The tensors must tile the data section: taken in order of their offsets, each begins where the
 * previous one ended, and the last ends at the end of the file. That refuses two tensors sharing
 * bytes (one would silently alias the other), bytes no tensor owns, and data after the last
 * tensor, exactly as the reference's validate and its MetadataIncompleteBuffer check do. */
static int check_coverage(const dt_safetensors *st, dt_error *err) {
    struct offset_key *k = malloc((size_t)(st->n > 0 ? st->n : 1) * sizeof *k);
    if (!k) return dt_fail_oom(err, "%s: out of memory", st->path);
    for (int i = 0; i < st->n; i++) k[i] = (struct offset_key){st->tensors[i].begin, st->tensors[i].end, i};
    qsort(k, (size_t)st->n, sizeof *k, cmp_by_offset);
    size_t at = 0;
    int rc = 0, last = -1; /* last: the tensor that ends at `at` and has bytes, -1 before any */
    for (int i = 0; i < st->n && rc == 0; i++) {
        const dt_st_tensor *t = &st->tensors[k[i].index];
        if (t->begin < at) {
            const dt_st_tensor *p = &st->tensors[last];
            rc = dt_fail_format(err, "%s: tensors %s [%zu, %zu] and %s [%zu, %zu] overlap in the data section",
                                st->path, p->name, p->begin, p->end, t->name, t->begin, t->end);
        } else if (t->begin > at) {
            if (last < 0)
                rc = dt_fail_format(err,
                                    "%s: data section bytes [%zu, %zu) belong to no tensor (a hole before tensor %s, "
                                    "the first)",
                                    st->path, at, t->begin, t->name);
            else
                rc = dt_fail_format(err,
                                    "%s: data section bytes [%zu, %zu) belong to no tensor (a hole between tensors %s "
                                    "and %s)",
                                    st->path, at, t->begin, st->tensors[last].name, t->name);
        } else if (t->end > t->begin) {
            at = t->end;
            last = k[i].index;
        }
    }
    if (rc == 0 && at != st->data_size) {
        if (last < 0)
            rc = dt_fail_format(err, "%s: %zu trailing bytes after the header, which lists no tensor data", st->path,
                                st->data_size - at);
        else
            rc = dt_fail_format(
                err, "%s: %zu trailing bytes after the last tensor's data (tensor %s ends at byte %zu of %zu)",
                st->path, st->data_size - at, st->tensors[last].name, at, st->data_size);
    }
    free(k);
    return rc;
}

static int parse_tensors(dt_safetensors *st, const cJSON *root, dt_error *err) {
    int n = 0;
    if (count_tensors(st, root, &n, err) != 0) return -1;
    st->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *st->tensors);
    if (!st->tensors) return dt_fail_oom(err, "%s: out of memory for %d tensor entries", st->path, n);
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        if (parse_tensor(st->path, item, st->data_size, &st->tensors[i], err) != 0) return -1;
        i++;
    }
    st->n = n;
    if (check_duplicates(st, err) != 0) return -1;
    return check_coverage(st, err);
}

static int parse_header(dt_safetensors *st, dt_error *err) {
    uint64_t n = load_le64(st->map);
    if (n > ST_MAX_HEADER)
        return dt_fail_format(err, "%s: header length %llu is absurdly large (limit %llu)", st->path,
                              (unsigned long long)n, ST_MAX_HEADER);
    if (n > st->size - 8)
        return dt_fail_format(err, "%s: header length %llu past end of file (size %zu)", st->path,
                              (unsigned long long)n, st->size);
    st->data = st->map + 8 + n;
    st->data_size = st->size - 8 - (size_t)n;
    cJSON *root = parse_header_json(st, (size_t)n, err);
    if (!root) return -1;
    int rc = cJSON_IsObject(root) ? parse_tensors(st, root, err)
                                  : dt_fail_format(err, "%s: header is JSON but not an object", st->path);
    cJSON_Delete(root);
    return rc;
}

/* ---------------------------------------------------------------- reader: file */

/* What a path that is not a regular file is, for the message. */
static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

int st_check_regular(const char *path, dt_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0) return dt_fail_io(err, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return dt_fail_io(err, "%s: not a regular file (%s)", path, file_kind(sb.st_mode));
    return 0;
}

/* Opening a FIFO for reading blocks until a writer comes, and opening a device can do anything,
 * so the path is checked first; O_NONBLOCK and the check of the opened descriptor cover a file
 * swapped in between (O_NONBLOCK changes nothing for a regular file). */
static int map_file(dt_safetensors *st, dt_error *err) {
    if (st_check_regular(st->path, err) != 0) return -1;
    int fd = open(st->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return dt_fail_io(err, "%s: cannot open: %s", st->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return dt_fail_io(err, "%s: cannot stat: %s", st->path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return dt_fail_io(err, "%s: not a regular file (%s)", st->path, file_kind(sb.st_mode));
    }
    if (sb.st_size < 8) {
        close(fd);
        return dt_fail_format(err, "%s: truncated: %lld bytes, too short for the 8-byte header length", st->path,
                              (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return dt_fail_io(err, "%s: cannot mmap: %s", st->path, strerror(e));
    st->map = map;
    st->size = (size_t)sb.st_size;
    return 0;
}

int dt_st_open(dt_safetensors *st, const char *path, dt_error *err) {
    memset(st, 0, sizeof *st);
    if (strlen(path) >= sizeof st->path) return dt_fail(err, "%.200s...: path too long", path);
    memcpy(st->path, path, strlen(path) + 1);
    if (map_file(st, err) != 0) return -1;
    if (parse_header(st, err) != 0) {
        dt_st_close(st);
        return -1;
    }
    return 0;
}

void dt_st_close(dt_safetensors *st) {
    if (!st) return;
    if (st->map) munmap((void *)st->map, st->size);
    free(st->tensors);
    memset(st, 0, sizeof *st);
}

const dt_st_tensor *dt_st_find(const dt_safetensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

void dt_st_read_f32(const dt_safetensors *st, const dt_st_tensor *t, float *out) {
    /* t->begin / t->end were validated against data_size in dt_st_open. */
    const uint8_t *p = st->data + t->begin;
    switch (t->dtype) {
    case DT_F32:
        for (size_t i = 0; i < t->numel; i++) out[i] = base_bits_float(load_le32(p + 4 * i));
        break;
    case DT_F16:
        for (size_t i = 0; i < t->numel; i++) out[i] = half_to_float(load_le16(p + 2 * i));
        break;
    case DT_BF16:
        for (size_t i = 0; i < t->numel; i++) out[i] = bf16_to_float(load_le16(p + 2 * i));
        break;
    case DT_I8:
        for (size_t i = 0; i < t->numel; i++) out[i] = (float)(int8_t)p[i];
        break;
    case DT_U8:
        for (size_t i = 0; i < t->numel; i++) out[i] = (float)p[i];
        break;
    }
}

const void *dt_st_data(const dt_safetensors *st, const dt_st_tensor *t) { return st->data + t->begin; }

/* ---------------------------------------------------------------- writer */

size_t dt_st_entry_bytes(const dt_st_entry *e) {
    size_t n = dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++) n *= (size_t)e->shape[d];
    return n;
}

/* Validate one entry; *nbytes gets its data size. */
static int check_entry(const char *path, const dt_st_entry *e, int i, size_t *nbytes, dt_error *err) {
    if (!e->name) return dt_fail(err, "%s: entry %d has no name", path, i);
    const char *name = e->name;
    if (strlen(name) >= sizeof ((dt_st_tensor *)0)->name)
        return dt_fail(err, "%s: tensor name too long (%zu bytes): %.64s...", path, strlen(name), name);
    if (strcmp(name, "__metadata__") == 0) return dt_fail(err, "%s: __metadata__ is not a tensor name", path);
    if (utf8_valid_prefix((const uint8_t *)name, strlen(name)) != strlen(name))
        return dt_fail(err, "%s: tensor name is not valid UTF-8 (a header must be): %.64s", path, name);
    if (!e->raw && e->dtype != DT_F32 && e->dtype != DT_F16 && e->dtype != DT_BF16)
        return dt_fail(err, "%s: tensor %s: dtype %s cannot be written from floats", path, name, dtype_name(e->dtype));
    if (e->ndim < 0 || e->ndim > DT_MAX_DIMS)
        return dt_fail(err, "%s: tensor %s: ndim %d not in 0..%d", path, name, e->ndim, DT_MAX_DIMS);
    size_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0) return dt_fail(err, "%s: tensor %s: negative shape[%d]", path, name, d);
        if (__builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel))
            return dt_fail(err, "%s: tensor %s: shape overflows", path, name);
    }
    if (e->raw && e->dtype != DT_I8 && e->dtype != DT_U8)
        return dt_fail(err, "%s: tensor %s: raw data must be I8 or U8", path, name);
    if (__builtin_mul_overflow(numel, dtype_size(e->dtype), nbytes))
        return dt_fail(err, "%s: tensor %s: shape overflows", path, name);
    if (numel > 0 && !e->data && !e->raw) return dt_fail(err, "%s: tensor %s: data is NULL", path, name);
    return 0;
}

int st_check_entries(const char *path, const dt_st_entry *entries, int n, dt_error *err) {
    if (n < 0 || (n > 0 && !entries)) return dt_fail(err, "%s: invalid tensor list (n = %d)", path, n);
    for (int i = 0; i < n; i++) {
        size_t nbytes;
        if (check_entry(path, &entries[i], i, &nbytes, err) != 0) return -1;
    }
    const char **names = malloc((size_t)(n > 0 ? n : 1) * sizeof *names);
    if (!names) return dt_fail_oom(err, "%s: out of memory", path);
    for (int i = 0; i < n; i++) names[i] = entries[i].name;
    int oom;
    const char *dup = find_duplicate(names, n, &oom);
    int rc = 0;
    if (oom) rc = dt_fail_oom(err, "%s: out of memory", path);
    else if (dup) rc = dt_fail(err, "%s: duplicate tensor name %s", path, dup);
    free(names);
    return rc;
}

/* Append an integer as raw JSON text: cJSON would print large doubles with an exponent
 * ("1e+15"), which strict readers (serde's usize) reject. Returns 0 on success. */
static int add_raw_uint(cJSON *array, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    cJSON *item = cJSON_CreateRaw(buf);
    if (!item) return -1;
    if (!cJSON_AddItemToArray(array, item)) {
        cJSON_Delete(item);
        return -1;
    }
    return 0;
}


/* {"dtype":"F32","shape":[...],"data_offsets":[b,e]} added under `e->name`. */
static int add_tensor_json(cJSON *root, const dt_st_entry *e, uint64_t begin, uint64_t end) {
    cJSON *obj = cJSON_AddObjectToObject(root, e->name);
    if (!obj || !cJSON_AddStringToObject(obj, "dtype", dtype_name(e->dtype))) return -1;
    cJSON *shape = cJSON_AddArrayToObject(obj, "shape");
    if (!shape) return -1;
    for (int d = 0; d < e->ndim; d++)
        if (add_raw_uint(shape, (uint64_t)e->shape[d]) != 0) return -1;
    cJSON *offs = cJSON_AddArrayToObject(obj, "data_offsets");
    if (!offs || add_raw_uint(offs, begin) != 0 || add_raw_uint(offs, end) != 0) return -1;
    return 0;
}

/* The reference's Dtype enum order for our dtypes (U8 < I8 < F16 < BF16 < F32); its serialize
 * puts the larger first, so that every tensor's data stays aligned to its element size. */
static int dtype_order(dt_dtype d) {
    switch (d) {
    case DT_U8: return 0;
    case DT_I8: return 1;
    case DT_F16: return 2;
    case DT_BF16: return 3;
    case DT_F32: return 4;
    }
    return 4;
}

static int cmp_serialize_order(const void *a, const void *b) {
    const dt_st_entry *x = *(const dt_st_entry *const *)a, *y = *(const dt_st_entry *const *)b;
    int dx = dtype_order(x->dtype), dy = dtype_order(y->dtype);
    if (dx != dy) return dy - dx;
    return strcmp(x->name, y->name); /* byte order, as Rust orders String */
}

/* The header text (unpadded), or NULL on allocation failure; free with cJSON_free. */
static char *build_header(const dt_st_entry *const *entries, int n) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    int ok = meta && cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int i = 0; i < n && ok; i++) {
        uint64_t nbytes = dt_st_entry_bytes(entries[i]); /* checked already */
        ok = add_tensor_json(root, entries[i], off, off + nbytes) == 0;
        off += nbytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* Data as little-endian F32 / F16 / BF16, converted through a small buffer so the file layout does
 * not depend on the host's byte order. */
static int write_le(FILE *fp, const float *x, size_t n, dt_dtype dtype) {
    uint8_t buf[4096 * 4];
    const size_t width = dtype_size(dtype);
    while (n > 0) {
        size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < k; i++) {
            if (dtype == DT_F16) store_le16(buf + 2 * i, float_to_half(x[i]));
            else if (dtype == DT_BF16) store_le16(buf + 2 * i, float_to_bf16(x[i]));
            else store_le32(buf + 4 * i, base_float_bits(x[i]));
        }
        if (fwrite(buf, width, k, fp) != k) return -1;
        x += k;
        n -= k;
    }
    return 0;
}

static int write_body(FILE *fp, const char *header, const dt_st_entry *const *entries, int n) {
    size_t len = strlen(header);
    size_t pad = (8 - len % 8) % 8; /* so that 8 + N is a multiple of 8 and the data is aligned */
    uint8_t lenbuf[8];
    store_le64(lenbuf, (uint64_t)(len + pad));
    if (fwrite(lenbuf, 1, 8, fp) != 8 || fwrite(header, 1, len, fp) != len) return -1;
    for (size_t i = 0; i < pad; i++)
        if (fputc(' ', fp) == EOF) return -1;
    for (int i = 0; i < n; i++) {
        const dt_st_entry *e = entries[i];
        size_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= (size_t)e->shape[d];
        if (e->raw) {
            if (fwrite(e->raw, 1, numel, fp) != numel) return -1; /* bytes: no byte order */
        } else if (write_le(fp, e->data, numel, e->dtype) != 0) return -1;
    }
    return 0;
}

int st_write_stream(FILE *fp, const char *path, const dt_st_entry *entries, int n, dt_error *err) {
    if (st_check_entries(path, entries, n, err) != 0) return -1;
    const dt_st_entry **order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    if (!order) return dt_fail_oom(err, "%s: out of memory", path);
    for (int i = 0; i < n; i++) order[i] = &entries[i];
    qsort(order, (size_t)n, sizeof *order, cmp_serialize_order); /* names are distinct: a total order */
    char *header = build_header(order, n);
    if (!header) {
        free(order);
        return dt_fail_oom(err, "%s: out of memory building the header", path);
    }
    if (strlen(header) + 8 > ST_MAX_HEADER) {
        size_t len = strlen(header);
        cJSON_free(header);
        free(order);
        return dt_fail(err, "%s: header would be absurdly large (%zu bytes)", path, len);
    }
    int rc = write_body(fp, header, order, n);
    int saved = errno;
    cJSON_free(header);
    free(order);
    if (rc != 0) return dt_fail_io(err, "%s: write failed: %s", path, strerror(saved));
    return 0;
}

int dt_st_write(const char *path, const dt_st_entry *entries, int n, dt_error *err) {
    if (st_check_entries(path, entries, n, err) != 0) return -1;
    dt_atomic_file f;
    if (dt_atomic_open(&f, path, err) != 0) return -1;
    if (st_write_stream(f.fp, path, entries, n, err) != 0) {
        dt_atomic_abort(&f);
        return -1;
    }
    return dt_atomic_commit(&f, err);
}

int dt_st_write_f32(const char *path, const dt_st_entry *entries, int n, dt_error *err) {
    for (int i = 0; entries && i < n; i++)
        if (!entries[i].raw && entries[i].dtype != DT_F32)
            return dt_fail(err, "%s: tensor %s is not F32", path, entries[i].name);
    return dt_st_write(path, entries, n, err);
}
