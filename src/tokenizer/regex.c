/* regex.c — the patterns of tokenizer.json (Oniguruma syntax, as the Rust library compiles them)
 * run with PCRE2 in UTF + UCP mode, JIT-compiled.
 *
 * The two engines agree on the constructs published tokenizers use ((?i:...), \p{L}, \p{N},
 * look-ahead, classes) except for the shorthand classes, which are rewritten here:
 *   \s \S  Oniguruma: Unicode White_Space. PCRE2's \s with UCP is "Z category + \t\n\v\f\r" and
 *          also matches U+180E while missing U+0085, so it becomes \p{White_Space}.
 *   \w \W  Oniguruma: Letter | Mark | Decimal_Number | Connector_Punctuation; PCRE2 10.42's \w is
 *          L, N and '_', so \w is spelt out (and \W inside a class, which PCRE2 cannot express
 *          as a negation there, is refused by name).
 *   \d     both: \p{Nd}.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tokenizer/tok.h"

#define WORD_CLASS "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

/* Rewrites the shorthand classes; *bad names a construct that cannot be rewritten. */
static int translate(const char *pat, size_t len, tk_buf *out, const char **bad) {
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            const char *rep = NULL;
            if (e == 's') rep = "\\p{White_Space}";
            else if (e == 'S') rep = "\\P{White_Space}";
            else if (e == 'w') rep = in_class ? WORD_CLASS : "[" WORD_CLASS "]";
            else if (e == 'W') {
                if (in_class) {
                    *bad = "\\W inside a character class";
                    return -1;
                }
                rep = "[^" WORD_CLASS "]";
            } else if (e == 'h' || e == 'H') {
                *bad = "\\h / \\H (hexadecimal digit in Oniguruma)";
                return -1;
            }
            if (rep) {
                if (tk_buf_put(out, rep, strlen(rep)) != 0) return -2;
            } else if (tk_buf_put(out, pat + i, 2) != 0) return -2;
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            if (tk_buf_put(out, pat + i, 1) != 0) return -2;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < len && pat[i + 1] == '^') {
                if (tk_buf_put(out, "^", 1) != 0) return -2;
                i++;
            }
            if (i + 1 < len && pat[i + 1] == ']') {
                if (tk_buf_put(out, "\\]", 2) != 0) return -2;
                i++;
            }
            continue;
        }
        if (c == '[' && in_class && i + 1 < len && pat[i + 1] != ':') {
            *bad = "a nested character class";
            return -1;
        }
        if (c == ']' && in_class) in_class = 0;
        if (tk_buf_put(out, pat + i, 1) != 0) return -2;
    }
    return 0;
}

int tk_regex_compile(tk_regex *re, const char *pattern, size_t len, int literal, const char *where, dt_error *err) {
    memset(re, 0, sizeof *re);
    /* compiled with PCRE2_NO_UTF_CHECK: an invalid pattern would be undefined behaviour there */
    const size_t bad_at = tk_utf8_check(pattern, len);
    if (bad_at != len) return dt_fail_format(err, "%s: pattern is not valid UTF-8 (byte %zu)", where, bad_at);
    re->source = malloc(len + 1);
    if (!re->source) return dt_fail_oom(err, "%s: out of memory", where);
    memcpy(re->source, pattern, len);
    re->source[len] = '\0';
    tk_buf tr = {0};
    const char *bad = NULL;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
    if (literal == TK_RE_LITERAL) opts = PCRE2_LITERAL | PCRE2_UTF | PCRE2_NO_UTF_CHECK;
    if (literal != TK_RE_ONIG) {
        if (tk_buf_put(&tr, pattern, len) != 0) bad = "out of memory";
    } else {
        int rc = translate(pattern, len, &tr, &bad);
        if (rc == -2) bad = "out of memory";
    }
    if (bad) {
        tk_buf_free(&tr);
        tk_regex_free(re);
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: pattern \"%.200s\": %s is not supported", where, pattern,
                            bad);
    }
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) {
        tk_buf_free(&tr);
        tk_regex_free(re);
        return dt_fail_oom(err, "%s: out of memory", where);
    }
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int code;
    PCRE2_SIZE off;
    re->code = pcre2_compile((PCRE2_SPTR)(tr.p ? tr.p : ""), tr.n, opts, &code, &off, cc);
    pcre2_compile_context_free(cc);
    tk_buf_free(&tr);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        tk_regex_free(re);
        return dt_fail_format(err, "%s: pattern \"%.200s\" does not compile: %s", where, pattern, (const char *)msg);
    }
    /* Without JIT (some architectures) the interpreter gives the same matches, only slower. */
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return 0;
}

void tk_regex_free(tk_regex *re) {
    pcre2_code_free(re->code);
    free(re->source);
    re->code = NULL;
    re->source = NULL;
}

int tk_matcher_init(tk_matcher *m) {
    memset(m, 0, sizeof *m);
    m->md = pcre2_match_data_create(4, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    /* Look-ahead over long runs of spaces needs more than the 32 KiB default JIT stack. */
    m->jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!m->md || !m->mctx || !m->jit) {
        tk_matcher_free(m);
        return -1;
    }
    pcre2_jit_stack_assign(m->mctx, NULL, m->jit);
    return 0;
}

void tk_matcher_free(tk_matcher *m) {
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    pcre2_jit_stack_free(m->jit);
    memset(m, 0, sizeof *m);
}

/* The iteration of Oniguruma's find_iter as the Rust binding drives it: an empty match right
 * where the previous match ended is skipped by advancing one character. */
int tk_regex_next(const tk_regex *re, tk_matcher *m, const char *s, size_t n, tk_scan *st, size_t *ms, size_t *me) {
    if (!m->md && tk_matcher_init(m) != 0) return -1; /* a decoding context's first regex */
    while (st->last_end <= n) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, st->last_end, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
            rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            m->limit = rc;
            m->limit_source = re->source;
        }
        if (rc < 0) return -1;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        if (ov[0] == ov[1] && st->last_match_end == ov[1]) {
            st->last_end = ov[1] < n ? ov[1] + (size_t)tk_utf8_len((unsigned char)s[ov[1]]) : ov[1] + 1;
            continue;
        }
        st->last_end = st->last_match_end = ov[1];
        *ms = ov[0];
        *me = ov[1];
        return 1;
    }
    return 0;
}

int tk_spans_push(tk_spans *o, size_t s, size_t e, int is_match) {
    if (grow_array(&o->v, &o->cap, o->n + 1, sizeof *o->v, 64) != 0) return -1;
    o->v[o->n++] = (tk_span){s, e, is_match};
    return 0;
}

int tk_regex_find_matches(const tk_regex *re, tk_matcher *m, const char *s, size_t n, tk_spans *out) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, 0);
    size_t prev = 0, ms, me;
    tk_scan st = {0, (size_t)-1};
    int rc;
    while ((rc = tk_regex_next(re, m, s, n, &st, &ms, &me)) == 1) {
        if (prev != ms && tk_spans_push(out, prev, ms, 0) != 0) return -1;
        if (tk_spans_push(out, ms, me, 1) != 0) return -1;
        prev = me;
    }
    if (rc < 0) return -1;
    if (prev != n && tk_spans_push(out, prev, n, 0) != 0) return -1;
    return 0;
}
