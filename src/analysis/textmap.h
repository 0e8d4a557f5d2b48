/* textmap.h — a task's text as a model reads it, with where each token ends in the text (internal).
 *
 * The tasks (needle retrieval, attention allocation, in-context classification) are written as
 * text and place their prompts and answers by byte offsets. A byte-level model (tok = NULL) reads
 * one token per byte (id = byte value, token i ends at byte i + 1). A model with a real vocabulary
 * reads the tokenizer's ids (no special tokens added); token i ends where the decoded text of
 * ids[0, i] ends in the text. A token that is half of a UTF-8 character (its prefix decodes to a
 * replacement character, not to a prefix of the text) ends where the first later prefix that
 * decodes to a prefix of the text ends. The text must decode back byte for byte (a normalizer that
 * changes it — lowercasing, NFKC — makes offsets meaningless and is refused, naming the cause).
 *
 * A byte range [b0, b1) of the text is then the tokens [an_tokens_before(b0), an_tokens_covering(b1)):
 * those that overlap it, including a token that starts before b0 (" 12345" when the answer is
 * "12345" after "Answer:"). A prompt that stops before byte b is the an_tokens_before(b) tokens.
 */
#ifndef DT_TEXTMAP_H
#define DT_TEXTMAP_H
#include "difftrans.h"

typedef struct {
    int n;
    int *ids; /* [n] token ids */
    int *end; /* [n] byte offset where token i's text ends; non-decreasing, end[n - 1] = the text's length */
} an_tokens;

/* tok = NULL: bytes. `what` names the text in messages (e.g. "test.jsonl: sample 3"). */
int an_tokens_encode(const dt_tok *tok, const char *text, int len, const char *what, an_tokens *out, dt_error *err);
void an_tokens_free(an_tokens *t);
/* The number of tokens that end at or before byte b. */
int an_tokens_before(const an_tokens *t, int b);
/* The number of tokens needed to cover text[0, b): the smallest k with end[k - 1] >= b (0 for b <= 0). */
int an_tokens_covering(const an_tokens *t, int b);
#endif
