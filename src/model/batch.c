/* batch.c — the batched step: rows of many sequences (each a slot with its own KV cache) through
 * the model together, every linear layer once over all rows.
 *
 * dt_decode_step is the simple kernel beside it (one row, a matrix-vector product per layer) and
 * tests hold the two together. What a batch changes is the linear layers: R rows cost one pass
 * over the weights instead of R, which is what makes serving many streams (and prefilling a
 * prompt) cheaper than decoding them one by one. The attention of each row runs over its own
 * slot's cache with the code dt_decode_step uses (kv_attention_task); up to CACHE_ROWS_MAX
 * consecutive rows of one sequence (a prompt chunk) share each read of the cache, with the same
 * bits per row as alone.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "internal.h"
#include "base/base.h"
#include "layers/kernels.h"
#include "layers/layers.h"
#include "model/model_quant.h"

struct dt_batch {
    int n_slots, ctx, max_rows;
    dt_kvcache **slots;          /* [n_slots] */
    size_t kv_bytes;
    /* activations of up to max_rows rows */
    float *x, *xn;               /* [R, C] residual stream and its normalised copy */
    float *q, *k, *v;            /* [R, H·hd], [R, KV·hd] × 2 */
    float *att;                  /* [R, H·hd] attention outputs (DIFF V2: the query heads) */
    float *att2;                 /* DIFF V2: [R, h·hd] the combined heads */
    float *lam;                  /* DIFF V2: [R, h] */
    float *proj;                 /* [R, C] o_proj / down_proj output */
    float *gate, *up;            /* [R, F] */
    float *xlast;                /* [R, C] normalised rows that want logits */
    void *qscratch;              /* quantised linear layers' scratch for R rows */
    int n_threads;
    float *scores;               /* [n_threads, 2, CACHE_ROWS_MAX, ctx] softmax maps of one attention task */
    int *group;                  /* [max_rows] first row of each run of consecutive rows of one slot */
};

static size_t count_of(size_t a, size_t b) { return a * b; }

dt_batch *dt_batch_create(const dt_model *m, int n_slots, int ctx, int max_rows, dt_kv_dtype kv, dt_error *err) {
    const dt_config *c = &m->cfg;
    if (n_slots < 1 || n_slots > 4096) {
        dt_fail(err, "batch: n_slots %d must be in 1..4096", n_slots);
        return NULL;
    }
    if (max_rows < 1 || max_rows > 1 << 16) {
        dt_fail(err, "batch: max_rows %d must be in 1..65536", max_rows);
        return NULL;
    }
    dt_batch *b = calloc(1, sizeof *b);
    if (!b) {
        dt_fail_oom(err, "batch: out of memory");
        return NULL;
    }
    b->n_slots = n_slots;
    b->ctx = ctx;
    b->max_rows = max_rows;
    b->slots = calloc((size_t)n_slots, sizeof *b->slots);
    if (!b->slots) goto oom;
    for (int s = 0; s < n_slots; s++) {
        if (!(b->slots[s] = dt_kvcache_create_with(m, ctx, kv, err))) {
            dt_batch_free(b);
            return NULL;
        }
        b->kv_bytes += dt_kvcache_bytes(b->slots[s]);
    }
    const size_t R = (size_t)max_rows, C = c->hidden_size, F = c->intermediate_size;
    const size_t qdim = (size_t)c->num_attention_heads * c->head_dim, kvdim = (size_t)c->num_key_value_heads * c->head_dim;
    const size_t h = (size_t)c->num_attention_heads / 2;
    b->x = calloc_aligned(count_of(R, C), sizeof(float));
    b->xn = calloc_aligned(count_of(R, C), sizeof(float));
    b->q = calloc_aligned(count_of(R, qdim), sizeof(float));
    b->k = calloc_aligned(count_of(R, kvdim), sizeof(float));
    b->v = calloc_aligned(count_of(R, kvdim), sizeof(float));
    b->att = calloc_aligned(count_of(R, qdim), sizeof(float));
    b->att2 = calloc_aligned(count_of(R, qdim), sizeof(float));
    b->lam = calloc_aligned(count_of(R, h ? h : 1), sizeof(float));
    b->proj = calloc_aligned(count_of(R, C), sizeof(float));
    b->gate = calloc_aligned(count_of(R, F), sizeof(float));
    b->up = calloc_aligned(count_of(R, F), sizeof(float));
    b->xlast = calloc_aligned(count_of(R, C), sizeof(float));
    b->qscratch = malloc(model_linear_scratch_bytes(m, max_rows));
    b->n_threads = omp_get_max_threads();
    b->scores = malloc(count_of((size_t)b->n_threads * 2 * CACHE_ROWS_MAX, (size_t)ctx) * sizeof(float));
    b->group = malloc(((size_t)max_rows + 1) * sizeof *b->group);
    if (!b->x || !b->xn || !b->q || !b->k || !b->v || !b->att || !b->att2 || !b->lam || !b->proj || !b->gate ||
        !b->up || !b->xlast || !b->qscratch || !b->scores || !b->group)
        goto oom;
    return b;
oom:
    dt_batch_free(b);
    dt_fail_oom(err, "batch: out of memory for %d slots of %d tokens and %d rows", n_slots, ctx, max_rows);
    return NULL;
}

void dt_batch_free(dt_batch *b) {
    if (!b) return;
    if (b->slots)
        for (int s = 0; s < b->n_slots; s++) dt_kvcache_free(b->slots[s]);
    free(b->slots);
    free(b->x);
    free(b->xn);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->att);
    free(b->att2);
    free(b->lam);
    free(b->proj);
    free(b->gate);
    free(b->up);
    free(b->xlast);
    free(b->qscratch);
    free(b->scores);
    free(b->group);
    free(b);
}

size_t dt_batch_kv_bytes(const dt_batch *b) { return b->kv_bytes; }

static int check_rows(const dt_model *m, const dt_batch *b, const dt_batch_row *rows, int n, dt_error *err) {
    if (n < 1 || n > b->max_rows) return dt_fail(err, "batch: %d rows (must be 1..%d)", n, b->max_rows);
    for (int r = 0; r < n; r++) {
        const dt_batch_row *w = &rows[r];
        if (w->slot < 0 || w->slot >= b->n_slots)
            return dt_fail(err, "batch: row %d: slot %d is outside 0..%d", r, w->slot, b->n_slots - 1);
        if (w->token < 0 || w->token >= m->cfg.vocab_size)
            return dt_fail(err, "batch: row %d: token id %d is out of range [0, %d)", r, w->token, m->cfg.vocab_size);
        if (w->pos < 0 || w->pos >= b->ctx)
            return dt_fail(err, "batch: row %d: position %d is outside the context 0..%d", r, w->pos, b->ctx - 1);
        /* a slot's rows in one step follow each other: the attention of each reads the ones before */
        int e = r - 1;
        while (e >= 0 && rows[e].slot != w->slot) e--;
        if (e >= 0 && rows[e].pos != w->pos - 1)
            return dt_fail(err, "batch: row %d: slot %d at position %d after its row %d at position %d "
                                "(a slot's rows must be consecutive positions)",
                           r, w->slot, w->pos, e, rows[e].pos);
        /* and its first row those fed before (positions never fed would be zeros, or another sequence's) */
        const int fed = kv_fed(b->slots[w->slot]);
        if (e < 0 && w->pos > fed)
            return dt_fail(err, "batch: row %d: slot %d at position %d after the %d positions it was fed (it goes "
                                "on from position %d, or back; position 0 starts it again)",
                           r, w->slot, w->pos, fed, fed);
    }
    return 0;
}

/* y[R, out] for every row through a float or quantised layer */
static void lin(const dt_model *m, dt_batch *b, int layer, int which, float *y, const float *x, int R) {
    model_linear(m, layer, which, y, x, R, b->qscratch);
}

int dt_batch_step(const dt_model *m, dt_batch *b, const dt_batch_row *rows, int n, float *logits, dt_error *err) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim, H = c->num_attention_heads;
    const int KV = c->num_key_value_heads, qdim = H * hd, kvdim = KV * hd, h = H / 2;
    const int v2 = c->arch == DT_ARCH_DIFF_V2;
    if (check_rows(m, b, rows, n, err) != 0) return -1;
    for (int r = 0; r < n; r++) kv_set_fed(b->slots[rows[r].slot], rows[r].pos + 1); /* nothing below fails */

    for (int r = 0; r < n; r++)
        memcpy(b->x + (size_t)r * C, m->w.embed_tokens + (size_t)rows[r].token * C, (size_t)C * sizeof(float));
    const int tasks = kv_attention_tasks(c);
    float *att_out = v2 ? b->att2 : b->att; /* kv_attention_task's output: V2 combines it into att */
    /* runs of up to CACHE_ROWS_MAX rows of one slot at consecutive positions (a prompt chunk) share
     * each read of the cache in one attention task; b->group[g] is run g's first row */
    int n_groups = 0;
    for (int r = 0; r < n; r++) {
        const int joins = n_groups && r - b->group[n_groups - 1] < CACHE_ROWS_MAX &&
                          rows[r].slot == rows[r - 1].slot && rows[r].pos == rows[r - 1].pos + 1;
        if (!joins) b->group[n_groups++] = r;
    }
    b->group[n_groups] = n;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const dt_layer_weights *w = &m->w.layers[l];
        float rstd[n];
        rmsnorm_forward(b->xn, rstd, b->x, w->input_layernorm, n, C, c->rms_norm_eps);
        model_linear_shared(m, l, (const int[]){LIN_Q, LIN_K, LIN_V}, (float *const[]){b->q, b->k, b->v}, 3, b->xn, n,
                            b->qscratch);
        for (int r = 0; r < n; r++) {
            float *q = b->q + (size_t)r * qdim, *k = b->k + (size_t)r * kvdim;
            if (c->position == DT_POS_ROPE) {
                rope_apply(q, 1, 1, H, hd, rows[r].pos, m->rope_inv_freq, +1);
                rope_apply(k, 1, 1, KV, hd, rows[r].pos, m->rope_inv_freq, +1);
            }
            kv_store(b->slots[rows[r].slot], l, rows[r].pos, kvdim, KV, k, b->v + (size_t)r * kvdim);
        }
        /* every row's keys and values are stored first, so a prompt chunk's rows see each other */
        const int n_tasks = n_groups * tasks;
        const size_t work = (size_t)n * tasks * decode_head_work(rows[n - 1].pos + 1, hd);
#pragma omp parallel for schedule(dynamic, 1) if (work > 4096)
        for (int t = 0; t < n_tasks; t++) {
            const int gi = t / tasks, task = t % tasks, r = b->group[gi], R = b->group[gi + 1] - r;
            const int me = omp_get_thread_num() < b->n_threads ? omp_get_thread_num() : 0;
            float *sc = b->scores + (size_t)me * 2 * CACHE_ROWS_MAX * b->ctx;
            kv_attention_task(m, b->slots[rows[r].slot], l, task, rows[r].pos + 1, R, b->q + (size_t)r * qdim,
                              (size_t)qdim, att_out + (size_t)r * qdim, (size_t)qdim, sc,
                              sc + (size_t)CACHE_ROWS_MAX * b->ctx, (size_t)b->ctx);
        }
        if (v2) { /* W_λ stays float in every scheme */
            if (w->lambda_proj) linear_forward(b->lam, b->xn, w->lambda_proj, n, C, h);
            diffv2_combine_forward_with(b->att, b->lam, b->lam, b->att2, n, h, hd, (int)c->v2_pairs, (int)c->v2_lambda);
        }
        lin(m, b, l, LIN_O, b->proj, b->att, n);
        for (size_t i = 0; i < (size_t)n * C; i++) b->x[i] += b->proj[i];

        rmsnorm_forward(b->xn, rstd, b->x, w->post_attention_layernorm, n, C, c->rms_norm_eps);
        model_linear_shared(m, l, (const int[]){LIN_GATE, LIN_UP}, (float *const[]){b->gate, b->up}, 2, b->xn, n,
                            b->qscratch);
        swiglu_forward(b->gate, b->gate, b->up, n, F);
        lin(m, b, l, LIN_DOWN, b->proj, b->gate, n);
        for (size_t i = 0; i < (size_t)n * C; i++) b->x[i] += b->proj[i];
    }
    /* the final norm and the LM head only for the rows whose logits are wanted */
    int n_want = 0;
    for (int r = 0; r < n; r++)
        if (rows[r].want_logits) memcpy(b->xn + (size_t)n_want++ * C, b->x + (size_t)r * C, (size_t)C * sizeof(float));
    if (n_want == 0) return 0;
    float rstd[n_want];
    rmsnorm_forward(b->xlast, rstd, b->xn, m->w.norm, n_want, C, c->rms_norm_eps);
    lin(m, b, c->num_hidden_layers, LIN_LM_HEAD, logits, b->xlast, n_want);
    return 0;
}
