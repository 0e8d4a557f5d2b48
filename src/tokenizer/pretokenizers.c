/* pretokenizers.c — ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation,
 * Sequence: each cuts the pieces of the pipeline into smaller ones (and may rewrite them). */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/base.h"
#include "tokenizer/tok.h"

/* GPT-2's pre-tokenization pattern, built into ByteLevel (use_regex). */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Whitespace uses the Rust regex crate (not Oniguruma): \w there is Alphabetic, M, Nd, Pc and
 * Join_Control, written out for PCRE2. */
static const char WHITESPACE_PATTERN[] =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]+"
    "|[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}\\p{White_Space}]+";

/* bytes → the printable characters GPT-2 uses for them: printable Latin-1 maps to itself, the
 * other 68 bytes to U+0100.. in byte order. */
const uint16_t tk_byte_to_char[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10A, 0x10B, 0x10C, 0x10D, 0x10E, 0x10F,
    0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117, 0x118, 0x119, 0x11A, 0x11B, 0x11C, 0x11D, 0x11E, 0x11F,
    0x120, 0x21,  0x22,  0x23,  0x24,  0x25,  0x26,  0x27,  0x28,  0x29,  0x2A,  0x2B,  0x2C,  0x2D,  0x2E,  0x2F,
    0x30,  0x31,  0x32,  0x33,  0x34,  0x35,  0x36,  0x37,  0x38,  0x39,  0x3A,  0x3B,  0x3C,  0x3D,  0x3E,  0x3F,
    0x40,  0x41,  0x42,  0x43,  0x44,  0x45,  0x46,  0x47,  0x48,  0x49,  0x4A,  0x4B,  0x4C,  0x4D,  0x4E,  0x4F,
    0x50,  0x51,  0x52,  0x53,  0x54,  0x55,  0x56,  0x57,  0x58,  0x59,  0x5A,  0x5B,  0x5C,  0x5D,  0x5E,  0x5F,
    0x60,  0x61,  0x62,  0x63,  0x64,  0x65,  0x66,  0x67,  0x68,  0x69,  0x6A,  0x6B,  0x6C,  0x6D,  0x6E,  0x6F,
    0x70,  0x71,  0x72,  0x73,  0x74,  0x75,  0x76,  0x77,  0x78,  0x79,  0x7A,  0x7B,  0x7C,  0x7D,  0x7E,  0x121,
    0x122, 0x123, 0x124, 0x125, 0x126, 0x127, 0x128, 0x129, 0x12A, 0x12B, 0x12C, 0x12D, 0x12E, 0x12F, 0x130, 0x131,
    0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13A, 0x13B, 0x13C, 0x13D, 0x13E, 0x13F, 0x140, 0x141,
    0x142, 0xA1,  0xA2,  0xA3,  0xA4,  0xA5,  0xA6,  0xA7,  0xA8,  0xA9,  0xAA,  0xAB,  0xAC,  0x143, 0xAE,  0xAF,
    0xB0,  0xB1,  0xB2,  0xB3,  0xB4,  0xB5,  0xB6,  0xB7,  0xB8,  0xB9,  0xBA,  0xBB,  0xBC,  0xBD,  0xBE,  0xBF,
    0xC0,  0xC1,  0xC2,  0xC3,  0xC4,  0xC5,  0xC6,  0xC7,  0xC8,  0xC9,  0xCA,  0xCB,  0xCC,  0xCD,  0xCE,  0xCF,
    0xD0,  0xD1,  0xD2,  0xD3,  0xD4,  0xD5,  0xD6,  0xD7,  0xD8,  0xD9,  0xDA,  0xDB,  0xDC,  0xDD,  0xDE,  0xDF,
    0xE0,  0xE1,  0xE2,  0xE3,  0xE4,  0xE5,  0xE6,  0xE7,  0xE8,  0xE9,  0xEA,  0xEB,  0xEC,  0xED,  0xEE,  0xEF,
    0xF0,  0xF1,  0xF2,  0xF3,  0xF4,  0xF5,  0xF6,  0xF7,  0xF8,  0xF9,  0xFA,  0xFB,  0xFC,  0xFD,  0xFE,  0xFF,
};

int tk_char_to_byte(uint32_t cp) {
    if (cp >= 0x21 && cp <= 0x7E) return (int)cp;
    if ((cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp > 0x143) return -1;
    for (int b = 0; b < 256; b++)
        if (tk_byte_to_char[b] == cp) return b;
    return -1;
}

/* ---------------------------------------------------------------- parsing */

static const char *const KEYS_BYTELEVEL[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
static const char *const KEYS_SPLIT[] = {"type", "pattern", "behavior", "invert", NULL};
static const char *const KEYS_METASPACE[] = {"type", "replacement", "prepend_scheme", "split", "add_prefix_space",
                                             "str_rep", NULL};
static const char *const KEYS_DIGITS[] = {"type", "individual_digits", NULL};
static const char *const KEYS_PUNCT[] = {"type", "behavior", NULL};
static const char *const KEYS_SEQ[] = {"type", "pretokenizers", NULL};
static const char *const KEYS_TYPE[] = {"type", NULL};

static int parse_behavior(const cJSON *j, tk_split_behavior *b, const char *what, const char *path, dt_error *err) {
    const char *s = NULL;
    if (tk_json_string(j, "behavior", &s, what, path, err) != 0) return -1;
    if (!s) return 0;
    if (!strcmp(s, "Removed")) *b = TK_SPLIT_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = TK_SPLIT_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = TK_SPLIT_MERGED_WITH_PREVIOUS;
    else if (!strcmp(s, "MergedWithNext")) *b = TK_SPLIT_MERGED_WITH_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = TK_SPLIT_CONTIGUOUS;
    else return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: %s: behavior \"%s\" is not supported", path, what, s);
    return 0;
}

static int single_char(const char *s, uint32_t *cp) {
    if (!s || !*s) return -1;
    int k;
    *cp = tk_utf8_decode(s, &k);
    return s[k] ? -1 : 0;
}

int tk_pre_parse(tk_pre *p, const cJSON *j, const char *path, dt_error *err) {
    memset(p, 0, sizeof *p);
    const char *type = tk_json_type(j, "pre_tokenizer", path, err);
    if (!type) return -1;
    char what[96];
    snprintf(what, sizeof what, "pre_tokenizer %s", type);
    const char *const *keys = KEYS_TYPE;
    if (!strcmp(type, "ByteLevel")) {
        p->kind = TK_PRE_BYTELEVEL;
        keys = KEYS_BYTELEVEL;
        p->add_prefix_space = 1;
        p->use_regex = 1;
        if (tk_json_bool(j, "add_prefix_space", &p->add_prefix_space, what, path, err) != 0 ||
            tk_json_bool(j, "use_regex", &p->use_regex, what, path, err) != 0)
            return -1;
        if (p->use_regex &&
            tk_regex_compile(&p->re, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, TK_RE_ONIG, "ByteLevel", err) != 0)
            return -1;
    } else if (!strcmp(type, "Split")) {
        p->kind = TK_PRE_SPLIT;
        keys = KEYS_SPLIT;
        p->behavior = TK_SPLIT_ISOLATED;
        if (!cJSON_GetObjectItemCaseSensitive(j, "behavior"))
            return dt_fail_format(err, "%s: %s lacks \"behavior\"", path, what);
        if (parse_behavior(j, &p->behavior, what, path, err) != 0 ||
            tk_json_bool(j, "invert", &p->invert, what, path, err) != 0 ||
            tk_json_pattern(j, &p->re, what, path, err) != 0)
            return -1;
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = TK_PRE_METASPACE;
        keys = KEYS_METASPACE;
        const char *rep = NULL, *scheme = NULL;
        int add_prefix_space = -1;
        p->split = 1;
        if (tk_json_string(j, "replacement", &rep, what, path, err) != 0 ||
            tk_json_string(j, "prepend_scheme", &scheme, what, path, err) != 0 ||
            tk_json_bool(j, "split", &p->split, what, path, err) != 0 ||
            tk_json_bool(j, "add_prefix_space", &add_prefix_space, what, path, err) != 0)
            return -1;
        if (single_char(rep, &p->replacement) != 0)
            return dt_fail_format(err, "%s: %s: \"replacement\" must be one character", path, what);
        p->prepend_scheme = TK_PREPEND_ALWAYS;
        if (scheme && !strcmp(scheme, "first")) p->prepend_scheme = TK_PREPEND_FIRST;
        else if (scheme && !strcmp(scheme, "never")) p->prepend_scheme = TK_PREPEND_NEVER;
        else if (scheme && strcmp(scheme, "always") != 0)
            return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: %s: prepend_scheme \"%s\" is not supported", path, what,
                                scheme);
        if (add_prefix_space == 0) {
            if (p->prepend_scheme != TK_PREPEND_NEVER && scheme)
                return dt_fail_format(err, "%s: %s: add_prefix_space does not match prepend_scheme", path, what);
            p->prepend_scheme = TK_PREPEND_NEVER;
        }
    } else if (!strcmp(type, "Digits")) {
        p->kind = TK_PRE_DIGITS;
        keys = KEYS_DIGITS;
        if (tk_json_bool(j, "individual_digits", &p->individual_digits, what, path, err) != 0) return -1;
    } else if (!strcmp(type, "Whitespace")) {
        p->kind = TK_PRE_WHITESPACE;
        if (tk_regex_compile(&p->re, WHITESPACE_PATTERN, sizeof WHITESPACE_PATTERN - 1, TK_RE_PCRE, "Whitespace", err) != 0)
            return -1;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        p->kind = TK_PRE_WHITESPACE_SPLIT;
    } else if (!strcmp(type, "Punctuation")) {
        p->kind = TK_PRE_PUNCTUATION;
        keys = KEYS_PUNCT;
        p->behavior = TK_SPLIT_ISOLATED;
        if (parse_behavior(j, &p->behavior, what, path, err) != 0) return -1;
    } else if (!strcmp(type, "Sequence")) {
        p->kind = TK_PRE_SEQUENCE;
        keys = KEYS_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(arr))
            return dt_fail_format(err, "%s: pre_tokenizer Sequence lacks the \"pretokenizers\" array", path);
        int cnt = cJSON_GetArraySize(arr);
        p->items = calloc(cnt ? (size_t)cnt : 1, sizeof *p->items);
        if (!p->items) return dt_fail_oom(err, "%s: out of memory", path);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            if (tk_pre_parse(&p->items[p->n_items++], it, path, err) != 0) return -1;
        }
    } else
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: pre_tokenizer \"%s\" is not supported (supported: ByteLevel, Split, Metaspace, "
                            "Digits, Whitespace, WhitespaceSplit, Punctuation, Sequence)",
                            path, type);
    return tk_json_only(j, keys, what, path, err);
}

void tk_pre_free(tk_pre *p) {
    for (int i = 0; i < p->n_items; i++) tk_pre_free(&p->items[i]);
    free(p->items);
    tk_regex_free(&p->re);
    memset(p, 0, sizeof *p);
}

/* ---------------------------------------------------------------- splitting */

/* Rust's Pattern for a char predicate: every matching character is a match of its own. */
typedef int (*char_pred)(uint32_t cp, uint32_t arg);

static int find_chars(const char *s, size_t n, char_pred pred, uint32_t arg, tk_spans *out) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, 0);
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t cp = tk_utf8_decode(s + i, &k);
        if (pred(cp, arg)) {
            if (last < i && tk_spans_push(out, last, i, 0) != 0) return -1;
            if (tk_spans_push(out, i, i + (size_t)k, 1) != 0) return -1;
            last = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (n > last && tk_spans_push(out, last, n, 0) != 0) return -1;
    return 0;
}

static int is_char(uint32_t cp, uint32_t arg) { return cp == arg; }
static int is_space(uint32_t cp, uint32_t arg) { (void)arg; return tk_is_white_space(cp); }
static int is_numeric(uint32_t cp, uint32_t arg) {
    (void)arg;
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
static int is_punct(uint32_t cp, uint32_t arg) {
    (void)arg;
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                          (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

/* NormalizedString::split: turns the match/gap spans into the kept pieces per behavior and
 * appends the non-empty ones (s is the piece's text) to out. */
static int emit_split(tk_spans *sp, int invert, tk_split_behavior behavior, const char *s, int origin,
                      tk_pieces *out) {
    size_t n = sp->n, k = 0;
    tk_span *v = sp->v;
    if (invert)
        for (size_t i = 0; i < n; i++) v[i].is_match = !v[i].is_match;
    /* v[i].is_match afterwards means "remove this span" */
    switch (behavior) {
    case TK_SPLIT_REMOVED:
        k = n;
        break;
    case TK_SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) v[i].is_match = 0;
        k = n;
        break;
    case TK_SPLIT_CONTIGUOUS:
    case TK_SPLIT_MERGED_WITH_PREVIOUS: {
        int prev = 0;
        for (size_t i = 0; i < n; i++) {
            int m = v[i].is_match;
            int merge = behavior == TK_SPLIT_CONTIGUOUS ? m == prev : (m && !prev);
            if (merge && k > 0) v[k - 1].end = v[i].end;
            else v[k++] = (tk_span){v[i].start, v[i].end, 0};
            prev = m;
        }
        break;
    }
    case TK_SPLIT_MERGED_WITH_NEXT: {
        /* right to left, then the kept spans are reversed back */
        int prev = 0;
        size_t w = n; /* fill from the end */
        for (size_t i = n; i-- > 0;) {
            int m = v[i].is_match;
            if (m && !prev && w < n) v[w].start = v[i].start;
            else v[--w] = (tk_span){v[i].start, v[i].end, 0};
            prev = m;
        }
        memmove(v, v + w, (n - w) * sizeof *v);
        k = n - w;
        break;
    }
    }
    for (size_t i = 0; i < k; i++) {
        if (v[i].is_match || v[i].end == v[i].start) continue;
        if (tk_pieces_add(out, s + v[i].start, v[i].end - v[i].start, -1, origin && v[i].start == 0) != 0) return -1;
    }
    return 0;
}

static int bytelevel_map(const char *s, size_t n, int origin, tk_pieces *out) {
    if (tk_buf_reserve(&out->text, 2 * n) != 0) return -1;
    size_t start = out->text.n;
    char *w = out->text.p + start;
    for (size_t i = 0; i < n; i++) {
        uint16_t cp = tk_byte_to_char[(unsigned char)s[i]];
        if (cp < 0x80) *w++ = (char)cp;
        else {
            *w++ = (char)(0xC0 | (cp >> 6));
            *w++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    size_t len = (size_t)(w - (out->text.p + start));
    out->text.n = start; /* tk_pieces_add copies from the arena's own tail: reuse it in place */
    if (grow_array(&out->v, &out->cap, out->n + 1, sizeof *out->v, 64) != 0) return -1;
    out->v[out->n++] = (tk_piece){start, len, -1, origin};
    out->text.n = start + len;
    return 0;
}

static int bytelevel(const tk_pre *p, tk_ctx *c, const char *s, size_t n, int origin, tk_pieces *out) {
    tk_buf *tmp = &c->t1;
    if (p->add_prefix_space && n > 0 && s[0] != ' ') {
        tmp->n = 0;
        if (tk_buf_put(tmp, " ", 1) != 0 || tk_buf_put(tmp, s, n) != 0) return -1;
        s = tmp->p;
        n = tmp->n;
    }
    if (!p->use_regex) return n ? bytelevel_map(s, n, origin, out) : 0;
    if (tk_regex_find_matches(&p->re, &c->m, s, n, &c->spans) != 0) return -1;
    for (size_t i = 0; i < c->spans.n; i++) {
        const tk_span *sp = &c->spans.v[i];
        if (sp->end > sp->start &&
            bytelevel_map(s + sp->start, sp->end - sp->start, origin && sp->start == 0, out) != 0)
            return -1;
    }
    return 0;
}

static int metaspace(const tk_pre *p, tk_ctx *c, const char *s, size_t n, int origin, tk_pieces *out) {
    char rep[4];
    int rl = tk_utf8_encode(p->replacement, rep);
    tk_buf *tmp = &c->t1;
    tmp->n = 0;
    /* prepend looks at the text after spaces became the replacement */
    int starts_with_rep = n > 0 && (s[0] == ' ' || ((size_t)rl <= n && !memcmp(s, rep, (size_t)rl)));
    int prepend = n > 0 && !starts_with_rep &&
                  (p->prepend_scheme == TK_PREPEND_ALWAYS || (p->prepend_scheme == TK_PREPEND_FIRST && origin));
    if (prepend && tk_buf_put(tmp, rep, (size_t)rl) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        int rc = s[i] == ' ' ? tk_buf_put(tmp, rep, (size_t)rl) : tk_buf_put(tmp, s + i, 1);
        if (rc != 0) return -1;
    }
    if (!p->split) return tmp->n ? tk_pieces_add(out, tmp->p, tmp->n, -1, origin) : 0;
    if (find_chars(tmp->p ? tmp->p : "", tmp->n, is_char, p->replacement, &c->spans) != 0) return -1;
    return emit_split(&c->spans, 0, TK_SPLIT_MERGED_WITH_NEXT, tmp->p, origin, out);
}

static int apply_piece(const tk_pre *p, tk_ctx *c, const char *s, size_t n, int origin, tk_pieces *out) {
    switch (p->kind) {
    case TK_PRE_BYTELEVEL:
        return bytelevel(p, c, s, n, origin, out);
    case TK_PRE_SPLIT:
        if (tk_regex_find_matches(&p->re, &c->m, s, n, &c->spans) != 0) return -1;
        return emit_split(&c->spans, p->invert, p->behavior, s, origin, out);
    case TK_PRE_WHITESPACE:
        if (tk_regex_find_matches(&p->re, &c->m, s, n, &c->spans) != 0) return -1;
        return emit_split(&c->spans, 1, TK_SPLIT_REMOVED, s, origin, out);
    case TK_PRE_METASPACE:
        return metaspace(p, c, s, n, origin, out);
    case TK_PRE_DIGITS:
        if (find_chars(s, n, is_numeric, 0, &c->spans) != 0) return -1;
        return emit_split(&c->spans, 0, p->individual_digits ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS, s, origin,
                          out);
    case TK_PRE_WHITESPACE_SPLIT:
        if (find_chars(s, n, is_space, 0, &c->spans) != 0) return -1;
        return emit_split(&c->spans, 0, TK_SPLIT_REMOVED, s, origin, out);
    case TK_PRE_PUNCTUATION:
        if (find_chars(s, n, is_punct, 0, &c->spans) != 0) return -1;
        return emit_split(&c->spans, 0, p->behavior, s, origin, out);
    case TK_PRE_SEQUENCE:
        break;
    }
    return -1;
}

int tk_pre_apply(const tk_pre *p, tk_ctx *c) {
    if (p->kind == TK_PRE_SEQUENCE) {
        for (int i = 0; i < p->n_items; i++)
            if (tk_pre_apply(&p->items[i], c) != 0) return -1;
        return 0;
    }
    tk_pieces *in = &c->a, *out = &c->b;
    tk_pieces_clear(out);
    for (size_t i = 0; i < in->n; i++) {
        const tk_piece *pc = &in->v[i];
        const char *s = in->text.p + pc->off;
        int rc = pc->id >= 0 ? tk_pieces_add(out, s, pc->len, pc->id, pc->origin)
                             : apply_piece(p, c, s, pc->len, pc->origin, out);
        if (rc != 0) return -1;
    }
    tk_pieces t = c->a;
    c->a = c->b;
    c->b = t;
    return 0;
}

/* ---------------------------------------------------------------- hooks for the parallel encoder */

const tk_pre *tk_pre_regex_stage(const tk_pre *p, const tk_pre **rest, int *n_rest) {
    *rest = NULL;
    *n_rest = 0;
    if (!p) return NULL;
    const tk_pre *first = p;
    if (p->kind == TK_PRE_SEQUENCE) {
        if (p->n_items == 0) return NULL;
        first = &p->items[0];
        *rest = p->items + 1;
        *n_rest = p->n_items - 1;
    }
    if (first->kind == TK_PRE_SPLIT || (first->kind == TK_PRE_BYTELEVEL && first->use_regex)) return first;
    *rest = NULL;
    *n_rest = 0;
    return NULL;
}

const char *tk_pre_stage_subject(const tk_pre *stage, const char *s, size_t n, tk_buf *buf, size_t *len) {
    *len = n;
    if (!(stage->kind == TK_PRE_BYTELEVEL && stage->add_prefix_space && n > 0 && s[0] != ' ')) return s;
    buf->n = 0;
    if (tk_buf_put(buf, " ", 1) != 0 || tk_buf_put(buf, s, n) != 0) return NULL;
    *len = buf->n;
    return buf->p;
}

/* Read off emit_split: where a merge joins span i to span i + 1 (after invert), and ByteLevel,
 * whose every span is a piece of its own. */
int tk_pre_stage_cut_ok(const tk_pre *stage, int left_is_match, int right_is_match) {
    if (stage->kind != TK_PRE_SPLIT) return 1;
    int l = !!left_is_match ^ !!stage->invert, r = !!right_is_match ^ !!stage->invert;
    switch (stage->behavior) {
    case TK_SPLIT_REMOVED:
    case TK_SPLIT_ISOLATED:
        return 1;
    case TK_SPLIT_CONTIGUOUS:
        return l != r;
    case TK_SPLIT_MERGED_WITH_PREVIOUS:
        return !(r && !l);
    case TK_SPLIT_MERGED_WITH_NEXT:
        return !(l && !r);
    }
    return 0;
}

int tk_pre_stage_emit(const tk_pre *stage, tk_spans *spans, const char *s, int origin, tk_pieces *out) {
    if (stage->kind == TK_PRE_SPLIT) return emit_split(spans, stage->invert, stage->behavior, s, origin, out);
    for (size_t i = 0; i < spans->n; i++) {
        const tk_span *sp = &spans->v[i];
        if (sp->end > sp->start &&
            bytelevel_map(s + sp->start, sp->end - sp->start, origin && sp->start == 0, out) != 0)
            return -1;
    }
    return 0;
}

int tk_pre_apply_items(const tk_pre *items, int n, tk_ctx *c) {
    for (int i = 0; i < n; i++)
        if (tk_pre_apply(&items[i], c) != 0) return -1;
    return 0;
}
