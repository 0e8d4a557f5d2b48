/* shards.c — a checkpoint's weights as one model.safetensors, or as Hugging Face shards
 * (model-00001-of-00003.safetensors, ...) named by model.safetensors.index.json:
 *
 *   {"metadata": {"total_parameters": N, "total_size": BYTES}, "weight_map": {"tensor name": "shard file name", ...}}
 *
 * Reading treats the index as a claim to verify, not a fact: every tensor it lists must be in
 * the shard it names, every tensor of every shard must be listed, no tensor may be in two shards,
 * a shard name must be a plain file name in the model's directory, and the index and every shard
 * must be regular files (a FIFO would block the reader). Writing follows save_pretrained, whose
 * split is huggingface_hub's split_state_dict_into_shards_factory: tensors are taken in the order
 * given (the state dict's: st_entries_state_dict_order), a tensor larger than the limit gets a
 * shard of its own at once while the current shard keeps filling, the current shard is closed
 * when the next tensor would take it past the limit, and shards are numbered in the order they
 * were closed; one file without an index when everything fits. All shards are written under
 * temporary names before any is renamed into place, and files of an earlier save that the new one
 * does not overwrite are removed, so that the directory never mixes two checkpoints.
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
    if (!s->refs) return dt_fail_oom(err, "%s: out of memory", s->dir);
    size_t k = 0;
    for (int f = 0; f < s->n_files; f++)
        for (int i = 0; i < s->files[f].n; i++)
            s->refs[k++] = (struct dt_st_ref){s->files[f].tensors[i].name, f, &s->files[f].tensors[i]};
    qsort(s->refs, total, sizeof *s->refs, cmp_ref);
    s->n = (int)total;
    for (size_t i = 1; i < total; i++)
        if (strcmp(s->refs[i - 1].name, s->refs[i].name) == 0)
            return dt_fail_format(err, "%s: tensor '%s' is in two shards: %s and %s", s->dir, s->refs[i].name,
                                  s->files[s->refs[i - 1].file].path, s->files[s->refs[i].file].path);
    return 0;
}

static const struct dt_st_ref *find_ref(const dt_st_set *s, const char *name) {
    struct dt_st_ref key = {name, 0, NULL};
    return s->n ? bsearch(&key, s->refs, (size_t)s->n, sizeof key, cmp_ref) : NULL;
}

/* A shard must be a file of the model's directory: no path separators, no "." or "..". */
static int valid_shard_name(const char *name) {
    /* (past NAME_MAX it is no file name either: the path built from it would be refused as too long) */
    return name[0] && strlen(name) <= 255 && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
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
        return dt_fail_oom(err, "%s: out of memory", index);
    }
    int k = 0, rc = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, map) {
        if (!cJSON_IsString(item)) {
            rc = dt_fail_format(err, "%s: weight_map['%s'] is not a file name string", index, item->string);
            break;
        }
        if (!valid_shard_name(item->valuestring)) {
            rc = dt_fail_format(err, "%s: weight_map['%s'] names '%s', which is not a file name in the model directory",
                                index, item->string, item->valuestring);
            break;
        }
        keys[k] = item->string;
        all[k++] = item->valuestring;
    }
    if (rc == 0 && k == 0) rc = dt_fail_format(err, "%s: weight_map is empty", index);
    if (rc == 0) {
        qsort(keys, (size_t)k, sizeof *keys, cmp_str);
        for (int i = 1; i < k && rc == 0; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0)
                rc = dt_fail_format(err, "%s: weight_map lists tensor '%s' twice", index, keys[i]);
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
    if (n > MAX_SHARDS) return dt_fail_format(err, "%s: %d shards (at most %d)", index, n, MAX_SHARDS);
    s->files = calloc((size_t)n, sizeof *s->files);
    if (!s->files) return dt_fail_oom(err, "%s: out of memory", index);
    for (int i = 0; i < n; i++) {
        char path[4200];
        if (dt_pathf(path, sizeof path, err, "%s/%s", s->dir, names[i]) != 0) return -1;
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
            return dt_fail_format(err, "%s: weight_map puts tensor '%s' in %s, which does not hold it", index,
                                  item->string, item->valuestring);
        const char *file = strrchr(s->files[r->file].path, '/') + 1;
        if (strcmp(file, item->valuestring) != 0)
            return dt_fail_format(err, "%s: weight_map puts tensor '%s' in %s, but it is in %s", index, item->string,
                                  item->valuestring, file);
        listed++;
    }
    if (listed == s->n) return 0;
    for (int i = 0; i < s->n; i++)
        if (!cJSON_GetObjectItemCaseSensitive(map, s->refs[i].name))
            return dt_fail_format(err, "%s: holds tensor '%s', which %s does not list", s->files[s->refs[i].file].path,
                                  s->refs[i].name, index);
    return dt_fail_format(err, "%s: weight_map and the shards disagree", index); /* unreachable: counts differ */
}

static int open_index(dt_st_set *s, const char *index, dt_error *err) {
    if (st_check_regular(index, err) != 0) return -1; /* json_load_file opens without O_NONBLOCK */
    cJSON *root = json_load_file(index, err);
    if (!root) return -1;
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const char **names = NULL;
    int n = 0, rc = 0;
    if (!cJSON_IsObject(map)) rc = dt_fail_format(err, "%s: no \"weight_map\" object", index);
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
    if (dt_pathf(single, sizeof single, err, "%s/%s", dir, SINGLE_NAME) ||
        dt_pathf(index, sizeof index, err, "%s/%s", dir, INDEX_NAME))
        return -1;
    int rc;
    if (exists(single)) { /* transformers looks for the single file first, and so do we */
        s->files = calloc(1, sizeof *s->files);
        if (!s->files) return dt_fail_oom(err, "%s: out of memory", single);
        rc = dt_st_open(&s->files[0], single, err);
        if (rc == 0) s->n_files = 1;
        if (rc == 0) rc = build_refs(s, err);
    } else if (exists(index)) {
        s->sharded = 1;
        rc = open_index(s, index, err);
    } else {
        rc = dt_fail_io(err, "%s: not found, and no %s beside it", single, INDEX_NAME);
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

/* ---------------------------------------------------------------- state-dict order */

/* What torch's Module.state_dict lists for a LlamaForCausalLM / DiffLlamaForCausalLM, from
 * transformers' modeling_llama.py and modeling_diffllama.py: a module's own parameters first (in
 * the order __init__ registers them), then each child module's entries (in registration order),
 * recursively. So DiffLlamaAttention's lambda_q1, lambda_k1, lambda_q2, lambda_k2 come before
 * q_proj even though __init__ creates the projections first, and a decoder layer lists self_attn,
 * mlp, input_layernorm, post_attention_layernorm. Non-persistent buffers (rotary inv_freq) are not
 * in a state dict, nor is a tied lm_head once save_pretrained has removed it. Ours: subln (the
 * per-head norm's weight, a child module like the reference implementation's) and lambda_proj
 * (DIFF V2) follow o_proj. */
typedef enum { M_ROOT, M_MODEL, M_LAYERS, M_LAYER, M_ATTN, M_MLP, M_LEAF } module_kind;

struct module_table {
    const char *const *params;    /* own parameters, NULL-terminated */
    const char *const *children;  /* child modules, NULL-terminated */
    const module_kind *child_kind;
};

static const char *const NO_NAMES[] = {NULL};
static const char *const LEAF_PARAMS[] = {"weight", "bias", NULL}; /* Linear, Embedding, RMSNorm */
static const char *const ROOT_CHILDREN[] = {"model", "lm_head", NULL};
static const module_kind ROOT_KINDS[] = {M_MODEL, M_LEAF};
static const char *const MODEL_CHILDREN[] = {"embed_tokens", "layers", "norm", NULL};
static const module_kind MODEL_KINDS[] = {M_LEAF, M_LAYERS, M_LEAF};
static const char *const LAYER_CHILDREN[] = {"self_attn", "mlp", "input_layernorm", "post_attention_layernorm",
                                             NULL};
static const module_kind LAYER_KINDS[] = {M_ATTN, M_MLP, M_LEAF, M_LEAF};
static const char *const ATTN_PARAMS[] = {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2", NULL};
static const char *const ATTN_CHILDREN[] = {"q_proj", "k_proj", "v_proj", "o_proj", "subln", "lambda_proj", NULL};
static const module_kind ATTN_KINDS[] = {M_LEAF, M_LEAF, M_LEAF, M_LEAF, M_LEAF, M_LEAF};
static const char *const MLP_CHILDREN[] = {"gate_proj", "up_proj", "down_proj", NULL};
static const module_kind MLP_KINDS[] = {M_LEAF, M_LEAF, M_LEAF};

static const struct module_table MODULES[] = {
    [M_ROOT] = {NO_NAMES, ROOT_CHILDREN, ROOT_KINDS},
    [M_MODEL] = {NO_NAMES, MODEL_CHILDREN, MODEL_KINDS},
    [M_LAYERS] = {NO_NAMES, NO_NAMES, NULL}, /* children are numbered: compared as numbers */
    [M_LAYER] = {NO_NAMES, LAYER_CHILDREN, LAYER_KINDS},
    [M_ATTN] = {ATTN_PARAMS, ATTN_CHILDREN, ATTN_KINDS},
    [M_MLP] = {NO_NAMES, MLP_CHILDREN, MLP_KINDS},
    [M_LEAF] = {LEAF_PARAMS, NO_NAMES, NULL},
};

/* One dot-separated component of a name; leaf: the last one (a parameter, not a module). */
struct component {
    const char *s;
    size_t len;
    int leaf;
};

static struct component next_component(const char *s) {
    const char *dot = strchr(s, '.');
    return (struct component){s, dot ? (size_t)(dot - s) : strlen(s), dot == NULL};
}

static int rank_in(const char *const *names, struct component c) {
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == c.len && memcmp(names[i], c.s, c.len) == 0) return i;
    return -1;
}

static int all_digits(struct component c) {
    if (c.len == 0) return 0;
    for (size_t i = 0; i < c.len; i++)
        if (c.s[i] < '0' || c.s[i] > '9') return 0;
    return 1;
}

/* Components nothing above knows: numbers (a ModuleList's indices, registered counting up) by
 * value and before words; words in byte order; a total order, so that the sort is deterministic. */
static int cmp_unknown(struct component a, struct component b) {
    int da = all_digits(a), db = all_digits(b);
    if (da != db) return da ? -1 : 1;
    if (da) {
        struct component x = a, y = b;
        while (x.len > 1 && x.s[0] == '0') x.s++, x.len--;
        while (y.len > 1 && y.s[0] == '0') y.s++, y.len--;
        if (x.len != y.len) return x.len < y.len ? -1 : 1;
        int c = memcmp(x.s, y.s, x.len);
        if (c) return c;
    }
    int c = memcmp(a.s, b.s, a.len < b.len ? a.len : b.len);
    if (c) return c;
    return (a.len > b.len) - (a.len < b.len);
}

/* Walks both names down the module tree; at each level: own parameters before child modules,
 * known names in registration order, unknown ones after the known ones of their kind (cmp_unknown
 * among themselves); under an unknown module only "weight" before "bias" is known. */
static int cmp_state_dict(const void *pa, const void *pb) {
    const char *a = ((const dt_st_entry *)pa)->name, *b = ((const dt_st_entry *)pb)->name;
    module_kind kind = M_ROOT;
    for (;;) {
        struct component ca = next_component(a), cb = next_component(b);
        if (ca.leaf != cb.leaf) return ca.leaf ? -1 : 1;
        const struct module_table *m = &MODULES[kind];
        const char *const *names = ca.leaf ? m->params : m->children;
        int ra = rank_in(names, ca), rb = rank_in(names, cb);
        if (ra != rb) {
            if (ra < 0 || rb < 0) return ra < 0 ? 1 : -1;
            return ra < rb ? -1 : 1;
        }
        if (ra < 0) {
            int c = cmp_unknown(ca, cb);
            if (c) return c;
        }
        if (ca.leaf) return 0; /* the same name */
        kind = ra >= 0 ? m->child_kind[ra] : (kind == M_LAYERS && all_digits(ca)) ? M_LAYER : M_LEAF;
        a = ca.s + ca.len + 1;
        b = cb.s + cb.len + 1;
    }
}

void st_entries_state_dict_order(dt_st_entry *entries, int n) {
    /* distinct names compare unequal, so qsort's lack of stability does not matter */
    if (entries && n > 1) qsort(entries, (size_t)n, sizeof *entries, cmp_state_dict);
}

/* ---------------------------------------------------------------- writing */

/* Shard k of n, as transformers names it. */
static void shard_name(char *out, size_t n, int k, int total) {
    snprintf(out, n, "model-%05d-of-%05d.safetensors", k + 1, total);
}

/* huggingface_hub's split: shard_of[i] = the shard of entry i; returns the number of shards
 * (max_bytes 0: no limit, one shard; no entries: one empty shard). pending[n] is scratch for the
 * members of the shard being filled, which get their number only when it is closed, after any
 * larger-than-the-limit tensor met meanwhile. */
static int plan_shards(const dt_st_entry *e, int n, uint64_t max_bytes, int *shard_of, int *pending) {
    int shards = 0, np = 0;
    uint64_t used = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = dt_st_entry_bytes(&e[i]);
        if (max_bytes && b > max_bytes) {
            shard_of[i] = shards++;
            continue;
        }
        if (max_bytes && used + b > max_bytes) { /* np > 0 here: b alone fits */
            for (int k = 0; k < np; k++) shard_of[pending[k]] = shards;
            shards++;
            np = 0;
            used = 0;
        }
        pending[np++] = i;
        used += b;
    }
    if (np > 0 || shards == 0) {
        for (int k = 0; k < np; k++) shard_of[pending[k]] = shards;
        shards++;
    }
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
    if (shards > 1 && dt_pathf(path, sizeof path, NULL, "%s/%s", dir, SINGLE_NAME) == 0) unlink(path);
    if (shards == 1 && dt_pathf(path, sizeof path, NULL, "%s/%s", dir, INDEX_NAME) == 0) unlink(path);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int k, total;
        if (!parse_shard_name(de->d_name, &k, &total)) continue;
        if (shards > 1 && total == shards && k >= 1 && k <= shards) continue; /* one of ours */
        if (dt_pathf(path, sizeof path, NULL, "%s/%s", dir, de->d_name) == 0) unlink(path);
    }
    closedir(d);
}

/* Text built in two passes: with p == NULL only n is counted, then the same calls fill p. */
struct text {
    char *p;
    size_t n;
};

static void put(struct text *t, const char *s, size_t len) {
    if (t->p) memcpy(t->p + t->n, s, len);
    t->n += len;
}

static void puts_(struct text *t, const char *s) { put(t, s, strlen(s)); }

/* A JSON string as Python's json.dumps writes it (ensure_ascii): \" \\ \n \r \t \b \f, other
 * control characters and everything past ASCII as \uXXXX (astral characters as surrogate pairs).
 * s is valid UTF-8: st_check_entries refused any name that is not. */
static void put_json_string(struct text *t, const char *s) {
    const uint8_t *u = (const uint8_t *)s;
    puts_(t, "\"");
    while (*u) {
        char buf[16];
        uint32_t c = *u;
        int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (len > 1) {
            c &= 0x3Fu >> (len - 1);
            for (int k = 1; k < len; k++) c = (c << 6) | (u[k] & 0x3Fu);
        }
        u += len;
        if (c == '"') puts_(t, "\\\"");
        else if (c == '\\') puts_(t, "\\\\");
        else if (c == '\n') puts_(t, "\\n");
        else if (c == '\r') puts_(t, "\\r");
        else if (c == '\t') puts_(t, "\\t");
        else if (c == '\b') puts_(t, "\\b");
        else if (c == '\f') puts_(t, "\\f");
        else if (c >= 0x20 && c < 0x7F) {
            buf[0] = (char)c;
            put(t, buf, 1);
        } else if (c < 0x10000) {
            snprintf(buf, sizeof buf, "\\u%04x", (unsigned)c);
            puts_(t, buf);
        } else {
            c -= 0x10000;
            snprintf(buf, sizeof buf, "\\u%04x\\u%04x", (unsigned)(0xD800 + (c >> 10)), (unsigned)(0xDC00 + (c & 0x3FF)));
            puts_(t, buf);
        }
    }
    puts_(t, "\"");
}

struct named_shard {
    const char *name;
    int shard;
};

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const struct named_shard *)a)->name, ((const struct named_shard *)b)->name);
}

/* The index as save_pretrained writes it: json.dumps(index, indent=2, sort_keys=True), with
 * metadata {"total_parameters": elements of all tensors (num_parameters(); our tensors are exactly
 * the model's parameters), "total_size": their bytes}. write_text_atomic adds the final newline
 * save_pretrained writes too. NULL when out of memory; free(). */
static char *index_json(const dt_st_entry *e, int n, const int *shard_of, int shards) {
    uint64_t params = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (uint64_t)e[i].shape[d]; /* bounded: checked */
        params += numel;
        bytes += dt_st_entry_bytes(&e[i]);
    }
    struct named_shard *sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) return NULL;
    for (int i = 0; i < n; i++) sorted[i] = (struct named_shard){e[i].name, shard_of[i]};
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_named); /* names are distinct */
    struct text t = {NULL, 0};
    for (int pass = 0; pass < 2; pass++) {
        char num[96];
        t.n = 0;
        snprintf(num, sizeof num, "%" PRIu64 ",\n    \"total_size\": %" PRIu64 "\n", params, bytes);
        puts_(&t, "{\n  \"metadata\": {\n    \"total_parameters\": ");
        puts_(&t, num);
        puts_(&t, "  },\n  \"weight_map\": {\n");
        for (int i = 0; i < n; i++) {
            char file[64];
            shard_name(file, sizeof file, sorted[i].shard, shards);
            puts_(&t, "    ");
            put_json_string(&t, sorted[i].name);
            puts_(&t, ": ");
            put_json_string(&t, file);
            puts_(&t, i + 1 < n ? ",\n" : "\n");
        }
        puts_(&t, "  }\n}");
        put(&t, "", 1); /* the NUL */
        if (pass == 0 && !(t.p = malloc(t.n))) break;
    }
    free(sorted);
    return t.p;
}

static int write_shards(const char *dir, const dt_st_entry *e, int n, const int *shard_of, int shards,
                        dt_error *err) {
    dt_atomic_file *files = calloc((size_t)shards, sizeof *files);
    dt_st_entry *members = malloc((size_t)(n ? n : 1) * sizeof *members);
    int *first = malloc((size_t)(shards + 1) * sizeof *first);
    int rc = 0, staged = 0;
    if (!files || !members || !first) rc = dt_fail_oom(err, "%s: out of memory", dir);
    /* each shard's entries together, in the order given (st_write_stream orders them in the file) */
    if (rc == 0) {
        for (int k = 0; k <= shards; k++) first[k] = 0;
        for (int i = 0; i < n; i++) first[shard_of[i] + 1]++;
        for (int k = 0; k < shards; k++) first[k + 1] += first[k];
        int *fill = calloc((size_t)shards, sizeof *fill);
        if (!fill) rc = dt_fail_oom(err, "%s: out of memory", dir);
        for (int i = 0; rc == 0 && i < n; i++) members[first[shard_of[i]] + fill[shard_of[i]]++] = e[i];
        free(fill);
    }
    for (int k = 0; k < shards && rc == 0; k++) {
        char name[64], path[4200];
        shard_name(name, sizeof name, k, shards);
        rc = dt_pathf(path, sizeof path, err, "%s/%s", dir, name);
        if (rc == 0) rc = dt_atomic_open(&files[k], path, err);
        if (rc == 0) {
            staged = k + 1;
            rc = st_write_stream(files[k].fp, path, members + first[k], first[k + 1] - first[k], err);
        }
        if (rc == 0) rc = atomic_finish(&files[k], err);
    }
    /* nothing is renamed until every shard is complete on disk */
    for (int k = 0; k < staged && rc == 0; k++) rc = atomic_rename(&files[k], err);
    if (rc != 0)
        for (int k = 0; k < staged; k++) dt_atomic_abort(&files[k]);
    free(files);
    free(members);
    free(first);
    if (rc != 0) return -1;
    char *text = index_json(e, n, shard_of, shards);
    char path[4200];
    if (!text) return dt_fail_oom(err, "%s: out of memory building %s", dir, INDEX_NAME);
    rc = dt_pathf(path, sizeof path, err, "%s/%s", dir, INDEX_NAME);
    if (rc == 0) rc = write_text_atomic(path, text, err);
    free(text);
    return rc;
}

int dt_st_write_dir(const char *dir, const dt_st_entry *entries, int n, uint64_t max_shard_bytes, dt_error *err) {
    if (st_check_entries(dir, entries, n, err) != 0) return -1;
    int *shard_of = malloc((size_t)(n ? n : 1) * sizeof *shard_of);
    int *pending = malloc((size_t)(n ? n : 1) * sizeof *pending);
    if (!shard_of || !pending) {
        free(shard_of);
        free(pending);
        return dt_fail_oom(err, "%s: out of memory", dir);
    }
    int shards = plan_shards(entries, n, max_shard_bytes, shard_of, pending), rc;
    free(pending);
    if (shards > MAX_SHARDS) {
        rc = dt_fail(err, "%s: %d shards would be needed (at most %d): raise the maximum shard size", dir, shards,
                     MAX_SHARDS);
    } else if (shards == 1) {
        char path[4200];
        rc = dt_pathf(path, sizeof path, err, "%s/%s", dir, SINGLE_NAME);
        if (rc == 0) rc = dt_st_write(path, entries, n, err);
    } else {
        rc = write_shards(dir, entries, n, shard_of, shards, err);
    }
    if (rc == 0) remove_stale(dir, shards);
    free(shard_of);
    return rc;
}
