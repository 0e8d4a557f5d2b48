/* tokens.c — token datasets: text files tokenised once into memory-mappable shards.
 *
 * A dataset is a directory:
 *   dataset.json          the manifest: format, version, dtype, vocab_size, eos_id, the shards of
 *                         each split with their token and document counts, the bytes read
 *   train-00000.tok ...   shards of the training split
 *   val-00000.tok ...     shards of the held-out split (whole documents, never cut)
 *   tokenizer.json (+ tokenizer_config.json)   a copy of the tokenizer that made it
 *
 * A shard is a 64-byte little-endian header, then `count` token ids of `width` bytes each:
 *   0  char[8]  magic "DTTOKENS"
 *   8  u32      version (1)
 *   12 u32      width: 2 (uint16 ids, when the vocabulary fits in 65536) or 4 (uint32)
 *   16 u64      count: token ids in the shard; the file is exactly 64 + count·width bytes
 *   24 u32      vocab_size: every id is below it
 *   28 u32      zero
 *   32 u64      documents that end in this shard
 *   40 u8[24]   zero
 *
 * The validation split is either documents held out evenly from the inputs (val_fraction), or
 * validation files given apart (val_inputs), every document of which is held out and none of the
 * inputs'.
 *
 * Tokenising streams: each file is read in blocks and cut into documents (a file, a line, or a
 * paragraph ending in a blank line); a document longer than a block is encoded in pieces cut where
 * the tokenizer's ids do not change (tk_stream_cut), so memory stays bounded whatever the size of
 * the input; a tokenizer that cannot be cut there reads each document whole.
 * Pieces are encoded in parallel, one encoder per thread, and written in input order.
 *
 * The dataset is built whole in "<out>.tmp.<pid>" beside the output directory and takes its name
 * only once complete: a dataset already there is exchanged for it in one rename (renameat2's
 * RENAME_EXCHANGE), so a reader sees the old dataset or the new one, never shards of both, and a
 * run that fails leaves the old one as it was.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
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
#include "tokenizer/tok.h"

#define TOK_MAGIC "DTTOKENS"
#define TOK_VERSION 1
#define TOK_HEADER 64
#define MANIFEST "dataset.json"
#define BLOCK_BYTES ((size_t)4 << 20)     /* default read size; also the longest piece encoded at once */
#define BATCH_BYTES ((size_t)32 << 20)    /* text encoded in parallel before writing */
#define MAX_SHARDS 100000

static const char *const SPLIT_NAMES[2] = {"train", "val"};

/* ---------------------------------------------------------------- shard writer */

typedef struct {
    const char *dir;
    int split, width;
    uint32_t vocab;
    uint64_t shard_tokens;       /* tokens per shard */
    dt_atomic_file *files;       /* finished shards, renamed into place only at the very end */
    int n_files;
    size_t cap;
    FILE *fp;                    /* the shard being written (files[n_files - 1]) */
    uint64_t in_shard, docs_in_shard, total, documents;
} shard_writer;

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t get_le64(const uint8_t *p) { return (uint64_t)get_le32(p) | ((uint64_t)get_le32(p + 4) << 32); }

static void make_header(uint8_t *h, int width, uint64_t count, uint32_t vocab, uint64_t docs) {
    memset(h, 0, TOK_HEADER);
    memcpy(h, TOK_MAGIC, 8);
    put_le32(h + 8, TOK_VERSION);
    put_le32(h + 12, (uint32_t)width);
    put_le64(h + 16, count);
    put_le32(h + 24, vocab);
    put_le64(h + 32, docs);
}

static int shard_file_name(char *out, size_t n, const char *dir, int split, int k, dt_error *err) {
    return dt_pathf(out, n, err, "%s/%s-%05d.tok", dir, SPLIT_NAMES[split], k);
}

static int writer_close_shard(shard_writer *w, dt_error *err) {
    if (!w->fp) return 0;
    dt_atomic_file *f = &w->files[w->n_files - 1];
    uint8_t h[TOK_HEADER];
    make_header(h, w->width, w->in_shard, w->vocab, w->docs_in_shard);
    if (fseek(w->fp, 0, SEEK_SET) != 0 || fwrite(h, 1, TOK_HEADER, w->fp) != TOK_HEADER)
        return dt_fail_io(err, "%s: write failed: %s", f->path, strerror(errno));
    w->fp = NULL;
    return atomic_finish(f, err);
}

static int writer_open_shard(shard_writer *w, dt_error *err) {
    if (w->n_files == MAX_SHARDS) return dt_fail(err, "%s: more than %d shards", w->dir, MAX_SHARDS);
    if (grow_array(&w->files, &w->cap, (size_t)w->n_files + 1, sizeof *w->files, 8) != 0)
        return dt_fail_oom(err, "%s: out of memory", w->dir);
    char path[4200];
    if (shard_file_name(path, sizeof path, w->dir, w->split, w->n_files, err) != 0) return -1;
    if (dt_atomic_open(&w->files[w->n_files], path, err) != 0) return -1;
    w->n_files++;
    w->fp = w->files[w->n_files - 1].fp;
    w->in_shard = w->docs_in_shard = 0;
    uint8_t h[TOK_HEADER] = {0}; /* rewritten with the counts when the shard is closed */
    if (fwrite(h, 1, TOK_HEADER, w->fp) != TOK_HEADER)
        return dt_fail_io(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

static int writer_put(shard_writer *w, const int32_t *ids, size_t n, dt_error *err) {
    uint8_t buf[8192];
    while (n > 0) {
        if (!w->fp || w->in_shard == w->shard_tokens) {
            if (writer_close_shard(w, err) != 0 || writer_open_shard(w, err) != 0) return -1;
        }
        uint64_t room = w->shard_tokens - w->in_shard;
        size_t k = n < sizeof buf / 4 ? n : sizeof buf / 4;
        if (k > room) k = (size_t)room;
        for (size_t i = 0; i < k; i++) {
            if (w->width == 2) buf[2 * i] = (uint8_t)ids[i], buf[2 * i + 1] = (uint8_t)(ids[i] >> 8);
            else put_le32(buf + 4 * i, (uint32_t)ids[i]);
        }
        if (fwrite(buf, (size_t)w->width, k, w->fp) != k)
            return dt_fail_io(err, "%s: write failed: %s", w->files[w->n_files - 1].path, strerror(errno));
        w->in_shard += k;
        w->total += k;
        ids += k;
        n -= k;
    }
    return 0;
}

static void writer_abort(shard_writer *w) {
    for (int i = 0; i < w->n_files; i++) dt_atomic_abort(&w->files[i]);
    free(w->files);
    w->files = NULL;
    w->n_files = 0;
    w->fp = NULL;
}

/* ---------------------------------------------------------------- pieces of documents */

typedef struct {
    char *text;                  /* owned */
    size_t len;
    uint64_t doc;                /* global document index */
    int split;                   /* 0 train, 1 validation */
    int last;                    /* the document ends with this piece */
    const char *file;
    uint64_t offset;             /* of the piece in its file, for messages */
    int32_t *ids;                /* encoded (owned) */
    size_t n_ids;
} piece;

typedef struct {
    const dt_tokenize_options *o;
    const char *dir;             /* where the dataset is built: out_dir's temporary name */
    const dt_tok *tok;
    int32_t eos;
    shard_writer w[2];
    piece *pieces;
    int n_pieces;
    size_t cap;
    size_t batch_bytes;
    int file_split;              /* the split of the file being read: -1 (by val_fraction), 0 or 1 */
    uint64_t next_doc, bytes_done, bytes_total;
    double t0, last_report;
    int progress_shown;          /* a progress line is on stderr (a failure ends it first) */
} tokenize_run;

/* Documents are held out evenly: document i goes to validation when ⌊(i+1)·f⌋ > ⌊i·f⌋. */
static int split_of(const tokenize_run *r, uint64_t doc) {
    double f = r->o->val_fraction;
    return floor((double)(doc + 1) * f) > floor((double)doc * f) ? 1 : 0;
}

static void progress(tokenize_run *r, int final) {
    if (r->o->quiet) return;
    double t = monotonic_seconds();
    if (!final && t - r->last_report < 0.5) return;
    r->last_report = t;
    double el = t - r->t0 > 1e-9 ? t - r->t0 : 1e-9;
    fprintf(stderr, "\rtokenize: %5.1f%% | %.2f of %.2f MB | %" PRIu64 " tokens | %.2f MB/s   ",
            r->bytes_total ? 100.0 * (double)r->bytes_done / (double)r->bytes_total : 100.0, r->bytes_done / 1e6,
            r->bytes_total / 1e6, r->w[0].total + r->w[1].total, r->bytes_done / 1e6 / el);
    if (final) fputc('\n', stderr);
    r->progress_shown = !final;
    fflush(stderr);
}

/* Encode the batch in parallel, then write it in order. */
static int flush_batch(tokenize_run *r, dt_error *err) {
    int n = r->n_pieces, failed = 0;
    dt_error first_err = {0};
#pragma omp parallel
    {
        dt_tok_encoder *enc = dt_tok_encoder_new(r->tok);
        dt_error e;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            piece *p = &r->pieces[i];
            const int32_t *ids = NULL;
            size_t n_ids = 0;
            int rc = enc ? dt_tok_encoder_encode(enc, p->text, p->len, 0, &ids, &n_ids, &e) : -1;
            if (!enc) dt_fail_oom(&e, "out of memory for an encoder");
            if (rc == 0) {
                p->ids = malloc((n_ids + 1) * sizeof *p->ids);
                if (p->ids) memcpy(p->ids, ids, n_ids * sizeof *ids), p->n_ids = n_ids;
                else rc = dt_fail_oom(&e, "out of memory");
            }
            if (rc != 0) {
#pragma omp critical
                if (!failed || i < failed - 1) {
                    failed = i + 1;
                    /* the encoder refusing its text (invalid UTF-8) is the data file's fault, and the
                     * place a user looks for is in the file, not in the piece the encoder had */
                    const size_t bad = e.code == DT_ERR_INVALID ? tk_utf8_check(p->text, p->len) : p->len;
                    if (bad != p->len)
                        dt_fail_format(&first_err, "%.300s: invalid UTF-8 at byte %" PRIu64, p->file,
                                       p->offset + (uint64_t)bad);
                    else
                        dt_fail_code(&first_err, e.code == DT_ERR_INVALID ? DT_ERR_FORMAT : e.code,
                                     "%.300s (the text from byte %" PRIu64 "): %.600s", p->file, p->offset, e.msg);
                }
            }
        }
        dt_tok_encoder_free(enc);
    }
    int rc = 0;
    if (failed) {
        *err = first_err;
        rc = -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        piece *p = &r->pieces[i];
        shard_writer *w = &r->w[p->split];
        rc = writer_put(w, p->ids, p->n_ids, err);
        if (rc == 0 && p->last && r->eos >= 0) rc = writer_put(w, &r->eos, 1, err);
        if (rc == 0 && p->last) w->documents++, w->docs_in_shard++;
    }
    for (int i = 0; i < n; i++) free(r->pieces[i].text), free(r->pieces[i].ids);
    r->n_pieces = 0;
    r->batch_bytes = 0;
    return rc;
}

static int add_piece(tokenize_run *r, const char *text, size_t len, int last, const char *file, uint64_t offset,
                     dt_error *err) {
    if (grow_array(&r->pieces, &r->cap, (size_t)r->n_pieces + 1, sizeof *r->pieces, 256) != 0)
        return dt_fail_oom(err, "out of memory");
    piece *p = &r->pieces[r->n_pieces];
    memset(p, 0, sizeof *p);
    p->text = malloc(len + 1);
    if (!p->text) return dt_fail_oom(err, "out of memory");
    memcpy(p->text, text, len);
    p->text[len] = '\0';
    p->len = len;
    p->doc = r->next_doc;
    p->split = r->file_split >= 0 ? r->file_split : split_of(r, p->doc);
    p->last = last;
    p->file = file;
    p->offset = offset;
    r->n_pieces++;
    r->batch_bytes += len;
    if (last) r->next_doc++;
    if (r->batch_bytes >= BATCH_BYTES || r->n_pieces >= 4096) return flush_batch(r, err);
    return 0;
}

/* The end of the first document in buf[0..n), or 0 when none ends there (more text may follow).
 * The search starts at *from and leaves there where it may go on once more text follows. */
static size_t document_end(const char *buf, size_t n, dt_doc_split mode, size_t *from) {
    if (mode == DT_DOC_FILE) return 0;
    for (size_t i = *from; i < n; i++) {
        if (buf[i] != '\n') continue;
        if (mode == DT_DOC_LINE) return i + 1;
        /* paragraph: a newline, optional blanks, another newline; the run of newlines belongs to it */
        size_t j = i + 1;
        while (j < n && (buf[j] == ' ' || buf[j] == '\t' || buf[j] == '\r')) j++;
        if (j < n && buf[j] == '\n') {
            while (j < n && (buf[j] == '\n' || buf[j] == '\r')) j++;
            if (j < n) return j;
        }
        if (j == n) { /* the blanks or the run may go on in the text that follows */
            *from = i;
            return 0;
        }
    }
    *from = n;
    return 0;
}

static int tokenize_file(tokenize_run *r, const char *path, dt_error *err) {
    FILE *fp = open_regular_file(path, err);
    if (!fp) return -1;
    const size_t block = r->o->block_bytes ? (size_t)r->o->block_bytes : BLOCK_BYTES;
    size_t cap = 2 * block;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(fp);
        return dt_fail_oom(err, "%s: out of memory", path);
    }
    size_t pos = 0, len = 0;  /* unconsumed text is buf[pos, len) */
    uint64_t base = 0;        /* file offset of buf[0] */
    size_t doc_from = 0;      /* from pos: where the search for the document's end goes on */
    size_t cut_from = 0;      /* from pos: where the search for a place to cut it goes on (0: none yet) */
    int rc = 0, eof = 0, more = 0;
    while (rc == 0 && !(eof && pos == len)) {
        if (!eof && (len - pos < block || more)) { /* top up: move the rest to the front once per block */
            memmove(buf, buf + pos, len - pos);
            base += pos;
            len -= pos;
            pos = 0;
            if (more && cap - len < block) { /* no place to cut it yet: the piece grows */
                char *bigger = cap <= SIZE_MAX / 2 ? realloc(buf, 2 * cap) : NULL;
                if (!bigger) {
                    rc = dt_fail_oom(err, "%s: out of memory for a piece of %zu bytes with no place to cut it (from "
                                     "byte %" PRIu64 ")", path, len, base);
                    break;
                }
                buf = bigger;
                cap *= 2;
            }
            more = 0;
            size_t got = fread(buf + len, 1, cap - len, fp);
            if (ferror(fp)) {
                rc = dt_fail_io(err, "%s: read failed: %s", path, strerror(errno));
                break;
            }
            eof = got == 0;
            len += got;
            r->bytes_done += got;
            progress(r, 0);
            continue;
        }
        size_t avail = len - pos, end = document_end(buf + pos, avail, r->o->doc_split, &doc_from);
        int last = 1;
        if (end == 0 && eof) end = avail;
        if (end == 0) {
            /* a document longer than a block: cut where its parts encode as the whole does, else read on */
            size_t to = cut_from ? avail - block : avail < block ? avail : block;
            if (to < cut_from) to = cut_from;
            end = tk_stream_cut(r->tok, buf + pos, avail, cut_from, to);
            if (end == 0) {
                cut_from = to > 0 ? to : 1;
                more = 1;
                continue;
            }
            last = 0;
        }
        rc = add_piece(r, buf + pos, end, last, path, base + pos, err);
        pos += end;
        doc_from = doc_from > end ? doc_from - end : 0;
        cut_from = 0;
    }
    free(buf);
    fclose(fp);
    return rc;
}

/* ---------------------------------------------------------------- manifest and the tokenizer copy */

static int add_split_json(cJSON *splits, const shard_writer *w) {
    cJSON *s = cJSON_AddObjectToObject(splits, SPLIT_NAMES[w->split]);
    cJSON *list = s ? cJSON_AddArrayToObject(s, "shards") : NULL;
    int ok = list != NULL;
    for (int i = 0; ok && i < w->n_files; i++) {
        const char *name = strrchr(w->files[i].path, '/');
        ok = cJSON_AddItemToArray(list, cJSON_CreateString(name ? name + 1 : w->files[i].path));
    }
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, w->total);
    ok = ok && cJSON_AddRawToObject(s, "tokens", num);
    snprintf(num, sizeof num, "%" PRIu64, w->documents);
    ok = ok && cJSON_AddRawToObject(s, "documents", num);
    return ok ? 0 : -1;
}

static int write_manifest(const tokenize_run *r, const char *tok_path, dt_error *err) {
    static const char *const modes[] = {"file", "line", "paragraph"};
    cJSON *root = cJSON_CreateObject();
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, r->bytes_total);
    int ok = root && cJSON_AddStringToObject(root, "format", "difftrans-tokens");
    ok = ok && cJSON_AddNumberToObject(root, "version", TOK_VERSION);
    ok = ok && cJSON_AddStringToObject(root, "dtype", r->w[0].width == 2 ? "uint16" : "uint32");
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", r->w[0].vocab);
    ok = ok && cJSON_AddNumberToObject(root, "eos_id", r->eos);
    ok = ok && cJSON_AddStringToObject(root, "documents", modes[r->o->doc_split]);
    char frac[32];
    snprintf(frac, sizeof frac, "%g", (double)r->o->val_fraction);
    ok = ok && cJSON_AddRawToObject(root, "val_fraction", frac);
    if (ok && r->o->n_val_inputs > 0) { /* where the validation split came from */
        cJSON *files = cJSON_AddArrayToObject(root, "val_files");
        ok = files != NULL;
        for (int i = 0; ok && i < r->o->n_val_inputs; i++)
            ok = cJSON_AddItemToArray(files, cJSON_CreateString(r->o->val_inputs[i]));
    }
    ok = ok && cJSON_AddRawToObject(root, "bytes", num);
    ok = ok && cJSON_AddStringToObject(root, "tokenizer_source", tok_path);
    cJSON *splits = ok ? cJSON_AddObjectToObject(root, "splits") : NULL;
    ok = splits && add_split_json(splits, &r->w[0]) == 0 && add_split_json(splits, &r->w[1]) == 0;
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    char path[4200];
    if (dt_pathf(path, sizeof path, err, "%s/%s", r->dir, MANIFEST) != 0) {
        cJSON_free(text);
        return -1;
    }
    if (!text) return dt_fail_oom(err, "%s: out of memory", path);
    int rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

/* Copies one file into dir under the same base name (atomically); absent sources are skipped
 * when optional. */
static int copy_into(const char *src, const char *dir, const char *name, int optional, dt_error *err) {
    dt_error why;
    FILE *in = open_regular_file(src, &why);
    if (!in) {
        if (optional && errno == ENOENT) return 0;
        *err = why;
        return -1;
    }
    char path[4200];
    dt_atomic_file f;
    if (dt_pathf(path, sizeof path, err, "%s/%s", dir, name) != 0 || dt_atomic_open(&f, path, err) != 0) {
        fclose(in);
        return -1;
    }
    char buf[65536];
    size_t got;
    int rc = 0;
    while (rc == 0 && (got = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, got, f.fp) != got) rc = dt_fail_io(err, "%s: write failed: %s", path, strerror(errno));
    if (rc == 0 && ferror(in)) rc = dt_fail_io(err, "%s: read failed", src);
    fclose(in);
    if (rc != 0) {
        dt_atomic_abort(&f);
        return -1;
    }
    return dt_atomic_commit(&f, err);
}

char *tokenizer_config_text(const dt_tok *tok) {
    cJSON *root = cJSON_CreateObject();
    int ok = root && cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast");
    static const char *const keys[] = {"bos_token", "eos_token", "pad_token"};
    const int32_t ids[] = {dt_tok_bos_id(tok), dt_tok_eos_id(tok), dt_tok_pad_id(tok)};
    for (int i = 0; i < 3 && ok; i++) {
        size_t len = 0;
        const char *name = ids[i] >= 0 ? dt_tok_id_to_token(tok, ids[i], &len) : NULL;
        if (!name) continue;
        char *copy = malloc(len + 1);
        ok = copy != NULL;
        if (ok) {
            memcpy(copy, name, len);
            copy[len] = '\0';
            ok = cJSON_AddStringToObject(root, keys[i], copy) != NULL;
            free(copy);
        }
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* A tokenizer.json without a tokenizer_config.json beside it: write the smallest one with which
 * transformers' AutoTokenizer loads the fast tokenizer and knows its special tokens. */
static int write_tokenizer_config(const char *json, const char *dir, dt_error *err) {
    dt_tok *tok;
    if (dt_tok_load(&tok, json, err) != 0) return -1;
    char *text = tokenizer_config_text(tok);
    dt_tok_free(tok);
    char path[4200];
    if (dt_pathf(path, sizeof path, err, "%s/tokenizer_config.json", dir) != 0) {
        cJSON_free(text);
        return -1;
    }
    if (!text) return dt_fail_oom(err, "%s: out of memory", path);
    int rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

int tokenizer_copy_from(const char *from, const char *dir, dt_error *err) {
    char json[4200], cfg[4200], dst[4200];
    struct stat sb;
    if (stat(from, &sb) == 0 && S_ISDIR(sb.st_mode) ? dt_pathf(json, sizeof json, err, "%s/tokenizer.json", from)
                                                     : dt_pathf(json, sizeof json, err, "%s", from))
        return -1;
    const char *slash = strrchr(json, '/');
    const int at = slash ? (int)(slash + 1 - json) : 0; /* the tokenizer_config.json beside it */
    if (dt_pathf(cfg, sizeof cfg, err, "%.*stokenizer_config.json", at, json) != 0 ||
        dt_pathf(dst, sizeof dst, err, "%s/tokenizer.json", dir) != 0)
        return -1;
    struct stat a, b;
    if (stat(json, &a) == 0 && stat(dst, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return 0; /* the same file already */
    if (copy_into(json, dir, "tokenizer.json", 0, err) != 0) return -1;
    if (stat(cfg, &sb) == 0) return copy_into(cfg, dir, "tokenizer_config.json", 0, err);
    return write_tokenizer_config(json, dir, err);
}

/* ---------------------------------------------------------------- dt_tokenize */

void dt_tokenize_defaults(dt_tokenize_options *o) {
    memset(o, 0, sizeof *o);
    o->val_fraction = 0.01f;
    o->doc_split = DT_DOC_PARAGRAPH;
    o->append_eos = 1;
    o->shard_tokens = (uint64_t)1 << 27;
}

/* Every input a regular file; *total gets their bytes. An empty file among others adds no
 * documents and is passed over with a warning (a corpus of many files may hold one, and
 * `tokenizer train` takes it too); inputs that are all empty would make a split of nothing. */
static int check_inputs(const char *const *files, int n, const char *what, uint64_t *total, dt_error *err) {
    int empty = 0;
    for (int i = 0; i < n; i++) {
        struct stat sb;
        if (!files[i]) return dt_fail(err, "tokenize: input %d is NULL", i);
        if (stat(files[i], &sb) != 0) return dt_fail_io(err, "%s: %s", files[i], strerror(errno));
        if (!S_ISREG(sb.st_mode)) return dt_fail_io(err, "%s: not a regular file", files[i]);
        empty += sb.st_size == 0;
        *total += (uint64_t)sb.st_size;
    }
    if (n > 0 && empty == n)
        return n == 1 ? dt_fail_format(err, "%s: %s file is empty", files[0], what)
                      : dt_fail_format(err, "%s and every other %s file are empty (%d files)", files[0], what, n);
    for (int i = 0; i < n; i++) {
        struct stat sb;
        if (stat(files[i], &sb) == 0 && sb.st_size == 0)
            fprintf(stderr, "tokenize: warning: %s is empty: it adds no documents\n", files[i]);
    }
    return 0;
}

static int check_options(const dt_tokenize_options *o, uint64_t *total, dt_error *err) {
    if (!o->tokenizer_path) return dt_fail(err, "tokenize: tokenizer_path is NULL (a tokenizer.json or its directory)");
    if (!o->out_dir) return dt_fail(err, "tokenize: out_dir is NULL (the dataset's directory)");
    if (o->n_inputs <= 0 || !o->inputs)
        return dt_fail(err, "tokenize: n_inputs %d, inputs %s: no input files given", o->n_inputs,
                       o->inputs ? "given" : "NULL");
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return dt_fail(err, "tokenize: val_fraction %g must be in [0, 1)", (double)o->val_fraction);
    if (o->doc_split != DT_DOC_FILE && o->doc_split != DT_DOC_LINE && o->doc_split != DT_DOC_PARAGRAPH)
        return dt_fail(err, "tokenize: unknown document split %d", (int)o->doc_split);
    if (o->shard_tokens == 0) return dt_fail(err, "tokenize: shard_tokens must be > 0");
    if (o->block_bytes != 0 && (o->block_bytes < 64 || o->block_bytes > ((uint64_t)1 << 32)))
        return dt_fail(err, "tokenize: block_bytes %llu: must be in 64..2^32", (unsigned long long)o->block_bytes);
    if (o->n_val_inputs < 0 || (o->n_val_inputs > 0 && !o->val_inputs))
        return dt_fail(err, "tokenize: n_val_inputs %d with val_inputs %s", o->n_val_inputs,
                       o->val_inputs ? "given" : "NULL");
    /* both would hold out documents of the inputs and take the validation files: which split a
     * reader means would be ambiguous */
    if (o->n_val_inputs > 0 && o->val_fraction != 0)
        return dt_fail(err, "tokenize: validation files and val_fraction %g are exclusive (val_fraction must be 0)",
                       (double)o->val_fraction);
    *total = 0;
    return check_inputs(o->inputs, o->n_inputs, "data", total, err) != 0 ||
                   check_inputs(o->val_inputs, o->n_val_inputs, "validation", total, err) != 0
               ? -1
               : 0;
}

/* A name that a token dataset's directory holds: its manifest, the tokenizer copy, its shards, and
 * the temporaries of a run that was killed while writing it. */
static int dataset_file_name(const char *name) {
    size_t len = strlen(name);
    const char *tmp = strstr(name, ".tmp."); /* "<file>.tmp.<pid>": a killed writer's temporary */
    if (tmp && tmp[5] && strspn(tmp + 5, "0123456789") == strlen(tmp + 5)) len = (size_t)(tmp - name);
    static const char *const fixed[] = {MANIFEST, "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (len == strlen(fixed[i]) && !strncmp(name, fixed[i], len)) return 1;
    for (int s = 0; s < 2; s++) { /* train-NNNNN.tok, val-NNNNN.tok */
        const size_t n = strlen(SPLIT_NAMES[s]);
        if (len <= n + 5 || strncmp(name, SPLIT_NAMES[s], n) != 0 || name[n] != '-' ||
            strncmp(name + len - 4, ".tok", 4) != 0)
            continue;
        size_t d = n + 1;
        while (d < len - 4 && name[d] >= '0' && name[d] <= '9') d++;
        if (d == len - 4) return 1;
    }
    return 0;
}

/* The first entry of dir that is no file of a token dataset into *name (empty when none). */
static int foreign_entry(const char *dir, char *name, size_t n, dt_error *err) {
    DIR *d = opendir(dir);
    if (!d) return dt_fail_io(err, "%s: cannot open: %s", dir, strerror(errno));
    name[0] = '\0';
    for (struct dirent *e; !name[0] && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !dataset_file_name(e->d_name))
            snprintf(name, n, "%s", e->d_name);
    closedir(d);
    return 0;
}

/* Removes a dataset directory that this call built or replaced: its dataset files, then itself
 * (left where anything else has appeared in it). */
static void remove_dataset_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char path[4400];
        if (dataset_file_name(e->d_name) && dt_pathf(path, sizeof path, NULL, "%s/%s", dir, e->d_name) == 0)
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* out = out_dir without trailing slashes, or the directory it links to; *exists when it is a
 * directory already, which must hold nothing but a token dataset: the whole directory is replaced,
 * and no file of the user's goes with it. tmp = the name the new dataset is built under. */
static int staging_paths(const char *out_dir, char *out, size_t n_out, char *tmp, size_t n_tmp, int *exists,
                         dt_error *err) {
    if (dt_pathf(out, n_out, err, "%s", out_dir) != 0) return -1;
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = '\0';
    struct stat sb;
    *exists = stat(out, &sb) == 0;
    if (*exists && !S_ISDIR(sb.st_mode)) return dt_fail_io(err, "%s: exists and is not a directory", out_dir);
    if (*exists && lstat(out, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        /* the rename replaces the link's target, where the dataset is read from, not the link */
        char real[PATH_MAX];
        if (!realpath(out, real)) return dt_fail_io(err, "%s: cannot resolve: %s", out_dir, strerror(errno));
        if (dt_pathf(out, n_out, err, "%s", real) != 0) return -1;
    }
    char other[256];
    if (*exists && foreign_entry(out, other, sizeof other, err) != 0) return -1;
    if (*exists && other[0])
        return dt_fail(err, "%s: holds %s, which is no file of a token dataset: a dataset is written into a new or "
                            "empty directory, or over another dataset, which it replaces whole", out_dir, other);
    return dt_pathf(tmp, n_tmp, err, "%s.tmp.%ld", out, (long)getpid());
}

/* The dataset built in tmp takes out's name: in one exchange when a directory is there (the old
 * dataset then goes from tmp), else by a rename. */
static int staging_commit(const char *tmp, const char *out, int exists, dt_error *err) {
    if (!exists) {
        if (rename(tmp, out) != 0)
            return dt_fail_io(err, "%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
        return sync_parent_dir(out, err);
    }
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) != 0) {
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return dt_fail_io(err, "%s: cannot exchange it for %s: %s", out, tmp, strerror(errno));
        /* a file system without the exchange: the old dataset steps aside for the new one; a crash in
         * between leaves it whole under the aside name */
        char aside[4300];
        if (dt_pathf(aside, sizeof aside, err, "%s.old.%ld", out, (long)getpid()) != 0) return -1;
        if (rename(out, aside) != 0)
            return dt_fail_io(err, "%s: cannot move it aside to %s: %s", out, aside, strerror(errno));
        if (rename(tmp, out) != 0) {
            const int saved = errno;
            if (rename(aside, out) != 0)
                return dt_fail_io(err, "%s: cannot rename %s into place (%s), and the old dataset is now %s", out, tmp,
                                  strerror(saved), aside);
            return dt_fail_io(err, "%s: cannot rename %s into place: %s", out, tmp, strerror(saved));
        }
        remove_dataset_dir(aside);
        return sync_parent_dir(out, err);
    }
    remove_dataset_dir(tmp); /* the old dataset, now under the temporary name */
    return sync_parent_dir(out, err);
}

int dt_tokenize(const dt_tokenize_options *o, dt_tokenize_stats *stats, dt_error *err) {
    tokenize_run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    if (check_options(o, &r.bytes_total, err) != 0) return -1;
    dt_tok *tok = NULL;
    if (dt_tok_load(&tok, o->tokenizer_path, err) != 0) return -1;
    r.tok = tok;
    r.eos = o->append_eos ? dt_tok_eos_id(tok) : -1;
    const int32_t vocab = dt_tok_vocab_size(tok);
    const int width = vocab <= 65536 ? 2 : 4;
    char out[4096], tmp[4200];
    int exists = 0;
    if (staging_paths(o->out_dir, out, sizeof out, tmp, sizeof tmp, &exists, err) != 0 ||
        dir_ensure_parent(out, err) != 0) {
        dt_tok_free(tok);
        return -1;
    }
    temp_dir_register(out); /* tmp goes, with its files, if a signal ends the process */
    remove_dataset_dir(tmp); /* what a killed process of the same pid left */
    if (mkdir(tmp, 0755) != 0) {
        dt_tok_free(tok);
        return dt_fail_io(err, "%s: cannot create directory %s: %s", o->out_dir, tmp, strerror(errno));
    }
    r.dir = tmp;
    for (int s = 0; s < 2; s++)
        r.w[s] = (shard_writer){.dir = tmp, .split = s, .width = width, .vocab = (uint32_t)vocab,
                                .shard_tokens = o->shard_tokens};
    r.t0 = r.last_report = monotonic_seconds();
    int rc = 0;
    r.file_split = o->n_val_inputs > 0 ? 0 : -1;
    for (int i = 0; i < o->n_inputs && rc == 0; i++) rc = tokenize_file(&r, o->inputs[i], err);
    r.file_split = 1;
    for (int i = 0; i < o->n_val_inputs && rc == 0; i++) rc = tokenize_file(&r, o->val_inputs[i], err);
    if (rc == 0) rc = flush_batch(&r, err);
    for (int s = 0; s < 2 && rc == 0; s++) rc = writer_close_shard(&r.w[s], err);
    /* named with the caller's option names, which the CLI turns into its flags */
    if (rc == 0 && o->val_fraction > 0 && r.w[1].total == 0)
        rc = dt_fail(err, "%s%s: %" PRIu64 " documents are too few to hold out %g of them (a val_fraction of 1/%" PRIu64
                          " or more holds one out, 0 none; or cut finer documents with doc_split)",
                     o->inputs[0], o->n_inputs > 1 ? " and the other inputs" : "", r.next_doc, (double)o->val_fraction,
                     r.next_doc);
    if (rc == 0 && r.w[0].total == 0) rc = dt_fail(err, "%s: no training tokens", o->inputs[0]);
    /* every shard is complete: only now do they take their names, then the manifest */
    for (int s = 0; s < 2 && rc == 0; s++)
        for (int i = 0; i < r.w[s].n_files && rc == 0; i++) rc = atomic_rename(&r.w[s].files[i], err);
    if (rc == 0) rc = tokenizer_copy_from(dt_tok_path(tok), tmp, err);
    if (rc == 0) rc = write_manifest(&r, dt_tok_path(tok), err);
    const int n_shards[2] = {r.w[0].n_files, r.w[1].n_files};
    for (int s = 0; s < 2; s++) writer_abort(&r.w[s]); /* unlinks only temporaries still there */
    if (rc == 0) rc = staging_commit(tmp, out, exists, err);
    if (rc != 0) remove_dataset_dir(tmp);
    if (rc == 0) {
        progress(&r, 1);
        if (stats) {
            memset(stats, 0, sizeof *stats);
            stats->bytes = r.bytes_total;
            stats->vocab_size = vocab;
            stats->width = width;
            for (int s = 0; s < 2; s++) {
                stats->tokens[s] = r.w[s].total;
                stats->documents[s] = r.w[s].documents;
                stats->shards[s] = n_shards[s];
            }
        }
    } else if (r.progress_shown) {
        fputc('\n', stderr);
    }
    for (int i = 0; i < r.n_pieces; i++) free(r.pieces[i].text), free(r.pieces[i].ids);
    free(r.pieces);
    dt_tok_free(tok);
    return rc;
}

/* ---------------------------------------------------------------- reading */

int tokens_dir_check(const char *dir, dt_error *err) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return dt_fail_io(err, "%s: cannot open the token dataset: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return dt_fail_format(err, "%s: not a token dataset (a directory holding dataset.json and its shards)", dir);
    return 0;
}

static int manifest_load(const char *dir, cJSON **root, dt_error *err) {
    char path[4200];
    *root = NULL;
    if (dt_pathf(path, sizeof path, err, "%s/%s", dir, MANIFEST) != 0) return -1;
    *root = json_load_file(path, err);
    if (!*root) return -1;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(*root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "difftrans-tokens") != 0) {
        cJSON_Delete(*root);
        return dt_fail_format(err, "%s: not a difftrans token dataset (format is not \"difftrans-tokens\")", path);
    }
    return 0;
}

/* Largest count the manifest may give (tokens, bytes): every whole number up to 2^53 is a double
 * exactly, so the comparisons with the shards' sizes stay exact. */
#define MAX_COUNT 9007199254740992.0

/* A whole number in [lo, hi] under `key` of the manifest into *out, or -1 naming the file and the
 * key: converting a fraction, an infinity (cJSON reads 1e999 as one) or anything outside the
 * target type to an integer would be undefined or silently wrong. */
static int manifest_number(const cJSON *j, const char *dir, const char *key, double lo, double hi, double *out,
                           dt_error *err) {
    const double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= lo && v <= hi && v == floor(v))) /* NaN fails every comparison */
        return dt_fail_format(err, "%s/%s: %s must be a whole number in [%.0f, %.0f]", dir, MANIFEST, key, lo, hi);
    *out = v;
    return 0;
}

/* A count that may be absent (0: unknown); when present it must be one. */
static int manifest_count(const cJSON *j, const char *dir, const char *key, uint64_t *out, dt_error *err) {
    double v = 0;
    if (j && manifest_number(j, dir, key, 0, MAX_COUNT, &v, err) != 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

int dt_tokens_info(const char *dir, dt_tokens_summary *s, dt_error *err) {
    cJSON *root;
    if (manifest_load(dir, &root, err) != 0) return -1;
    memset(s, 0, sizeof *s);
    s->eos_id = -1;
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(root, "eos_id");
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
    double vocab = 0, eos_id = -1;
    /* the vocabulary a model can have (dt_config_validate's limit), so that every id fits an int */
    int rc = manifest_number(cJSON_GetObjectItemCaseSensitive(root, "vocab_size"), dir, "vocab_size", 1, DT_MAX_VOCAB,
                             &vocab, err);
    if (rc == 0 && eos && !cJSON_IsNull(eos)) rc = manifest_number(eos, dir, "eos_id", -1, vocab - 1, &eos_id, err);
    if (rc == 0) rc = manifest_count(cJSON_GetObjectItemCaseSensitive(root, "bytes"), dir, "bytes", &s->bytes, err);
    for (int k = 0; rc == 0 && k < 2; k++) {
        char key[64];
        snprintf(key, sizeof key, "splits.%s.tokens", SPLIT_NAMES[k]);
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(splits, SPLIT_NAMES[k]);
        rc = manifest_count(cJSON_GetObjectItemCaseSensitive(sp, "tokens"), dir, key, &s->tokens[k], err);
    }
    if (rc == 0) {
        s->vocab_size = (int64_t)vocab;
        s->eos_id = (int)eos_id;
    }
    cJSON_Delete(root);
    return rc;
}

/* One shard, validated, appended to out[*n...]; with a manifest count (want >= 0) the split may
 * not grow past it (checked before allocating). */
static int load_shard(const char *path, int64_t vocab_limit, double want, int **out, size_t *n, size_t *cap,
                      dt_error *err) {
    struct stat sb;
    int fd = open_regular_fd(path, &sb, err);
    if (fd < 0) return -1;
    size_t size = (size_t)sb.st_size;
    if (size < TOK_HEADER) {
        close(fd);
        return dt_fail_format(err, "%s: truncated: %zu bytes, shorter than the %d-byte header", path, size, TOK_HEADER);
    }
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return dt_fail_io(err, "%s: cannot mmap: %s", path, strerror(errno));
    int rc = 0;
    uint32_t version = get_le32(map + 8), width = get_le32(map + 12), vocab = get_le32(map + 24);
    uint64_t count = get_le64(map + 16);
    if (memcmp(map, TOK_MAGIC, 8) != 0) rc = dt_fail_format(err, "%s: bad magic (not a difftrans token shard)", path);
    else if (version != TOK_VERSION)
        rc = dt_fail_format(err, "%s: version %u (this build reads %d)", path, version, TOK_VERSION);
    else if (width != 2 && width != 4) rc = dt_fail_format(err, "%s: token width %u (must be 2 or 4)", path, width);
    else if (count > (size - TOK_HEADER) / width || TOK_HEADER + count * width != size)
        rc = dt_fail_format(err,
                            "%s: header count %" PRIu64 " disagrees with the file size %zu (%" PRIu64
                            " tokens of %u bytes"
                            " + %d)",
                            path, count, size, (uint64_t)(size - TOK_HEADER) / width, width, TOK_HEADER);
    else if ((int64_t)vocab > vocab_limit)
        rc = dt_fail(err, "%s: ids of a %u-token vocabulary, larger than the model's %" PRId64, path, vocab, vocab_limit);
    if (rc == 0 && want >= 0 && (double)*n + (double)count > want)
        rc = dt_fail_format(err, "%s: its %" PRIu64 " tokens take the split past the %.0f tokens its manifest declares",
                            path, count, want);
    if (rc == 0 && *n + count > *cap) {
        size_t want = *n + (size_t)count;
        int *p = realloc(*out, (want ? want : 1) * sizeof *p);
        if (!p) rc = dt_fail_oom(err, "%s: out of memory for %" PRIu64 " tokens", path, count);
        else *out = p, *cap = want;
    }
    const uint8_t *d = map + TOK_HEADER;
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        uint32_t id = width == 2 ? (uint32_t)(d[2 * i] | (d[2 * i + 1] << 8)) : get_le32(d + 4 * i);
        if ((int64_t)id >= vocab_limit) {
            rc = dt_fail_format(err,
                                "%s: token id %u at index %" PRIu64 " is outside the model's vocabulary of %" PRId64,
                                path, id, i, vocab_limit);
            break;
        }
        (*out)[(*n)++] = (int)id;
    }
    munmap((void *)map, size);
    return rc;
}

int dt_tokens_load(const char *dir, const char *split, int64_t vocab_limit, int **tokens, size_t *n, dt_error *err) {
    *tokens = NULL;
    *n = 0;
    cJSON *root;
    if (manifest_load(dir, &root, err) != 0) return -1;
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(splits, split);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(sp, "shards");
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(sp, "tokens");
    int rc = 0;
    size_t cap = 0;
    double declared = -1; /* the split's token count, -1 when the manifest gives none */
    if (want) {
        char key[96];
        snprintf(key, sizeof key, "splits.%s.tokens", split);
        rc = manifest_number(want, dir, key, 0, MAX_COUNT, &declared, err);
    }
    if (rc == 0 && !cJSON_IsArray(list))
        rc = dt_fail_format(err, "%s/%s: no shard list for split '%s'", dir, MANIFEST, split);
    else if (rc == 0 && cJSON_GetArraySize(list) > MAX_SHARDS)
        rc = dt_fail_format(err, "%s/%s: more than %d shards in split '%s'", dir, MANIFEST, MAX_SHARDS, split);
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (rc != 0) break;
        if (!cJSON_IsString(item) || strchr(item->valuestring, '/')) {
            rc = dt_fail_format(err, "%s/%s: bad shard name in split '%s'", dir, MANIFEST, split);
            break;
        }
        /* a shard read twice would count its tokens twice (and memory grows with each repeat) */
        for (const cJSON *before = list->child; before != item; before = before->next)
            if (strcmp(before->valuestring, item->valuestring) == 0) {
                rc = dt_fail_format(err, "%s/%s: shard %s is listed twice in split '%s'", dir, MANIFEST,
                                    item->valuestring, split);
                break;
            }
        if (rc != 0) break;
        char path[4200];
        rc = dt_pathf(path, sizeof path, err, "%s/%s", dir, item->valuestring);
        if (rc == 0) rc = load_shard(path, vocab_limit, declared, tokens, n, &cap, err);
    }
    if (rc == 0 && declared >= 0 && (double)*n != declared)
        rc = dt_fail_format(err, "%s/%s: split '%s' should hold %.0f tokens but its shards hold %zu", dir, MANIFEST,
                            split, declared, *n);
    cJSON_Delete(root);
    if (rc != 0) {
        free(*tokens);
        *tokens = NULL;
        *n = 0;
    }
    return rc;
}
