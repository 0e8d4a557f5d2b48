/* shards.c — a checkpoint's weights as one model.safetensors, or as Hugging Face shards
 * (model-00001-of-00003.safetensors, ...) named by model.safetensors.index.json:
 *
 *   {"metadata": {"total_size": BYTES}, "weight_map": {"tensor name": "shard file name", ...}}
 *
 * Reading treats the index as a claim to verify, not a fact: every tensor it lists must be in
 * the shard it names, every tensor of every shard must be listed, no tensor may be in two shards,
 * and a shard name must be a plain file name in the model's directory. Writing follows
 * transformers' save_pretrained: tensors in order, a new shard when the next tensor would take
 * the current one past the limit (a tensor larger than the limit gets a shard of its own), one
 * file without an index when everything fits. All shards are written under temporary names
 * before any is renamed into place, and files of an earlier save that the new one does not
 * overwrite are removed, so that the directory never mixes two checkpoints.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "internal.h"

#define SINGLE_NAME "model.safetensors"
#define INDEX_NAME "model.safetensors.index.json"
/* transformers writes at most 99999 shards: the names have five digits */
#define MAX_SHARDS 99999

struct dt_st_ref {
    const char *name;            /* points into the file's tensor table */
    int file;
    const dt_st_tensor *t;
};

static int join(char *out, size_t n, const char *dir, const char *file, dt_error *err) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, file) >= n) return dt_fail(err, "%.200s: path too long", dir);
    return 0;
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---------------------------------------------------------------- reading */

static int cmp_ref(const void *a, const void *b) {
    return strcmp(((const struct dt_st_ref *)a)->name, ((const struct dt_st_ref *)b)->name);
}

/* Every tensor of every file, sorted by name; a name in two files is an error. */
static int build_refs(dt_st_set *s, dt_error *err) {
    size_t total = 0;
    for (int f = 0; f < s->n_files; f++) total += (size_t)s->files[f].n;
    s->refs = malloc((total ? total : 1) * sizeof *s->refs);
    if (!s->refs) return dt_fail(err, "%s: out of memory", s->dir);
    size_t k = 0;
    for (int f = 0; f < s->n_files; f++)
        for (int i = 0; i < s->files[f].n; i++)
            s->refs[k++] = (struct dt_st_ref){s->files[f].tensors[i].name, f, &s->files[f].tensors[i]};
    qsort(s->refs, total, sizeof *s->refs, cmp_ref);
    s->n = (int)total;
    for (size_t i = 1; i < total; i++)
        if (strcmp(s->refs[i - 1].name, s->refs[i].name) == 0)
            return dt_fail(err, "%s: tensor '%s' is in two shards: %s and %s", s->dir, s->refs[i].name,
                           s->files[s->refs[i - 1].file].path, s->files[s->refs[i].file].path);
    return 0;
}

static const struct dt_st_ref *find_ref(const dt_st_set *s, const char *name) {
    struct dt_st_ref key = {name, 0, NULL};
    return s->n ? bsearch(&key, s->refs, (size_t)s->n, sizeof key, cmp_ref) : NULL;
}

/* A shard must be a file of the model's directory: no path separators, no "." or "..". */
static int valid_shard_name(const char *name) {
    return name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The distinct shard names of weight_map, sorted, into *names (pointers into the JSON). */
static int shard_names(const char *index, const cJSON *map, const char ***names, int *n, dt_error *err) {
    int count = cJSON_GetArraySize(map);
    const char **all = malloc((size_t)(count ? count : 1) * sizeof *all);
    const char **keys = malloc((size_t)(count ? count : 1) * sizeof *keys);
    if (!all || !keys) {
        free(all);
        free(keys);
        return dt_fail(err, "%s: out of memory", index);
    }
    int k = 0, rc = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, map) {
        if (!cJSON_IsString(item)) {
            rc = dt_fail(err, "%s: weight_map['%s'] is not a file name string", index, item->string);
            break;
        }
        if (!valid_shard_name(item->valuestring)) {
            rc = dt_fail(err, "%s: weight_map['%s'] names '%s', which is not a file name in the model directory",
                         index, item->string, item->valuestring);
            break;
        }
        keys[k] = item->string;
        all[k++] = item->valuestring;
    }
    if (rc == 0 && k == 0) rc = dt_fail(err, "%s: weight_map is empty", index);
    if (rc == 0) {
        qsort(keys, (size_t)k, sizeof *keys, cmp_str);
        for (int i = 1; i < k && rc == 0; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0) rc = dt_fail(err, "%s: weight_map lists tensor '%s' twice", index, keys[i]);
    }
    free(keys);
    if (rc != 0) {
        free(all);
        return -1;
    }
    qsort(all, (size_t)k, sizeof *all, cmp_str);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || strcmp(all[u - 1], all[i]) != 0) all[u++] = all[i];
    *names = all;
    *n = u;
    return 0;
}

static int open_shards(dt_st_set *s, const char *index, const char **names, int n, dt_error *err) {
    if (n > MAX_SHARDS) return dt_fail(err, "%s: %d shards (at most %d)", index, n, MAX_SHARDS);
    s->files = calloc((size_t)n, sizeof *s->files);
    if (!s->files) return dt_fail(err, "%s: out of memory", index);
    for (int i = 0; i < n; i++) {
        char path[4200];
        if (join(path, sizeof path, s->dir, names[i], err) != 0) return -1;
        if (dt_st_open(&s->files[i], path, err) != 0) {
            size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, " (a shard named by %s)", index);
            return -1;
        }
        s->n_files = i + 1;
    }
    return 0;
}

/* Each weight_map entry against the shards, and the other way round. */
static int check_index(const dt_st_set *s, const char *index, const cJSON *map, dt_error *err) {
    const cJSON *item;
    int listed = 0;
    cJSON_ArrayForEach(item, map) {
        const struct dt_st_ref *r = find_ref(s, item->string);
        if (!r)
            return dt_fail(err, "%s: weight_map puts tensor '%s' in %s, which does not hold it", index, item->string,
                           item->valuestring);
        const char *file = strrchr(s->files[r->file].path, '/') + 1;
        if (strcmp(file, item->valuestring) != 0)
            return dt_fail(err, "%s: weight_map puts tensor '%s' in %s, but it is in %s", index, item->string,
                           item->valuestring, file);
        listed++;
    }
    if (listed == s->n) return 0;
    for (int i = 0; i < s->n; i++)
        if (!cJSON_GetObjectItemCaseSensitive(map, s->refs[i].name))
            return dt_fail(err, "%s: holds tensor '%s', which %s does not list", s->files[s->refs[i].file].path,
                           s->refs[i].name, index);
    return dt_fail(err, "%s: weight_map and the shards disagree", index); /* unreachable: counts differ */
}

static int open_index(dt_st_set *s, const char *index, dt_error *err) {
    cJSON *root = json_load_file(index, err);
    if (!root) return -1;
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const char **names = NULL;
    int n = 0, rc = 0;
    if (!cJSON_IsObject(map)) rc = dt_fail(err, "%s: no \"weight_map\" object", index);
    if (rc == 0) rc = shard_names(index, map, &names, &n, err);
    if (rc == 0) rc = open_shards(s, index, names, n, err);
    if (rc == 0) rc = build_refs(s, err);
    if (rc == 0) rc = check_index(s, index, map, err);
    free(names);
    cJSON_Delete(root);
    return rc;
}

int dt_st_set_open(dt_st_set *s, const char *dir, dt_error *err) {
    memset(s, 0, sizeof *s);
    if (strlen(dir) >= sizeof s->dir) return dt_fail(err, "%.200s: path too long", dir);
    memcpy(s->dir, dir, strlen(dir) + 1);
    char single[4200], index[4200];
    if (join(single, sizeof single, dir, SINGLE_NAME, err) || join(index, sizeof index, dir, INDEX_NAME, err))
        return -1;
    int rc;
    if (exists(single)) { /* transformers looks for the single file first, and so do we */
        s->files = calloc(1, sizeof *s->files);
        if (!s->files) return dt_fail(err, "%s: out of memory", single);
        rc = dt_st_open(&s->files[0], single, err);
        if (rc == 0) s->n_files = 1;
        if (rc == 0) rc = build_refs(s, err);
    } else if (exists(index)) {
        s->sharded = 1;
        rc = open_index(s, index, err);
    } else {
        rc = dt_fail(err, "%s: not found, and no %s beside it", single, INDEX_NAME);
    }
    if (rc != 0) dt_st_set_close(s);
    return rc;
}

void dt_st_set_close(dt_st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) dt_st_close(&s->files[i]);
    free(s->files);
    free(s->refs);
    memset(s, 0, sizeof *s);
}

const dt_st_tensor *dt_st_set_find(const dt_st_set *s, const char *name, const dt_safetensors **file) {
    const struct dt_st_ref *r = find_ref(s, name);
    if (!r) return NULL;
    if (file) *file = &s->files[r->file];
    return r->t;
}

/* ---------------------------------------------------------------- writing */

/* Shard k of n, as transformers names it. */
static void shard_name(char *out, size_t n, int k, int total) {
    snprintf(out, n, "model-%05d-of-%05d.safetensors", k + 1, total);
}

/* first[k] = the first entry of shard k; returns the number of shards. */
static int plan_shards(const dt_st_entry *e, int n, uint64_t max_bytes, int *first) {
    int shards = 0;
    uint64_t used = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = dt_st_entry_bytes(&e[i]);
        if (shards == 0 || (max_bytes && used > 0 && used + b > max_bytes)) {
            first[shards++] = i;
            used = 0;
        }
        used += b;
    }
    if (shards == 0) first[shards++] = 0; /* no tensors: one empty file */
    first[shards] = n;
    return shards;
}

/* "model-KKKKK-of-NNNNN.safetensors" exactly: *k and *total get the two numbers. */
static int parse_shard_name(const char *name, int *k, int *total) {
    static const char pattern[] = "model-#####-of-#####.safetensors";
    if (strlen(name) != sizeof pattern - 1) return 0;
    int a = 0, b = 0;
    for (size_t i = 0; pattern[i]; i++) {
        if (pattern[i] != '#') {
            if (name[i] != pattern[i]) return 0;
        } else if (name[i] < '0' || name[i] > '9') {
            return 0;
        } else if (i < 11) {
            a = a * 10 + (name[i] - '0');
        } else {
            b = b * 10 + (name[i] - '0');
        }
    }
    *k = a;
    *total = b;
    return 1;
}

/* Removes model.safetensors, the index, or shards of another count: whatever a previous save
 * left that the new layout does not use. */
static void remove_stale(const char *dir, int shards) {
    char path[4200];
    if (shards > 1 && join(path, sizeof path, dir, SINGLE_NAME, NULL) == 0) unlink(path);
    if (shards == 1 && join(path, sizeof path, dir, INDEX_NAME, NULL) == 0) unlink(path);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int k, total;
        if (!parse_shard_name(de->d_name, &k, &total)) continue;
        if (shards > 1 && total == shards && k >= 1 && k <= shards) continue; /* one of ours */
        if (join(path, sizeof path, dir, de->d_name, NULL) == 0) unlink(path);
    }
    closedir(d);
}

static int cmp_entry_ptr(const void *a, const void *b) {
    return strcmp((*(const dt_st_entry *const *)a)->name, (*(const dt_st_entry *const *)b)->name);
}

static char *index_json(const dt_st_entry *e, int n, const int *first, int shards) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "metadata") : NULL;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += dt_st_entry_bytes(&e[i]);
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, total);
    int ok = meta && cJSON_AddRawToObject(meta, "total_size", num);
    cJSON *map = ok ? cJSON_AddObjectToObject(root, "weight_map") : NULL;
    ok = map != NULL;
    /* sorted by tensor name, as transformers writes it */
    const dt_st_entry **sorted = ok ? malloc((size_t)(n ? n : 1) * sizeof *sorted) : NULL;
    int *shard_of = ok ? malloc((size_t)(n ? n : 1) * sizeof *shard_of) : NULL;
    ok = sorted && shard_of;
    for (int k = 0; ok && k < shards; k++)
        for (int i = first[k]; i < first[k + 1]; i++) shard_of[i] = k;
    for (int i = 0; ok && i < n; i++) sorted[i] = &e[i];
    if (ok) qsort(sorted, (size_t)n, sizeof *sorted, cmp_entry_ptr);
    for (int i = 0; ok && i < n; i++) {
        char name[64];
        shard_name(name, sizeof name, shard_of[sorted[i] - e], shards);
        ok = cJSON_AddStringToObject(map, sorted[i]->name, name) != NULL;
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    free(sorted);
    free(shard_of);
    cJSON_Delete(root);
    return text;
}

static int write_shards(const char *dir, const dt_st_entry *e, int n, const int *first, int shards, dt_error *err) {
    dt_atomic_file *files = calloc((size_t)shards, sizeof *files);
    if (!files) return dt_fail(err, "%s: out of memory", dir);
    int rc = 0, staged = 0;
    for (int k = 0; k < shards && rc == 0; k++) {
        char name[64], path[4200];
        shard_name(name, sizeof name, k, shards);
        rc = join(path, sizeof path, dir, name, err);
        if (rc == 0) rc = dt_atomic_open(&files[k], path, err);
        if (rc == 0) {
            staged = k + 1;
            rc = st_write_stream(files[k].fp, path, e + first[k], first[k + 1] - first[k], err);
        }
        if (rc == 0) rc = atomic_finish(&files[k], err);
    }
    /* nothing is renamed until every shard is complete on disk */
    for (int k = 0; k < staged && rc == 0; k++) rc = atomic_rename(&files[k], err);
    if (rc != 0)
        for (int k = 0; k < staged; k++) dt_atomic_abort(&files[k]);
    free(files);
    if (rc != 0) return -1;
    char *text = index_json(e, n, first, shards);
    char path[4200];
    if (!text) return dt_fail(err, "%s: out of memory building %s", dir, INDEX_NAME);
    rc = join(path, sizeof path, dir, INDEX_NAME, err);
    if (rc == 0) rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

int dt_st_write_dir(const char *dir, const dt_st_entry *entries, int n, uint64_t max_shard_bytes, dt_error *err) {
    if (st_check_entries(dir, entries, n, err) != 0) return -1;
    int *first = malloc((size_t)(n + 2) * sizeof *first);
    if (!first) return dt_fail(err, "%s: out of memory", dir);
    int shards = plan_shards(entries, n, max_shard_bytes, first), rc;
    if (shards > MAX_SHARDS) {
        rc = dt_fail(err, "%s: %d shards would be needed (at most %d): raise the maximum shard size", dir, shards,
                     MAX_SHARDS);
    } else if (shards == 1) {
        char path[4200];
        rc = join(path, sizeof path, dir, SINGLE_NAME, err);
        if (rc == 0) rc = dt_st_write(path, entries, n, err);
    } else {
        rc = write_shards(dir, entries, n, first, shards, err);
    }
    if (rc == 0) remove_stale(dir, shards);
    free(first);
    return rc;
}
