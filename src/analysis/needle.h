/* needle.h — the needle set's texts as a model reads them (internal; the task itself is public,
 * difftrans_analysis.h). */
#ifndef DT_NEEDLE_H
#define DT_NEEDLE_H

#include "analysis/textmap.h"
#include "difftrans_analysis.h"

/* The first ns samples' texts as the model reads them (tok: its tokenizer, NULL for bytes; see
 * textmap.h) into enc[0, ns) (zeroed by the caller), each checked to fit the model's context and
 * vocabulary and every answer to fit DT_NEEDLE_VALUE_CAP tokens; *longest gets the most tokens.
 * On failure the caller still frees enc with dt_needle_encoded_free. */
int dt_needle_encode_testset(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, int ns, an_tokens *enc,
                          int *longest, dt_error *err);
void dt_needle_encoded_free(an_tokens *enc, int n);
#endif
