/* io/gguf.h — GGUF files (llama.cpp's format, versions 2 and 3; README "GGUF"): a read-only,
 * validated view of a file, and a writer. Nothing here knows a model: the container only (its
 * key-value metadata, its tensor table, the data section). src/model/gguf_model.c maps a llama
 * model onto it.
 *
 * The layout, all little-endian: "GGUF", u32 version, u64 tensor count, u64 key-value count; the
 * key-value pairs (a string key, an i32 value type, the value; an array is the element type, a
 * u64 count and the elements; a string is a u64 length and its bytes, no NUL); the tensor infos
 * (a string name, u32 n_dims, n_dims × i64 ne with ne[0] the fastest-varying dimension, i32 ggml
 * type, u64 offset into the data section); padding to general.alignment (32 unless the file says
 * otherwise); the data section, each tensor at an offset that is a multiple of the alignment. */
#ifndef DT_GGUF_H
#define DT_GGUF_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "difftrans.h"

/* Metadata value types. */
enum {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3, GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7, GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11, GGUF_TYPE_FLOAT64 = 12
};

/* The ggml tensor types difftrans reads and writes (every other type ggml defines is known by
 * name and size, so that a file holding one opens and the refusal can name it). */
enum { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q8_0 = 8, GGML_TYPE_BF16 = 30 };

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64             /* ggml's tensor names are shorter than this */

/* A string inside the mapped file (not NUL-terminated). */
typedef struct {
    const char *p;
    size_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type;               /* GGUF_TYPE_*; an array is GGUF_TYPE_ARRAY with elem its element type */
    uint32_t elem;
    uint64_t n;                  /* elements: 1 for a scalar */
    const uint8_t *data;         /* the value (an array's first element) in the map */
    size_t size;                 /* bytes of the value */
} gguf_kv;

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];   /* unused dimensions are 1 */
    uint32_t type;               /* ggml type */
    uint64_t offset;             /* into the data section */
    uint64_t nelem;
    size_t nbytes;
    const uint8_t *data;         /* in the map, nbytes of it */
} gguf_tensor;

typedef struct {
    char path[4096];
    const uint8_t *map;
    size_t size;
    uint32_t version;
    size_t alignment;
    size_t data_offset;          /* where the data section starts */
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    gguf_tensor *tensors;
} gguf_file;

/* 1 when the file at path is a regular file beginning with the GGUF magic (nothing is reported). */
int gguf_has_magic(const char *path);
/* Maps path (a regular file only; a FIFO or directory is refused without blocking) and validates
 * the whole container: magic and version, every string, array and count against the bytes that
 * remain (nothing is allocated for what a count claims, only for what is there), the value types,
 * keys and tensor names unique and free of NUL bytes, general.alignment a power of two, every
 * tensor's shape (at most 4 dimensions, no overflow, rows a whole number of blocks), type and
 * offset (aligned, inside the file, no two overlapping). A refusal names the file, the key or
 * tensor and the problem (DT_ERR_FORMAT); it never reads past the end. */
int gguf_open(gguf_file *f, const char *path, dt_error *err);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* "F32", "Q8_0", "Q6_K", ... or NULL for a number that is no ggml type. */
const char *ggml_type_name(uint32_t type);
/* Elements per block and bytes per block of a ggml type (0 and 0 when unknown). */
void ggml_type_size(uint32_t type, int64_t *block, size_t *bytes);
/* "u32", "string", "array", ... for messages. */
const char *gguf_value_type_name(uint32_t type);

/* Typed reads of metadata. Each returns 0 when the key holds a value of the kind asked for, 1
 * when the key is absent (out untouched), -1 with a message naming the file and the key when it
 * holds something else. Integers: any integer type whose value lies in [lo, hi]; floats: F32 or
 * F64 (kept in double); strings point into the map. */
int gguf_get_int(const gguf_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out, dt_error *err);
int gguf_get_float(const gguf_file *f, const char *key, double *out, dt_error *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, dt_error *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, dt_error *err);
/* An array of strings as views into the map (*out malloc'd, kv->n of them; free with free()). */
int gguf_get_str_array(const gguf_file *f, const gguf_kv *kv, gguf_str **out, dt_error *err);
/* Element i of an integer array (kv->elem an integer type, i < kv->n: checked by the caller). */
int64_t gguf_array_int(const gguf_kv *kv, uint64_t i);
/* 1 when kv is an array of integers. */
int gguf_is_int_array(const gguf_kv *kv);
/* Element i of an F32 array (kv->elem GGUF_TYPE_FLOAT32, i < kv->n: checked by the caller). */
float gguf_array_f32(const gguf_kv *kv, uint64_t i);

/* ---------------------------------------------------------------- writing */

/* Metadata and tensor infos are built in memory (they are small next to the data), then
 * gguf_writer_write streams the file through a temporary name and renames it into place. Every
 * gguf_w_* call records an allocation failure in the writer, which gguf_writer_write reports. */
typedef struct {
    uint8_t *kv;
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    uint8_t *ti;
    size_t ti_len, ti_cap;
    uint64_t n_tensors;
    uint64_t data_size;          /* the data section so far, each tensor padded */
    size_t *nbytes;              /* [n_tensors] */
    size_t nbytes_cap;
    uint32_t alignment;
    int oom;
} gguf_writer;

/* general.alignment is the first key written. */
void gguf_writer_init(gguf_writer *w, uint32_t alignment);
void gguf_writer_free(gguf_writer *w);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_f64(gguf_writer *w, const char *key, double v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_str(gguf_writer *w, const char *key, const char *s, size_t len);
/* An array of n strings, string i given by get(ctx, i, &len). */
void gguf_w_str_array(gguf_writer *w, const char *key, uint64_t n, const char *(*get)(void *ctx, uint64_t i, size_t *len),
                      void *ctx);
void gguf_w_i32_array(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_w_f32_array(gguf_writer *w, const char *key, const float *v, uint64_t n);
/* A key-value pair of an open file as it is (for tools that rewrite a file). */
void gguf_w_kv_copy(gguf_writer *w, const gguf_kv *kv);
/* A tensor of shape ne[0..n_dims) (ne[0] fastest) and ggml type; its bytes come later, in order.
 * The shape must be a whole number of blocks per row (the caller checks; -1 otherwise). */
int gguf_w_tensor(gguf_writer *w, const char *name, int n_dims, const int64_t *ne, uint32_t type);

/* Where gguf_writer_write's callback writes a tensor's bytes. */
typedef struct {
    FILE *fp;
    uint64_t written;
    int failed;                  /* errno of the first failed write, or 0 */
} gguf_sink;
/* 0, or -1 when the write failed (recorded in the sink). */
int gguf_sink_write(gguf_sink *s, const void *p, size_t n);

/* Writes the file: header, metadata, tensor infos, then tensor i's bytes from emit(ctx, i, sink,
 * err) for every i in order (each must write exactly its size; the padding is the writer's). */
int gguf_writer_write(gguf_writer *w, const char *path, int (*emit)(void *ctx, uint64_t i, gguf_sink *s, dt_error *err),
                      void *ctx, dt_error *err);
#endif
