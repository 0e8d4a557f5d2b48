/* checkpoint.h — a training checkpoint replaces the previous one as a whole (internal).
 *
 * The files of a checkpoint (config.json, model.safetensors, difftrans_tokenizer.json,
 * optimizer.safetensors, train_state.json) are first written into DIR/.next/, train_state.json
 * last: its presence there means the set is complete. Committing links them into DIR (each
 * stays in DIR/.next too), renames train_state.json into DIR last, and removes DIR/.next. A
 * process killed at any moment leaves either an incomplete DIR/.next (discarded: DIR still holds
 * the previous checkpoint) or a complete one (the commit is finished by checkpoint_recover, before
 * anything reads DIR to resume). A reader, which must not write, reads a complete DIR/.next
 * instead of DIR: DIR may hold the new checkpoint's model.safetensors beside the previous one's
 * train_state.json (checkpoint_pending, internal.h: the loaders use it too). */
#ifndef DT_CHECKPOINT_H
#define DT_CHECKPOINT_H
#include <stddef.h>

#include "difftrans.h"

/* Creates DIR/.next (emptied if a previous attempt left one) and writes its path into stage. */
int checkpoint_stage(const char *dir, char *stage, size_t n, dt_error *err);
/* Removes DIR/.next whatever it holds: a stage whose writing failed (a full disk) is not left behind.
 * Its own failures are not reported: the caller reports the one that stopped the stage. */
void checkpoint_discard(const char *dir);
/* Moves the complete DIR/.next into DIR (see above) and syncs the directory. */
int checkpoint_commit(const char *dir, dt_error *err);
/* Finishes a commit that was interrupted, or discards an incomplete stage. */
int checkpoint_recover(const char *dir, dt_error *err);
/* Takes an exclusive flock(2) on DIR for as long as *fd stays open (the process's end, however
 * it ends, releases it), so that two training runs never stage into the same DIR/.next. A DIR
 * another process holds is refused; one whose file system cannot lock (*fd = -1) is not. */
int checkpoint_lock(const char *dir, int *fd, dt_error *err);
#endif
