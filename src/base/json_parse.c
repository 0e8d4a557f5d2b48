/* json_parse.c — why cJSON refused a text: it returns NULL both for text that is not JSON and
 * when an allocation fails, and the two are different errors (DT_ERR_FORMAT, DT_ERR_NOMEM). A
 * check of the grammar that allocates nothing tells them apart afterwards. */
#include <string.h>

#include "internal.h"

/* Limits past which cJSON refuses text that RFC 8259 allows: containers nested deeper than
 * CJSON_NESTING_LIMIT (1000), and in cJSON 1.7.15 as released a number longer than its 63-byte
 * buffer (Debian's build reads longer ones). Text past them counts as not JSON here, so that such
 * a refusal is never taken for memory; the price, a real out-of-memory while parsing a file with
 * a 64-digit number reported as a bad file, is the safe side. */
#define NESTING_LIMIT 1000
#define NUMBER_MAX 63

static size_t skip_ws(const char *s, size_t i, size_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

static int hex4(const char *s, size_t i, size_t n, unsigned *out) {
    if (i + 4 > n) return 0;
    unsigned v = 0;
    for (size_t k = i; k < i + 4; k++) {
        const char c = s[k];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = 16 * v + (unsigned)d;
    }
    *out = v;
    return 1;
}

/* The string that opens at s[i] (a '"'): the index after its closing quote, 0 when it is not a
 * string. A \u escape must be a whole UTF-16 character, as cJSON requires (a high surrogate
 * followed by a low one, never a low one alone). */
static size_t scan_string(const char *s, size_t i, size_t n) {
    for (i++; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '"') return i + 1;
        if (c < 0x20) return 0;
        if (c != '\\') {
            i++;
            continue;
        }
        if (++i >= n) return 0;
        if (s[i] && strchr("\"\\/bfnrt", s[i])) {
            i++;
            continue;
        }
        unsigned u, lo;
        if (s[i] != 'u' || !hex4(s, i + 1, n, &u)) return 0;
        i += 5;
        if (u >= 0xDC00 && u <= 0xDFFF) return 0;
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (i + 2 > n || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s, i + 2, n, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return 0;
            i += 6;
        }
    }
    return 0;
}

static size_t digits(const char *s, size_t i, size_t n) {
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i;
}

/* RFC 8259's number at s[i]: the index after it, 0 when there is none. */
static size_t scan_number(const char *s, size_t i, size_t n) {
    const size_t start = i;
    if (i < n && s[i] == '-') i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    i = s[i] == '0' ? i + 1 : digits(s, i, n);
    if (i < n && s[i] == '.') {
        const size_t d = i + 1;
        if ((i = digits(s, d, n)) == d) return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        const size_t d = i;
        if ((i = digits(s, d, n)) == d) return 0;
    }
    return i - start > NUMBER_MAX ? 0 : i;
}

static size_t scan_literal(const char *s, size_t i, size_t n) {
    static const char *const words[] = {"true", "false", "null"};
    for (int w = 0; w < 3; w++) {
        const size_t k = strlen(words[w]);
        if (i + k <= n && memcmp(s + i, words[w], k) == 0) return i + k;
    }
    return 0;
}

int json_text_valid(const char *s, size_t n) {
    char open[NESTING_LIMIT]; /* '{' or '[' of every container the scan is inside */
    int depth = 0;
    enum { VALUE, KEY, AFTER } want = VALUE;
    size_t i = n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* cJSON skips a UTF-8 BOM */
    for (;;) {
        i = skip_ws(s, i, n);
        if (want == AFTER && depth == 0) return i == n; /* one value, then only white space */
        if (i >= n) return 0;
        const char c = s[i];
        if (want == KEY) {
            if (c != '"' || !(i = scan_string(s, i, n))) return 0;
            i = skip_ws(s, i, n);
            if (i >= n || s[i] != ':') return 0;
            i++;
            want = VALUE;
        } else if (want == AFTER) {
            const char close = open[depth - 1] == '{' ? '}' : ']';
            if (c == ',') want = open[depth - 1] == '{' ? KEY : VALUE;
            else if (c == close) depth--;
            else return 0;
            i++;
        } else if (c == '{' || c == '[') {
            if (depth == NESTING_LIMIT) return 0;
            open[depth++] = c;
            i = skip_ws(s, i + 1, n);
            if (i < n && s[i] == (c == '{' ? '}' : ']')) {
                depth--;
                i++;
                want = AFTER;
            } else {
                want = c == '{' ? KEY : VALUE;
            }
        } else {
            if (c == '"') i = scan_string(s, i, n);
            else if (c == '-' || (c >= '0' && c <= '9')) i = scan_number(s, i, n);
            else i = scan_literal(s, i, n);
            if (!i) return 0;
            want = AFTER;
        }
    }
}
