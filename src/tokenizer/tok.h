/* tok.h — internals of the Hugging Face tokenizer.json (BPE) tokenizer in src/tokenizer/.
 *
 * Encoding follows the Rust `tokenizers` library step by step, because bit-exactness with it is
 * the contract:  added tokens that are not normalised are cut out of the raw text → each
 * remaining segment is normalised → normalised added tokens are cut out → pre-tokenizers split
 * the segments into pieces → the BPE model turns each piece into ids → the post-processor adds
 * special tokens. Decoding maps ids to token strings and runs the decoder chain over them.
 *
 * Everything loaded is immutable; the per-thread state of an encoding (regex match data, the
 * buffers, the word cache) lives in a tk_ctx, so one dt_tok serves many threads.
 */
#ifndef DT_TOK_H
#define DT_TOK_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "difftrans.h"

/* ---------------------------------------------------------------- text helpers (text.c) */

typedef struct {
    char *p;
    size_t n, cap;
} tk_buf;

int tk_buf_reserve(tk_buf *b, size_t extra);           /* -1 when out of memory */
int tk_buf_put(tk_buf *b, const void *s, size_t n);
int tk_buf_put_cp(tk_buf *b, uint32_t cp);              /* one code point as UTF-8 */
void tk_buf_free(tk_buf *b);

/* Length of the UTF-8 sequence starting with byte c (1 for a stray byte). */
static inline int tk_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* Decodes the (valid) code point at s, storing its byte length in *len. */
uint32_t tk_utf8_decode(const char *s, int *len);
int tk_utf8_encode(uint32_t cp, char out[4]);
/* Offset of the first invalid byte, or n when s[0..n) is valid UTF-8. */
size_t tk_utf8_check(const char *s, size_t n);
/* Bytes of s[0..n) before a sequence at its end that more bytes could still make a character (n
 * when there is none): what is sure to decode the same whatever bytes follow. */
size_t tk_utf8_complete(const char *s, size_t n);
/* Appends s[0..n) to out, replacing each maximal invalid subsequence with U+FFFD the way
 * Rust's String::from_utf8_lossy does. */
int tk_utf8_lossy(tk_buf *out, const char *s, size_t n);
int tk_is_white_space(uint32_t cp);                     /* Unicode White_Space */

/* Pieces of text during encoding (and token strings during decoding): byte ranges of one arena.
 * id >= 0 marks a piece that already is a token (an added token) and is passed through.
 * origin: the piece starts at offset 0 of the original input (Metaspace "first"). */
typedef struct {
    size_t off;
    size_t len;
    int32_t id;
    int origin;
} tk_piece;

typedef struct {
    tk_buf text;
    tk_piece *v;
    size_t n, cap;
} tk_pieces;

void tk_pieces_clear(tk_pieces *p);
void tk_pieces_free(tk_pieces *p);
/* Appends a piece whose bytes are s[0..n) (copied into the arena). */
int tk_pieces_add(tk_pieces *p, const char *s, size_t n, int32_t id, int origin);
/* An arena that never received a byte has no buffer: its (empty) pieces read as "". */
static inline const char *tk_piece_str(const tk_pieces *p, size_t i) { return p->text.p ? p->text.p + p->v[i].off : ""; }

/* ---------------------------------------------------------------- regexes (regex.c) */

typedef struct {
    pcre2_code *code;
    char *source;                /* the pattern as written in the file */
} tk_regex;

/* Per-thread matching state; all NULL (a decoding context's) until tk_regex_next first needs it. */
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    /* a match that ran into one of PCRE2's resource limits (catastrophic backtracking): its error
     * code and the pattern, for the message; 0 / NULL until then */
    int limit;
    const char *limit_source;
} tk_matcher;

/* How a pattern is written: Oniguruma syntax (tokenizer.json regexes), an exact string, or PCRE2. */
enum { TK_RE_ONIG = 0, TK_RE_LITERAL = 1, TK_RE_PCRE = 2 };
/* Compiles a pattern with PCRE2 in UTF + UCP mode and JIT-compiles it. `where` names the file and
 * component for the error message. */
int tk_regex_compile(tk_regex *re, const char *pattern, size_t len, int syntax, const char *where, dt_error *err);
void tk_regex_free(tk_regex *re);
int tk_matcher_init(tk_matcher *m);
void tk_matcher_free(tk_matcher *m);

/* One segment of a string cut by a pattern: [start, end) and whether the pattern matched it. */
typedef struct {
    size_t start, end;
    int is_match;
} tk_span;

typedef struct {
    tk_span *v;
    size_t n, cap;
} tk_spans;

/* The state of a match iteration: where the next search starts, where the last match ended. */
typedef struct {
    size_t last_end, last_match_end;
} tk_scan;
/* The next match of the iteration (1, with [*ms, *me)), 0 at the end, -1 on a regex failure. */
int tk_regex_next(const tk_regex *re, tk_matcher *m, const char *s, size_t n, tk_scan *st, size_t *ms, size_t *me);
int tk_spans_push(tk_spans *o, size_t s, size_t e, int is_match);

/* Rust's Pattern::find_matches: the whole of s[0..n) as alternating gaps and matches (an empty
 * string gives one empty gap). Returns -1 on a regex failure or when out of memory. */
int tk_regex_find_matches(const tk_regex *re, tk_matcher *m, const char *s, size_t n, tk_spans *out);

/* Added tokens found in a text: [start, stop) and an id (an index into the added tokens while
 * they are candidates, the token's id once resolved). */
typedef struct {
    size_t start, stop;
    int32_t id;
} tk_added_hit;

typedef struct {
    tk_added_hit *v;
    size_t n, cap;
} tk_added_hits;

int tk_added_hits_push(tk_added_hits *h, size_t start, size_t stop, int32_t id);

/* ---------------------------------------------------------------- per-thread context */

typedef struct tk_word_cache tk_word_cache;

typedef struct {
    tk_matcher m;
    tk_spans spans;
    tk_pieces a, b;              /* ping-pong buffers of the pipeline */
    tk_buf t1, t2;               /* normaliser scratch */
    tk_added_hits hits;          /* added tokens found in a piece */
    tk_word_cache *cache;        /* BPE results of recent pieces */
    int32_t *ids;                /* output ids */
    size_t n_ids, cap_ids;
    void *bpe_scratch;           /* the BPE merge state (bpe.c) */
} tk_ctx;

int tk_ids_push(tk_ctx *c, int32_t id);

/* ---------------------------------------------------------------- normalizers (normalizers.c) */

typedef enum {
    TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD,
    TK_NORM_LOWERCASE, TK_NORM_STRIP, TK_NORM_PREPEND, TK_NORM_REPLACE, TK_NORM_SEQUENCE
} tk_norm_kind;

typedef struct tk_norm {
    tk_norm_kind kind;
    int strip_left, strip_right;
    char *content;               /* Prepend's text, Replace's replacement */
    size_t content_len;
    tk_regex re;                 /* Replace */
    struct tk_norm *items;       /* Sequence */
    int n_items;
} tk_norm;

int tk_norm_parse(tk_norm *n, const cJSON *j, const char *path, dt_error *err);
void tk_norm_free(tk_norm *n);
/* out = normalise(s[0..len)); out is cleared first. */
int tk_norm_apply(const tk_norm *n, tk_ctx *c, const char *s, size_t len, tk_buf *out);
/* The same on a part of a text: Prepend only when it is the first part. */
int tk_norm_apply_part(const tk_norm *n, tk_ctx *c, const char *s, size_t len, int first, tk_buf *out);
/* Whether a text cut between two ASCII characters normalises as the parts do, joined. */
int tk_norm_cut_ok(const tk_norm *n);

/* ---------------------------------------------------------------- pre-tokenizers (pretokenizers.c) */

typedef enum {
    TK_PRE_BYTELEVEL, TK_PRE_SPLIT, TK_PRE_METASPACE, TK_PRE_DIGITS, TK_PRE_WHITESPACE,
    TK_PRE_WHITESPACE_SPLIT, TK_PRE_PUNCTUATION, TK_PRE_SEQUENCE
} tk_pre_kind;

typedef enum {
    TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_WITH_PREVIOUS, TK_SPLIT_MERGED_WITH_NEXT,
    TK_SPLIT_CONTIGUOUS
} tk_split_behavior;

typedef enum { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend_scheme;

typedef struct tk_pre {
    tk_pre_kind kind;
    int add_prefix_space, use_regex;      /* ByteLevel */
    tk_regex re;                          /* Split, ByteLevel (GPT-2 pattern), Whitespace */
    tk_split_behavior behavior;           /* Split, Punctuation */
    int invert;                           /* Split */
    uint32_t replacement;                 /* Metaspace */
    tk_prepend_scheme prepend_scheme;     /* Metaspace */
    int split;                            /* Metaspace */
    int individual_digits;                /* Digits */
    struct tk_pre *items;                 /* Sequence */
    int n_items;
} tk_pre;

int tk_pre_parse(tk_pre *p, const cJSON *j, const char *path, dt_error *err);
void tk_pre_free(tk_pre *p);
/* Rewrites c->a (pieces with id < 0 are cut further; the others pass through) using c->b. */
int tk_pre_apply(const tk_pre *p, tk_ctx *c);
/* The GPT-2 byte → printable character table of ByteLevel. */
extern const uint16_t tk_byte_to_char[256];
/* The inverse: code point → byte, or -1 (code points < 324 only). */
int tk_char_to_byte(uint32_t cp);

/* ---------------------------------------------------------------- BPE model (bpe.c) */

/* A string → id hash map over a string table (open addressing). */
typedef struct {
    const char **str;            /* [n] pointers into the owner's storage */
    uint32_t *len;               /* [n] */
    int32_t *slots;              /* [cap] indices into str, -1 empty */
    size_t n, cap;
} tk_strmap;

typedef struct {
    /* vocabulary: id → string (ids 0..n_vocab-1, holes have len 0 and are absent from the map) */
    char *strings;               /* all token strings, back to back */
    size_t strings_len;
    uint64_t *tok_off;           /* [n_vocab] offset of each id's string, UINT64_MAX for a hole */
    uint32_t *tok_len;           /* [n_vocab] */
    int32_t n_vocab;             /* 1 + the largest id */
    int32_t n_entries;           /* number of vocab entries */
    int32_t *map_slots;          /* string → id, open addressing over ids */
    size_t map_cap;
    /* merges: (left id, right id) → (rank, new id) */
    uint64_t *merge_keys;
    uint32_t *merge_rank;
    int32_t *merge_new;
    size_t merge_cap;
    size_t n_merges;
    /* options */
    char *unk_token;             /* NULL when none */
    int32_t unk_id;              /* -1 when none (or not in the vocabulary) */
    char *prefix;                /* continuing_subword_prefix or NULL */
    char *suffix;                /* end_of_word_suffix or NULL */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256];       /* <0xXX> tokens for byte_fallback, -1 where absent */
} tk_bpe;

int tk_bpe_parse(tk_bpe *m, const cJSON *j, const char *path, dt_error *err);
void tk_bpe_free(tk_bpe *m);
int32_t tk_bpe_lookup(const tk_bpe *m, const char *s, size_t n);      /* -1 if absent */
/* Appends the ids of one piece to c->ids (through the context's word cache). */
int tk_bpe_tokenize(const tk_bpe *m, tk_ctx *c, const char *s, size_t n);
/* Merge lookup: the merge of (a, b) or NULL. */
int tk_bpe_merge(const tk_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id);
tk_word_cache *tk_word_cache_new(void);
void tk_word_cache_free(tk_word_cache *wc);
void tk_bpe_scratch_free(void *s);

/* ---------------------------------------------------------------- added tokens (added_tokens.c) */

typedef struct {
    char *content;
    size_t len;
    char *match;                 /* what is searched: content, or its normalised form */
    size_t match_len;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} tk_added;

/* One matching set (the normalised or the raw tokens) indexed by first byte. */
typedef struct {
    int32_t *order;              /* indices into the added array, by first byte then longest first */
    int32_t first[257];          /* order[first[b] .. first[b+1]) start with byte b */
    int only_first;              /* the first byte of every token when they share one, else -1 */
} tk_added_set;

/* Cuts every piece of `in` with id < 0 around the added tokens of `set`, appending to out
 * (scratch: the context's list of hits). */
int tk_added_split(const tk_added *added, const tk_added_set *set, const tk_pieces *in, tk_pieces *out,
                   tk_added_hits *scratch);
/* The steps of tk_added_split, for the parallel encoder: candidates in [from, to) of s[0..n)
 * (appended to out), the automaton's walk over all of s's candidates, and the pieces it gives:
 * emit(sink, text, len, id, origin) for each, in order. */
int tk_added_candidates(const tk_added *added, const tk_added_set *set, const char *s, size_t n, size_t from,
                        size_t to, tk_added_hits *out);
void tk_added_resolve(const tk_added *added, const char *s, size_t n, tk_added_hits *h);
typedef int (*tk_emit_fn)(void *sink, const char *s, size_t n, int32_t id, int origin);
int tk_added_emit(const tk_added_hits *h, const char *s, size_t n, int origin, tk_emit_fn emit, void *sink);
int tk_added_set_build(tk_added_set *set, const tk_added *added, int n, int normalized);
void tk_added_set_free(tk_added_set *set);

/* ---------------------------------------------------------------- post-processors (postprocessors.c) */

typedef struct {
    int32_t *prefix, *suffix;    /* ids added before and after the sequence */
    int n_prefix, n_suffix;
} tk_post;

int tk_post_parse(tk_post *p, const cJSON *j, const char *path, dt_error *err);
void tk_post_free(tk_post *p);

/* ---------------------------------------------------------------- decoders (decoders.c) */

typedef enum {
    TK_DEC_BYTELEVEL, TK_DEC_METASPACE, TK_DEC_BYTEFALLBACK, TK_DEC_FUSE, TK_DEC_STRIP,
    TK_DEC_REPLACE, TK_DEC_SEQUENCE
} tk_dec_kind;

typedef struct tk_dec {
    tk_dec_kind kind;
    uint32_t replacement;        /* Metaspace */
    int prepend_never;           /* Metaspace: prepend_scheme == never */
    uint32_t strip_char;         /* Strip */
    int strip_start, strip_stop;
    tk_regex re;                 /* Replace */
    int literal;                 /* Replace: the pattern is a string ({"String": ...}), re.source */
    char *content;
    size_t content_len;
    struct tk_dec *items;
    int n_items;
} tk_dec;

int tk_dec_parse(tk_dec *d, const cJSON *j, const char *path, dt_error *err);
void tk_dec_free(tk_dec *d);
/* Runs the decoder chain over the token strings in c->a (using c->b). */
int tk_dec_apply(const tk_dec *d, tk_ctx *c);
/* The steps piece by piece (what tk_dec_apply runs over lists, and the streaming decoder over the
 * pieces as their tokens come):
 * tk_dec_piece: a step that maps each piece on its own (Metaspace, Strip, Replace; Fuse of one
 *   piece) appends the piece s[0..n)'s text to out; first: the piece is the first of the step's
 *   input (Metaspace drops its replacement characters there). -1 for ByteFallback, ByteLevel.
 * tk_dec_fallback_byte: the byte a ByteFallback piece "<0xXX>" stands for, or -1.
 * tk_dec_fallback_flush: a run of such bytes (emptied) as ByteFallback writes it into out: one piece
 *   when it is valid UTF-8, else a U+FFFD piece per byte.
 * tk_dec_bytelevel_bytes: the bytes ByteLevel makes of a piece (through the byte map, or the piece
 *   as it is when a character of it is outside the map), appended to bytes. */
int tk_dec_piece(const tk_dec *d, tk_ctx *c, const char *s, size_t n, int first, tk_buf *out);
int tk_dec_fallback_byte(const char *s, size_t n);
int tk_dec_fallback_flush(tk_buf *bytes, tk_pieces *out);
int tk_dec_bytelevel_bytes(const char *s, size_t n, tk_buf *bytes);

/* ---------------------------------------------------------------- the tokenizer */

struct dt_tok {
    char path[4096];             /* the tokenizer.json it came from */
    tk_bpe model;
    tk_norm *normalizer;         /* NULL when none */
    tk_pre *pre;
    tk_post post;
    tk_dec *decoder;
    tk_added *added;
    int n_added;
    tk_added_set raw_set, norm_set;
    int32_t *added_of_id;        /* [vocab_size] index into added, -1 */
    int32_t vocab_size;          /* 1 + the largest id of the model and the added tokens */
    int32_t bos_id, eos_id, pad_id;
};

/* A component's "type" or a clear error naming the file and the JSON path. */
const char *tk_json_type(const cJSON *j, const char *what, const char *path, dt_error *err);
/* Optional members: absent or null leave the default; a wrong type is an error. */
int tk_json_bool(const cJSON *obj, const char *key, int *out, const char *what, const char *path, dt_error *err);
int tk_json_string(const cJSON *obj, const char *key, const char **out, const char *what, const char *path,
                   dt_error *err);
/* Refuses members other than the ones listed (NULL-terminated) so that an option we do not
 * implement is never silently ignored. */
int tk_json_only(const cJSON *obj, const char *const *keys, const char *what, const char *path, dt_error *err);
/* A pattern object {"String": s} or {"Regex": r}. */
int tk_json_pattern(const cJSON *obj, tk_regex *re, const char *what, const char *path, dt_error *err);
char *tk_strdup(const char *s);
/* What decode(skip_special_tokens) leaves out: a token whose string s[0..len) is a special token's
 * content. */
int tk_skipped_as_special(const struct dt_tok *tok, const char *s, size_t len);
uint64_t tk_hash(const char *s, size_t n);

/* The encoding pipeline in parts (tokenizer.c), for the parallel encoder (parallel.c):
 * front: c->a = the text cut around added tokens and normalised, ready for pre-tokenization;
 * model: appends the ids of c->a's pieces; special: the post-processor's prefix or suffix. */
int tk_encode_front(const struct dt_tok *tok, tk_ctx *c, const char *text, size_t len);
int tk_encode_model(const struct dt_tok *tok, tk_ctx *c);
int tk_encode_special(const struct dt_tok *tok, tk_ctx *c, int suffix);
int tk_encode_error(const struct dt_tok *tok, int rc, const tk_matcher *m, dt_error *err);

/* The first stage of a pre-tokenizer when it is a regex scan (Split, ByteLevel with its regex),
 * which is what the parallel encoder cuts into chunks; NULL otherwise. *rest / *n_rest: the
 * stages after it. */
const tk_pre *tk_pre_regex_stage(const tk_pre *p, const tk_pre **rest, int *n_rest);
/* The text the regex stage scans for a piece: s itself, or a copy in buf when ByteLevel prepends
 * a space (NULL when out of memory); its length in *len. */
const char *tk_pre_stage_subject(const tk_pre *stage, const char *s, size_t n, tk_buf *buf, size_t *len);
/* Turns the stage's match/gap spans of subject s into pieces (behaviour, byte mapping). A run of
 * spans may be emitted on its own when it starts and ends where tk_pre_stage_cut_ok says the
 * pieces of the whole list are cut anyway (the text's ends are such places). */
int tk_pre_stage_emit(const tk_pre *stage, tk_spans *spans, const char *s, int origin, tk_pieces *out);
/* Whether the pieces of the stage end between a span of kind left_is_match and the span after
 * it of kind right_is_match (1), or the behaviour may merge the two spans into one piece (0). */
int tk_pre_stage_cut_ok(const tk_pre *stage, int left_is_match, int right_is_match);
/* Runs stages items[0..n) over c->a. */
int tk_pre_apply_items(const tk_pre *items, int n, tk_ctx *c);

/* The parallel encoder (parallel.c): a text of at least parallel_min bytes goes to the threads,
 * cut into chunks of about chunk_bytes (tk_par_defaults; tests make both small to put many cuts
 * into small texts). The ids are those of dt_tok_encode. */
typedef struct {
    size_t chunk_bytes, parallel_min;
} tk_par;
void tk_par_defaults(tk_par *p);
int tk_encode_parallel(const struct dt_tok *tok, const char *text, size_t len, int add_special, int n_threads,
                       const tk_par *par, int32_t **ids, size_t *n_ids, dt_error *err);

/* Where a long text read a block at a time (s[0..n), s[0] a place where it began or was cut) may
 * be cut so that its two parts, encoded apart, give the ids of the whole: the last such place in
 * [from, to] that the pre-tokenizer's regex scan over the text around it confirms (after a newline
 * between two characters that are not spaces, or before a space after one), or 0 when there is
 * none there yet or the tokenizer cannot be cut at all (no regex scan first; a normaliser or
 * pre-tokenizer that adds to a text's start; an added token that strips spaces or holds one). */
size_t tk_stream_cut(const struct dt_tok *tok, const char *s, size_t n, size_t from, size_t to);

int tk_ctx_init(tk_ctx *c);
void tk_ctx_init_decoding(tk_ctx *c); /* no word cache; the matcher made when a regex first runs */
void tk_ctx_free(tk_ctx *c);
#endif
