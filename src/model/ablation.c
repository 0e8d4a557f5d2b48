/* ablation.c — the named model variants that `compare --ablations` and `train --ablation` build:
 * each short name turns a base config into the variant config, changing one thing. */
#include <stdio.h>
#include <string.h>

#include "difftrans.h"
#include "internal.h"
#include "layers/layers.h"

const char *dt_ablation_names(void) {
    return "rope,alibi,nope,softmax1,nonorm,fixedlambda,v2,v2-crossgroup,v2-nolambda,v2-nosigmoid,transformer,"
           "transformer-1.5h,transformer-2hd";
}

static int needs_diff(const dt_config *base, const char *name, dt_error *err) {
    if (base->arch == DT_ARCH_DIFF) return 0;
    return dt_fail(err, "ablation '%s' applies to diffllama only, not to %s", name, dt_arch_name(base->arch));
}

/* The V2 whose matched Transformer is the base's (a DIFF base's matched baseline has H heads of
 * hd): h = that head count, 2h query heads. A V2 base stays as it is, its V2 options included, so
 * that the v2-* names combine ("v2-crossgroup,v2-nolambda"). */
static void to_v2(dt_config *c, const dt_config *base) {
    if (base->arch != DT_ARCH_DIFF_V2) {
        c->num_attention_heads = 2 * base->num_attention_heads; /* a DIFF's H query heads = its Transformer's */
        c->v2_pairs = DT_V2_PAIRS_GROUP;
        c->v2_lambda = DT_V2_LAMBDA_SIGMOID;
    }
    c->arch = DT_ARCH_DIFF_V2;
    c->use_subln_weight = 0;
    c->no_head_norm = 0;
    c->fixed_lambda = 0;
}

/* The baseline Transformer of a base: its matched Transformer (dt_config_matched: 2h heads of hd
 * for a DIFF of h differential heads, h heads for a V2 of h output heads), a llama base as it is. */
static dt_config to_transformer(const dt_config *base) {
    if (base->arch == DT_ARCH_LLAMA) return *base;
    return dt_config_matched(base);
}

/* The base Transformer's H heads of hd → `heads` heads of `head_dim`, with kv heads `kv`. */
static int reshape_heads(dt_config *c, const char *name, int heads, int kv, int head_dim, dt_error *err) {
    if (heads <= 0 || kv <= 0 || heads % kv != 0)
        return dt_fail(err, "ablation '%s': %d heads over %d kv heads do not divide evenly", name, heads, kv);
    c->num_attention_heads = heads;
    c->num_key_value_heads = kv;
    c->head_dim = head_dim;
    return 0;
}

/* transformer-1.5h: the V2 write-up's comparison. Its h is the baseline Transformer's head count
 * (DIFF V2 has 2h query heads and h output heads there), so this Transformer has 1.5× the heads of
 * the base's Transformer, of the same hd: q_proj + o_proj of 2·1.5h·hd rows, the (2h + h)·hd of
 * DIFF V2 (3h heads for a DIFF of h differential heads). Its kv heads stay the base's when they
 * divide the new head count (then its parameters are DIFF V2's less W_λ, and its KV cache V2's),
 * else they grow by the same 1.5 (the same query heads per kv head: multi-head stays multi-head).
 * One of the two always fits an even H: an odd KV divides H/2 and so 1.5·H; an even KV that does
 * not divide 1.5·H gives 1.5·KV, which divides 1.5·H as KV divides H. */
static int transformer_15h(dt_config *c, const char *name, dt_error *err) {
    const int H = c->num_attention_heads, KV = c->num_key_value_heads;
    if (H % 2 != 0)
        return dt_fail(err,
                       "ablation '%s': 1.5 × %d heads is not a whole number of heads (the base Transformer needs an "
                       "even num_attention_heads)",
                       name, H);
    const int heads = 3 * H / 2;
    return reshape_heads(c, name, heads, heads % KV == 0 ? KV : 3 * KV / 2, c->head_dim, err);
}

/* transformer-2hd: half the heads, each twice as wide (h heads of 2·hd for a DIFF of h
 * differential heads): the same attention width, parameters and KV cache bytes as the base's
 * Transformer, so only the head count and width change. The kv heads halve with the heads. */
static int transformer_2hd(dt_config *c, const char *name, dt_error *err) {
    const int H = c->num_attention_heads, KV = c->num_key_value_heads;
    if (H % 2 != 0 || KV % 2 != 0)
        return dt_fail(err,
                       "ablation '%s': halving %d heads over %d kv heads needs both even (heads of twice the width "
                       "keep the attention width only then)",
                       name, H, KV);
    return reshape_heads(c, name, H / 2, KV / 2, 2 * c->head_dim, err);
}

int dt_config_ablation(dt_config *out, const dt_config *base, const char *name, dt_error *err) {
    if (!name) return dt_fail(err, "ablation: no name given (choose from %s)", dt_ablation_names());
    dt_config c = *base;
    if (strcmp(name, "rope") == 0) {
        c.position = DT_POS_ROPE;
    } else if (strcmp(name, "alibi") == 0) {
        c.position = DT_POS_ALIBI;
    } else if (strcmp(name, "nope") == 0) {
        c.position = DT_POS_NONE;
    } else if (strcmp(name, "softmax1") == 0) {
        c.softmax1 = 1;
    } else if (strcmp(name, "nonorm") == 0) {
        if (needs_diff(base, name, err)) return -1;
        c.no_head_norm = 1;
        c.use_subln_weight = 0; /* the norm's weight goes with the norm */
    } else if (strcmp(name, "fixedlambda") == 0) {
        if (needs_diff(base, name, err)) return -1;
        c.fixed_lambda = 1;
    } else if (strcmp(name, "v2") == 0) {
        to_v2(&c, base);
    } else if (strcmp(name, "v2-crossgroup") == 0) {
        to_v2(&c, base);
        c.v2_pairs = DT_V2_PAIRS_CROSS;
    } else if (strcmp(name, "v2-nolambda") == 0) {
        to_v2(&c, base);
        c.v2_lambda = DT_V2_LAMBDA_NONE;
    } else if (strcmp(name, "v2-nosigmoid") == 0) {
        to_v2(&c, base);
        c.v2_lambda = DT_V2_LAMBDA_LINEAR;
    } else if (strcmp(name, "transformer") == 0) {
        c = to_transformer(base);
    } else if (strcmp(name, "transformer-1.5h") == 0) {
        c = to_transformer(base);
        if (transformer_15h(&c, name, err) != 0) return -1;
    } else if (strcmp(name, "transformer-2hd") == 0) {
        c = to_transformer(base);
        if (transformer_2hd(&c, name, err) != 0) return -1;
    } else {
        return dt_fail(err, "unknown ablation '%s' (choose from %s)", name, dt_ablation_names());
    }
    if (dt_config_validate(&c, name, err) != 0) return -1;
    *out = c;
    return 0;
}

void dt_config_describe(const dt_config *c, char *buf, size_t n) {
    static const char *const positions[] = {"", "+alibi", "+nope"};
    static const char *const lambdas[] = {"", "+nolambda", "+nosigmoid"};
    if (n == 0) return;
    snprintf(buf, n, "%s%s%s%s%s%s%s%s", dt_arch_name(c->arch),
             (unsigned)c->position < 3 ? positions[c->position] : "+?", c->softmax1 ? "+softmax1" : "",
             c->no_head_norm ? "+nonorm" : "", c->fixed_lambda ? "+fixedlambda" : "",
             c->use_subln_weight ? "+subln" : "", c->v2_pairs == DT_V2_PAIRS_CROSS ? "+crossgroup" : "",
             (unsigned)c->v2_lambda < 3 ? lambdas[c->v2_lambda] : "+?");
}

int dt_config_query_head(const dt_config *c, int j, int which) {
    const int H = c->num_attention_heads;
    if (c->arch == DT_ARCH_LLAMA) return j >= 0 && j < H ? j : -1;
    if (j < 0 || j >= H / 2 || which < 0 || which > 1) return -1;
    if (c->arch == DT_ARCH_DIFF || c->v2_pairs == DT_V2_PAIRS_CROSS) return j + which * (H / 2);
    return 2 * j + which;
}

int config_head_pairing(const dt_config *c) {
    if (c->arch == DT_ARCH_LLAMA) return HEADS_UNPAIRED;
    if (c->arch == DT_ARCH_DIFF || c->v2_pairs == DT_V2_PAIRS_CROSS) return HEADS_PAIR_HALF;
    return HEADS_PAIR_ADJACENT;
}
