/* test_tokenizer_golden.c — difftrans against the Rust `tokenizers` library, id for id and byte for
 * byte: the golden files in tests/tokenizer/golden/ were made by the library itself
 * (make_goldens.js) for the hand-made tokenizers in tests/tokenizer/fixtures/ (always checked) and
 * for published tokenizers from npm packages (checked when `make test` could install them into
 * the build tree: $DT_TOKREF; otherwise reported as not checked). Every case: encode with and
 * without special tokens, decode with and without skip_special, and decodes of random ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"

static int n_mismatch;

static void show(const char *what, const char *name, const char *text) {
    if (++n_mismatch > 20) return;
    printf("MISMATCH %s [%s] on \"", what, name);
    for (const unsigned char *p = (const unsigned char *)text; *p && p - (const unsigned char *)text < 120; p++)
        if (*p < 0x20 || *p == '"') printf("\\x%02x", *p);
        else putchar(*p);
    printf("\"\n");
}

static int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
    assert_non_null(v);
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) v[i++] = (int32_t)e->valuedouble;
    return v;
}

static void check_encode(const dt_tok *tok, dt_tok_encoder *enc, const char *name, const char *text, int special,
                         const cJSON *want) {
    size_t nw;
    int32_t *w = json_ids(want, &nw);
    const int32_t *ids;
    size_t n;
    dt_error err = {0};
    if (dt_tok_encoder_encode(enc, text, strlen(text), special, &ids, &n, &err) != 0) {
        show(err.msg, name, text);
    } else if (n != nw || (n && memcmp(ids, w, n * sizeof *w) != 0)) {
        show(special ? "ids (add_special)" : "ids", name, text);
        if (n_mismatch <= 20) {
            printf("   got ");
            for (size_t i = 0; i < n && i < 40; i++) printf("%d ", ids[i]);
            printf("\n  want ");
            for (size_t i = 0; i < nw && i < 40; i++) printf("%d ", w[i]);
            printf("\n");
        }
    }
    /* the one-shot API gives the same ids as the reusable encoder */
    int32_t *again = NULL;
    size_t n2 = 0;
    if (dt_tok_encode(tok, text, strlen(text), special, &again, &n2, &err) == 0 &&
        (n2 != nw || (n2 && memcmp(again, w, n2 * sizeof *w) != 0)))
        show("ids (dt_tok_encode)", name, text);
    free(again);
    free(w);
}

static void check_decode(const dt_tok *tok, const char *name, const cJSON *ids_json, int skip, const char *want) {
    size_t n;
    int32_t *ids = json_ids(ids_json, &n);
    char *text = NULL;
    size_t len = 0;
    dt_error err = {0};
    if (dt_tok_decode(tok, ids, n, skip, &text, &len, &err) != 0) show(err.msg, name, want);
    else if (len != strlen(want) || memcmp(text, want, len) != 0) {
        show(skip ? "decode (skip_special)" : "decode", name, want);
        if (n_mismatch <= 20) printf("   got \"%s\"\n", text);
    }
    free(text);
    free(ids);
}

/* Returns 1 when checked, 0 when its tokenizer is not installed. */
static int check_file(const char *golden_path) {
    char *text = tu_read_file(golden_path, NULL);
    cJSON *g = cJSON_Parse(text);
    free(text);
    assert_non_null(g);
    const char *source = cJSON_GetObjectItem(g, "tokenizer")->valuestring;
    char path[4096];
    const char *dir = getenv("DT_TOKENIZER_TESTS"), *ref = getenv("DT_TOKREF");
    assert_non_null(dir);
    if (!strncmp(source, "fixture:", 8)) snprintf(path, sizeof path, "%s/fixtures/%s", dir, source + 8);
    else if (!strncmp(source, "npm:", 4)) {
        snprintf(path, sizeof path, "%s/node_modules/%s", ref ? ref : "", source + 4);
        if (!ref || !tu_file_exists(path)) {
            printf("NOT CHECKED %s: %s is not installed (npm registry unreachable?)\n", golden_path, source + 4);
            cJSON_Delete(g);
            return 0;
        }
    } else
        fail_msg("%s: unknown source %s", golden_path, source);
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, path, &err) != 0) fail_msg("%s", err.msg);
    /* difftrans's vocabulary size is the id space (1 + the largest id), what an embedding must cover */
    assert_int_equal(dt_tok_vocab_size(tok), cJSON_GetObjectItem(g, "id_space")->valueint);
    dt_tok_encoder *enc = dt_tok_encoder_new(tok);
    assert_non_null(enc);
    const cJSON *c;
    int before = n_mismatch, count = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
        const char *t = cJSON_GetObjectItem(c, "text")->valuestring;
        check_encode(tok, enc, source, t, 0, cJSON_GetObjectItem(c, "ids"));
        check_encode(tok, enc, source, t, 1, cJSON_GetObjectItem(c, "ids_special"));
        check_decode(tok, source, cJSON_GetObjectItem(c, "ids_special"), 0, cJSON_GetObjectItem(c, "decoded")->valuestring);
        check_decode(tok, source, cJSON_GetObjectItem(c, "ids_special"), 1,
                     cJSON_GetObjectItem(c, "decoded_skip")->valuestring);
        count++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "decodes")) {
        check_decode(tok, source, cJSON_GetObjectItem(c, "ids"), 0, cJSON_GetObjectItem(c, "text")->valuestring);
        check_decode(tok, source, cJSON_GetObjectItem(c, "ids"), 1, cJSON_GetObjectItem(c, "text_skip")->valuestring);
    }
    printf("%-28s %3d strings: %s\n", source, count, n_mismatch == before ? "identical" : "MISMATCHES");
    dt_tok_encoder_free(enc);
    dt_tok_free(tok);
    cJSON_Delete(g);
    return 1;
}

static void test_goldens(void **state) {
    (void)state;
    char gdir[4096], **names;
    const int n = tu_tokenizer_test_files("golden", &names, gdir, sizeof gdir);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", gdir, names[i]);
        checked += check_file(p);
    }
    tu_free_names(names, n);
    printf("%d of %d golden files checked, %d mismatches\n", checked, n, n_mismatch);
    assert_true(n >= 10);
    assert_int_equal(n_mismatch, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_goldens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
