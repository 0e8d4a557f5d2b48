/* ablation.c — the named model variants that `compare --ablations` trains side by side: each
 * short name turns a base config into the variant config, changing one thing. */
#include <stdio.h>
#include <string.h>

#include "difftrans.h"

const char *dt_ablation_names(void) { return "rope,alibi,nope,softmax1,nonorm,fixedlambda,v2"; }

static int needs_diff(const dt_config *base, const char *name, dt_error *err) {
    if (base->arch == DT_ARCH_DIFF) return 0;
    return dt_fail(err, "ablation '%s' applies to diffllama only, not to %s", name, dt_arch_name(base->arch));
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
        /* The V2 whose matched Transformer is the base's (a DIFF base's matched baseline has H
         * heads of hd): h = that head count, 2h query heads. */
        if (base->arch != DT_ARCH_DIFF_V2) c.num_attention_heads = 2 * base->num_attention_heads;
        c.arch = DT_ARCH_DIFF_V2;
        c.use_subln_weight = 0;
        c.no_head_norm = 0;
        c.fixed_lambda = 0;
    } else {
        return dt_fail(err, "unknown ablation '%s' (choose from %s)", name, dt_ablation_names());
    }
    if (dt_config_validate(&c, name, err) != 0) return -1;
    *out = c;
    return 0;
}

void dt_config_describe(const dt_config *c, char *buf, size_t n) {
    static const char *const positions[] = {"", "+alibi", "+nope"};
    if (n == 0) return;
    snprintf(buf, n, "%s%s%s%s%s%s", dt_arch_name(c->arch),
             (unsigned)c->position < 3 ? positions[c->position] : "+?", c->softmax1 ? "+softmax1" : "",
             c->no_head_norm ? "+nonorm" : "", c->fixed_lambda ? "+fixedlambda" : "",
             c->use_subln_weight ? "+subln" : "");
}
