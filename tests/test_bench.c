/* test_bench.c — the benchmark's model and options (dt_bench_config, dt_bench_defaults): the
 * preset's fields around the given sizes, the derived widths, the context the measurements
 * need, refusals that name the config's keys, and the read-bandwidth bound against decoding. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans_bench.h"

static void test_defaults(void **state) {
    (void)state;
    dt_bench_options o;
    memset(&o, 0x5a, sizeof o); /* every field is set, none left over */
    dt_bench_defaults(&o);
    assert_int_equal(o.batch, 8);
    assert_int_equal(o.seq, 256);
    assert_int_equal(o.steps, 5);
    assert_int_equal(o.decode_tokens, 64);
    assert_true(o.train && o.prefill && o.decode);
    assert_int_equal(o.profile, 0);
    assert_int_equal(o.quant, DT_QUANT_NONE);
    assert_int_equal(o.quant_lm_head, 0);
    assert_true(o.seed == 1234);
    assert_null(o.progress);
    dt_bench_sizes s;
    memset(&s, 0x5a, sizeof s);
    dt_bench_sizes_default(&s);
    assert_int_equal(s.hidden_size, 256);
    assert_int_equal(s.num_hidden_layers, 4);
    assert_int_equal(s.num_attention_heads, 8);
    assert_int_equal(s.num_key_value_heads, 0);
    assert_int_equal(s.head_dim, 0);
    assert_int_equal(s.intermediate_size, 704);
    assert_int_equal(s.vocab_size, 256);
}

/* The sizes given, the widths derived, everything else as a preset has it. */
static void test_config_from_sizes(void **state) {
    (void)state;
    dt_bench_sizes s;
    dt_bench_options o;
    dt_bench_sizes_default(&s);
    dt_bench_defaults(&o);
    s.hidden_size = 96;
    s.num_hidden_layers = 3;
    s.num_attention_heads = 6;
    s.intermediate_size = 200;
    s.vocab_size = 300;
    dt_config c, preset;
    dt_error err;
    if (dt_bench_config(DT_ARCH_DIFF, &s, &o, &c, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(dt_config_preset(&preset, "tiny", DT_ARCH_DIFF, &err), 0);
    assert_int_equal(c.arch, DT_ARCH_DIFF);
    assert_int_equal(c.hidden_size, 96);
    assert_int_equal(c.num_hidden_layers, 3);
    assert_int_equal(c.num_attention_heads, 6);
    assert_int_equal(c.num_key_value_heads, 6); /* 0: as many as query heads */
    assert_int_equal(c.head_dim, 16);           /* 0: hidden_size / heads */
    assert_int_equal(c.intermediate_size, 200);
    assert_int_equal(c.vocab_size, 300);
    assert_int_equal(c.max_position_embeddings, 256); /* seq 256 > 64 decode tokens + 1 */
    assert_true(c.rms_norm_eps == preset.rms_norm_eps);
    assert_true(c.rope_theta == preset.rope_theta);
    assert_true(c.lambda_std_dev == preset.lambda_std_dev);
    assert_int_equal(c.tie_word_embeddings, preset.tie_word_embeddings);
    assert_int_equal(c.special.bos_token_id, -1);
    assert_int_equal(c.special.n_eos, 0);
    /* given widths are kept */
    s.num_key_value_heads = 2;
    s.head_dim = 8;
    if (dt_bench_config(DT_ARCH_LLAMA, &s, &o, &c, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(c.arch, DT_ARCH_LLAMA);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 8);
}

/* The context holds the prefill batch's sequences and the decoding stream, whichever is longer. */
static void test_context_length(void **state) {
    (void)state;
    dt_bench_sizes s;
    dt_bench_options o;
    dt_bench_sizes_default(&s);
    dt_bench_defaults(&o);
    dt_config c;
    dt_error err;
    o.seq = 16;
    o.decode_tokens = 100;
    assert_int_equal(dt_bench_config(DT_ARCH_DIFF, &s, &o, &c, &err), 0);
    assert_int_equal(c.max_position_embeddings, 101);
    o.seq = 101;
    assert_int_equal(dt_bench_config(DT_ARCH_DIFF, &s, &o, &c, &err), 0);
    assert_int_equal(c.max_position_embeddings, 101);
    o.seq = 102;
    assert_int_equal(dt_bench_config(DT_ARCH_DIFF, &s, &o, &c, &err), 0);
    assert_int_equal(c.max_position_embeddings, 102);
}

static void expect_refused(dt_arch arch, const dt_bench_sizes *s, const char *a, const char *b) {
    dt_bench_options o;
    dt_bench_defaults(&o);
    dt_config c;
    dt_error err = {{0}, 0};
    assert_int_equal(dt_bench_config(arch, s, &o, &c, &err), -1);
    if (!strstr(err.msg, a) || (b && !strstr(err.msg, b))) fail_msg("'%s' does not name %s and %s", err.msg, a, b ? b : "-");
}

static void test_refusals(void **state) {
    (void)state;
    dt_bench_sizes s;
    dt_bench_sizes_default(&s);
    s.num_attention_heads = 300; /* more heads than hidden_size 256: head_dim would be 0 */
    expect_refused(DT_ARCH_DIFF, &s, "num_attention_heads 300", "hidden_size 256");
    s.num_attention_heads = 3; /* 256 / 3 = 85: odd */
    expect_refused(DT_ARCH_LLAMA, &s, "num_attention_heads", "85");
    s.head_dim = 32; /* now even, but DIFF pairs its query heads */
    expect_refused(DT_ARCH_DIFF, &s, "num_attention_heads", NULL);
    dt_bench_options o;
    dt_bench_defaults(&o);
    dt_config c;
    dt_error err;
    if (dt_bench_config(DT_ARCH_LLAMA, &s, &o, &c, &err) != 0) fail_msg("3 heads of 32 for the baseline: %s", err.msg);
    dt_bench_sizes_default(&s);
    s.num_key_value_heads = 3; /* 8 heads in groups of 3 */
    expect_refused(DT_ARCH_DIFF, &s, "num_key_value_heads", NULL);
    dt_bench_sizes_default(&s);
    s.vocab_size = 0;
    expect_refused(DT_ARCH_DIFF, &s, "vocab_size", NULL);
    dt_bench_sizes_default(&s);
    s.hidden_size = 65536; /* one head of 65536: past head_dim's limit, which names what it came from */
    s.num_attention_heads = 1;
    expect_refused(DT_ARCH_LLAMA, &s, "head_dim = 65536", "hidden_size / num_attention_heads = 65536 / 1");
    dt_bench_sizes_default(&s);
    s.num_attention_heads = 3; /* V2 pairs its query heads */
    s.head_dim = 32;
    expect_refused(DT_ARCH_DIFF_V2, &s, "difftrans_v2", "num_attention_heads");
    /* DIFF V2 of the sizes: H query heads of hd, as DIFF's H query heads (its h = H/2 output heads) */
    dt_bench_sizes_default(&s);
    if (dt_bench_config(DT_ARCH_DIFF_V2, &s, &o, &c, &err) != 0) fail_msg("DIFF V2 of the default sizes: %s", err.msg);
    assert_int_equal(c.arch, DT_ARCH_DIFF_V2);
    assert_int_equal(c.num_attention_heads, 8);
    assert_int_equal(c.head_dim, 32);
}

/* The read-bandwidth bound against what F32 decoding streams, in the same process: a model of
 * 170 MB a token (several times most last-level caches; within an Emerald Rapids' 260 MiB L3),
 * decoded with every thread, must read at most the bound, which reads a buffer as large as its
 * weights (30% of slack for a shared machine's noise between the two; on Intel Ice Lake the plain
 * sum alone read 10.8 GB/s where decoding streamed 19.4: 179%). Probe and decode alternate,
 * best of 2 each. The probe's buffer is the size asked for, in whole rows of 4096 floats, at
 * least 1 MiB; 0 asks for main memory (at least 1 GiB unless free memory is short). */
static void test_bandwidth_bounds_decoding(void **state) {
    (void)state;
    if (getenv("DT_ASAN")) {
        print_message("skipped under the sanitizers: their instrumentation slows decoding, not the probe's product\n");
        return;
    }
    dt_bench_sizes s;
    dt_bench_sizes_default(&s);
    s.hidden_size = 512;
    s.num_attention_heads = 8;
    s.intermediate_size = 1408;
    s.vocab_size = 8192;
    s.num_hidden_layers = 12; /* 170 MB of weights a token: 5× a 32 MiB cache */
    dt_bench_options o;
    dt_bench_defaults(&o);
    o.train = o.prefill = 0;
    o.decode_tokens = 16;
    dt_config c;
    dt_error err;
    assert_int_equal(dt_bench_config(DT_ARCH_LLAMA, &s, &o, &c, &err), 0);
    double bound = 0, sum = 0, decode = 0;
    for (int i = 0; i < 2; i++) {
        dt_bench_bandwidth bw;
        assert_int_equal(dt_bench_read_bandwidth(&bw, dt_config_decode_bytes(&c, DT_QUANT_NONE, 0)), 0);
        assert_true(bw.bound_gbs >= bw.sum_gbs && bw.bound_gbs >= bw.decoder_gbs && bw.sum_gbs > 0 && bw.decoder_gbs > 0);
        bound = fmax(bound, bw.bound_gbs);
        sum = fmax(sum, bw.sum_gbs);
        dt_bench_result r;
        if (dt_bench_model(&c, &o, &r, &err) != 0) fail_msg("%s", err.msg);
        decode = fmax(decode, r.decode_tokens_per_s * r.decode_weight_bytes_per_token / 1e9);
    }
    print_message("%d layers, %.0f MB a token: decoding streamed %.2f GB/s; bound %.2f GB/s (streaming sum %.2f): %.0f%%\n",
                  c.num_hidden_layers, dt_bench_decode_weight_bytes(&c, dt_config_param_count(&c)) / 1e6, decode, bound,
                  sum, 100 * decode / bound);
    assert_true(decode > 0 && decode <= 1.3 * bound);
    const size_t asked[] = {(size_t)8 << 20 | 12345, 1000, 0};
    for (int i = 0; i < 3; i++) {
        dt_bench_bandwidth bw;
        assert_int_equal(dt_bench_read_bandwidth(&bw, asked[i]), 0);
        if (asked[i] == 0) { /* main memory: 1 GiB, halved only down to 64 MiB when memory is short */
            assert_true(bw.bytes >= ((size_t)64 << 20) - 4096 * sizeof(float));
        } else {
            const size_t want = asked[i] < ((size_t)1 << 20) ? (size_t)1 << 20 : asked[i];
            assert_true(bw.bytes <= want && bw.bytes + 4096 * sizeof(float) > want);
        }
        assert_true(bw.bytes % (4096 * sizeof(float)) == 0 && bw.bound_gbs > 0 && isfinite(bw.bound_gbs));
    }
}

/* The decode profile (bench --profile): only the timed steps, every part a share of them that
 * adds up to at most their time and, the step being little but its parts, to most of it; the
 * products' weight bytes are the layers' (float or quantised), the other parts have none. */
static void test_decode_profile(void **state) {
    (void)state;
    dt_bench_sizes s;
    dt_bench_sizes_default(&s);
    s.hidden_size = 128;
    s.num_attention_heads = 4;
    s.intermediate_size = 352;
    s.vocab_size = 512;
    s.num_hidden_layers = 2;
    dt_bench_options o;
    dt_bench_defaults(&o);
    o.train = o.prefill = 0;
    o.decode_tokens = 12;
    o.profile = 1;
    const dt_arch archs[] = {DT_ARCH_LLAMA, DT_ARCH_DIFF};
    for (int a = 0; a < 2; a++)
        for (int quant = 0; quant < 2; quant++) {
            dt_config c;
            dt_error err;
            o.quant = quant ? DT_QUANT_Q8_0 : DT_QUANT_NONE;
            assert_int_equal(dt_bench_config(archs[a], &s, &o, &c, &err), 0);
            dt_bench_result r;
            if (dt_bench_model(&c, &o, &r, &err) != 0) fail_msg("%s", err.msg);
            assert_int_equal(r.decode_prof_steps, o.decode_tokens);
            double parts = 0, bytes = 0;
            /* every part is timed (each does work in every step), and they are laps inside the timed steps: a
             * busy machine stretches the step between them too, so no share of it is a bound they must reach */
            for (int p = 0; p < DT_BENCH_DEC_PARTS; p++) {
                if (!(r.decode_prof.part[p] > 0 && isfinite(r.decode_prof.part[p])))
                    fail_msg("%s%s: decode part %d took %g s", dt_arch_name(archs[a]), quant ? " q8_0" : "", p,
                             r.decode_prof.part[p]);
                parts += r.decode_prof.part[p];
                const int product = p <= DT_BENCH_DEC_LM_HEAD;
                assert_true(product ? r.decode_prof.bytes[p] > 0 : r.decode_prof.bytes[p] == 0);
                bytes += r.decode_prof.bytes[p];
            }
            if (!(parts <= r.decode_prof_total_s * (1 + 1e-9)))
                fail_msg("the decode parts sum to %g s, more than the %g s of the steps", parts, r.decode_prof_total_s);
            /* the products read all but the norms' (and DIFF's λ) weights and one embedding row */
            assert_true(bytes <= r.decode_weight_bytes_per_token && bytes >= 0.9 * r.decode_weight_bytes_per_token);
        }
}

/* FLOPs of a training step against the shapes by hand: 6 per weight of every product and token,
 * and 3 · 4·hd per causal (query, key) pair and query head. DIFF's H query heads (H/2 differential
 * heads with 2·hd-wide values) cost what the baseline's H heads cost; DIFF V2's o_proj reads its
 * h = H/2 output heads, [C, h·hd], and it adds a λ projection [h, C] (bench counted o_proj as
 * [C, H·hd] and no λ projection). */
static void test_train_flops(void **state) {
    (void)state;
    const dt_arch archs[] = {DT_ARCH_LLAMA, DT_ARCH_DIFF, DT_ARCH_DIFF_V2};
    for (int a = 0; a < 3; a++) {
        dt_config c;
        dt_error err;
        assert_int_equal(dt_config_preset(&c, "tiny", archs[a], &err), 0);
        c.hidden_size = 96, c.num_hidden_layers = 3, c.num_attention_heads = 8, c.num_key_value_heads = 2;
        c.head_dim = 16, c.intermediate_size = 200, c.vocab_size = 300;
        if (dt_config_validate(&c, "case", &err) != 0) fail_msg("%s", err.msg);
        const double C = 96, L = 3, H = 8, KV = 2, hd = 16, F = 200, V = 300, B = 2, T = 10;
        const int v2 = archs[a] == DT_ARCH_DIFF_V2;
        const double o_in = v2 ? H / 2 * hd : H * hd;
        const double p_mm = L * (C * H * hd + 2 * C * KV * hd + C * o_in + 3 * C * F + (v2 ? H / 2 * C : 0)) + V * C;
        const double want = 6 * p_mm * B * T + 3 * L * B * H * 4 * hd * T * (T + 1) / 2;
        if (!(dt_bench_matmul_params(&c) == p_mm && dt_bench_train_flops(&c, 2, 10) == want))
            fail_msg("%s: P_mm %.0f (by hand %.0f), FLOPs %.0f (by hand %.0f)", dt_arch_name(archs[a]),
                     dt_bench_matmul_params(&c), p_mm, dt_bench_train_flops(&c, 2, 10), want);
    }
}

/* The weight bytes per decoded token: bench's float count (4 · (parameters − the embedding table +
 * one row), by hand below) and the count of dt_config_decode_bytes (its read probe's size, and
 * the quantised models' count) agree for every kind of model: the latter counted the norms alone
 * and left out DIFF's λ vectors and per-head norm and V2's λ projection. */
static void test_decode_weight_bytes(void **state) {
    (void)state;
    const struct {
        dt_arch arch;
        int subln, tied;
        double extra; /* floats per layer besides the products and the two norms */
    } cases[] = {{DT_ARCH_LLAMA, 0, 0, 0}, {DT_ARCH_LLAMA, 0, 1, 0}, {DT_ARCH_DIFF, 0, 0, 4 * 16},
                 {DT_ARCH_DIFF, 1, 0, 4 * 16 + 2 * 16}, {DT_ARCH_DIFF_V2, 0, 0, 2 * 64}}; /* V2: W_λ [h, C] */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_config c;
        dt_error err;
        assert_int_equal(dt_config_preset(&c, "tiny", cases[i].arch, &err), 0);
        c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 4;
        c.head_dim = 16, c.intermediate_size = 96, c.vocab_size = 80;
        c.use_subln_weight = cases[i].subln;
        c.tie_word_embeddings = cases[i].tied;
        if (dt_config_validate(&c, "case", &err) != 0) fail_msg("case %zu: %s", i, err.msg);
        const double C = 64, F = 96, V = 80, L = 2;
        const double o_in = cases[i].arch == DT_ARCH_DIFF_V2 ? 2 * 16 : C; /* V2: h = H/2 output heads */
        const double products = L * (3 * C * C + C * o_in + 3 * F * C) + V * C;
        const double want = 4 * (products + L * (2 * C + cases[i].extra) + C + (cases[i].tied ? 0 : C));
        const double bench = dt_bench_decode_weight_bytes(&c, dt_config_param_count(&c));
        const double from_cfg = (double)dt_config_decode_bytes(&c, DT_QUANT_NONE, 0);
        if (!(bench == want && from_cfg == want))
            fail_msg("case %zu: bench %.0f, dt_config_decode_bytes %.0f, by hand %.0f", i, bench, from_cfg, want);
    }
}

/* The LM head's FLOPs in a training step's profile are those of the products it ran: forward and
 * backward (6·N·C·V) when the batch's logits fit one chunk of the chunked loss, and the forward
 * again when the backward recomputes each chunk (8·N·C·V; chunks of max(256, 2^21 / V) rows).
 * bench printed 8·N·C·V always, so a byte vocabulary's LM head read 4/3 of its GFLOP/s. */
static void test_profile_lm_head_flops(void **state) {
    (void)state;
    const struct {
        int vocab, batch, seq, recomputed;
    } cases[] = {{256, 2, 32, 0}, {8192, 2, 256, 1}}; /* 64 rows ≤ 8192; 512 rows > 256 */
    for (int i = 0; i < 2; i++) {
        dt_bench_sizes s;
        dt_bench_sizes_default(&s);
        s.hidden_size = 64;
        s.num_hidden_layers = 1;
        s.num_attention_heads = 4;
        s.intermediate_size = 96;
        s.vocab_size = cases[i].vocab;
        dt_bench_options o;
        dt_bench_defaults(&o);
        o.batch = cases[i].batch;
        o.seq = cases[i].seq;
        o.steps = 2;
        o.prefill = o.decode = 0;
        o.profile = 1;
        dt_config c;
        dt_error err;
        assert_int_equal(dt_bench_config(DT_ARCH_DIFF, &s, &o, &c, &err), 0);
        dt_bench_result r;
        if (dt_bench_model(&c, &o, &r, &err) != 0) fail_msg("%s", err.msg);
        const double rows = (double)o.batch * o.seq;
        const double per_step = (cases[i].recomputed ? 8 : 6) * rows * 64 * cases[i].vocab;
        assert_int_equal(r.prof_steps, 2);
        if (!(r.prof.lm_head_flops == 2 * per_step))
            fail_msg("vocab %d, %g rows: LM head FLOPs %.0f, expected 2 steps × %.0f", cases[i].vocab, rows,
                     r.prof.lm_head_flops, per_step);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bandwidth_bounds_decoding),
        cmocka_unit_test(test_decode_profile),
        cmocka_unit_test(test_profile_lm_head_flops),
        cmocka_unit_test(test_decode_weight_bytes),
        cmocka_unit_test(test_train_flops),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_config_from_sizes),
        cmocka_unit_test(test_context_length),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
