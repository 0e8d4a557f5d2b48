/* stop.c — stop strings in generated text (dt_stop_matcher): the text searched as it comes, the
 * end that could still begin one held back, as the server and `generate --stop` both show it. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "difftrans.h"

/* The one that ends first, not the one that starts first: text that comes in pieces is cut where
 * it first holds a stop string, which must not depend on the pieces (with "xyz" and "y", "xy" then
 * "z" would stop at "y" where "xyz" at once stopped at "xyz"). */
long dt_stop_find(const char *text, size_t n, const char *const *stops, int k) {
    long best = -1;
    size_t best_end = 0;
    for (int i = 0; i < k; i++) {
        const size_t l = strlen(stops[i]);
        if (l == 0 || l > n) continue;
        const char *p = memmem(text, n, stops[i], l);
        if (!p) continue;
        const size_t end = (size_t)(p - text) + l;
        if (best < 0 || end < best_end || (end == best_end && p - text < best)) {
            best = p - text;
            best_end = end;
        }
    }
    return best;
}

size_t dt_stop_holdback(const char *text, size_t n, const char *const *stops, int k) {
    size_t best = 0;
    for (int i = 0; i < k; i++) {
        const size_t l = strlen(stops[i]);
        for (size_t h = (l - (l > 0)) < n ? l - (l > 0) : n; h > best; h--)
            if (memcmp(text + n - h, stops[i], h) == 0) {
                best = h;
                break;
            }
    }
    return best;
}

struct dt_stop_matcher {
    char *stops[DT_MAX_STOP_STRINGS];
    int k;
    char *buf;                   /* the text held back, then the text of the push */
    size_t n, cap;
    size_t given;                /* buf's first bytes the last push gave out: dropped at the next */
    int stopped;
};

int dt_stop_matcher_new(dt_stop_matcher **s, const char *const *stops, int k, dt_error *err) {
    *s = NULL;
    if (k < 0 || k > DT_MAX_STOP_STRINGS)
        return dt_fail(err, "stops: %d strings, at most %d", k, DT_MAX_STOP_STRINGS);
    for (int i = 0; i < k; i++)
        if (!stops[i]) return dt_fail(err, "stops: string %d is NULL", i);
    dt_stop_matcher *m = calloc(1, sizeof *m);
    if (!m) return dt_fail_oom(err, "stop strings: out of memory");
    for (int i = 0; i < k; i++)
        if (!(m->stops[m->k++] = strdup(stops[i]))) {
            dt_stop_matcher_free(m);
            return dt_fail_oom(err, "stop strings: out of memory");
        }
    *s = m;
    return 0;
}

void dt_stop_matcher_free(dt_stop_matcher *s) {
    if (!s) return;
    for (int i = 0; i < s->k; i++) free(s->stops[i]);
    free(s->buf);
    free(s);
}

int dt_stop_matcher_push(dt_stop_matcher *s, const char *text, size_t len, const char **out, size_t *out_len,
                         dt_error *err) {
    *out = "";
    *out_len = 0;
    if (s->stopped) return 1;
    /* what was held back stays: it is shorter than the longest stop string */
    if (s->given) memmove(s->buf, s->buf + s->given, s->n - s->given);
    s->n -= s->given;
    s->given = 0;
    if (dt_grow(&s->buf, &s->cap, s->n + len + 1, 1, 64) != 0)
        return dt_fail_oom(err, "stop strings: out of memory for %zu bytes of text", s->n + len);
    if (len) memcpy(s->buf + s->n, text, len);
    s->n += len;
    s->buf[s->n] = '\0';
    /* the held text holds no stop string (it was searched), so one found here ends in the new text */
    const long at = dt_stop_find(s->buf, s->n, (const char *const *)s->stops, s->k);
    if (at >= 0) {
        s->stopped = 1;
        s->buf[at] = '\0';
        s->given = s->n;
        *out = s->buf;
        *out_len = (size_t)at;
        return 1;
    }
    s->given = s->n - dt_stop_holdback(s->buf, s->n, (const char *const *)s->stops, s->k);
    *out = s->buf;
    *out_len = s->given;
    return 0;
}

void dt_stop_matcher_flush(dt_stop_matcher *s, const char **out, size_t *out_len) {
    *out = "";
    *out_len = 0;
    if (s->stopped || !s->buf) return;
    *out = s->buf + s->given;
    *out_len = s->n - s->given;
    s->given = s->n;
}

int dt_stop_matcher_stopped(const dt_stop_matcher *s) {
    return s->stopped;
}
