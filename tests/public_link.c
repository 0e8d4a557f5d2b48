/* public_link.c — a program that links build/libdifftrans.a and defines functions of its own under
 * names the library uses inside (linear_forward, tk_hash, read_text_file, gguf_open): it must link
 * (those names are local to the library) and the library must go on calling its own. Built and
 * run by CTest as test_public_link, and by the install test (check_install.sh) against an installed
 * copy through pkg-config, linked to libdifftrans.so and to libdifftrans.a. */
#include <stdio.h>
#include <string.h>

#include "difftrans.h"

int linear_forward_calls;

/* Not the library's: if the library called these, the model below would compute nonsense. */
void linear_forward(float *y, const float *x, const float *w, int N, int in, int out) {
    (void)y, (void)x, (void)w, (void)N, (void)in, (void)out;
    linear_forward_calls++;
}
unsigned tk_hash(const char *s) { return (unsigned)strlen(s); }
int read_text_file(void) { return -1; }
int gguf_open(void) { return -1; }

int main(void) {
    dt_config c;
    dt_error err;
    if (dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err) != 0) {
        fprintf(stderr, "public_link: %s\n", err.msg);
        return 1;
    }
    dt_model m;
    if (dt_model_create(&m, &c, &err) != 0) {
        fprintf(stderr, "public_link: %s\n", err.msg);
        return 1;
    }
    dt_model_init_random(&m, 1);
    const int tokens[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    double loss = 0;
    size_t scored = 0;
    const int rc = dt_eval_tokens(&m, tokens, 9, 1, 8, &loss, &scored, &err);
    dt_model_free(&m);
    if (rc != 0) {
        fprintf(stderr, "public_link: %s\n", err.msg);
        return 1;
    }
    /* an untrained model of 256 ids: a loss near ln 256 = 5.55, which zeros from a stand-in product
     * would not give either (they give exactly ln 256 only by accident of the init) */
    if (!(loss > 4.5 && loss < 7.0) || scored != 8 || linear_forward_calls != 0) {
        fprintf(stderr, "public_link: loss %g over %zu, our linear_forward called %d times\n", loss, scored,
                linear_forward_calls);
        return 1;
    }
    printf("public_link: linked beside same-named functions; loss %.4f over %zu tokens\n", loss, scored);
    return 0;
}
