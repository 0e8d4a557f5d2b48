/* comm.h — the collectives data-parallel training needs, over MPI (internal).
 *
 * A dt_comm (public, opaque) is either an MPI job's world (the process was launched by mpirun)
 * or a single process that never touches MPI. Every wait here is bounded: a peer that does not
 * take part within the communicator's timeout ends the job (MPI_Abort, error code 7) with a
 * message naming the rank(s) that did not reach the current step. No collective allocates (the
 * buffers come with the dt_comm), so none fails for memory. Nothing here keeps global state.
 *
 * Non-blocking operations are posted with comm_i*() and completed together by comm_wait();
 * every rank must post the same operations in the same order. comm_progress() lets MPI advance
 * posted operations while the caller computes (Open MPI has no progress thread by default). */
#ifndef DT_COMM_H
#define DT_COMM_H
#include <stddef.h>
#include <stdint.h>

#include "difftrans.h"

/* Tells rank 0 (by a small message) that this rank has reached `step`, for the timeout message;
 * the step also names the phase in messages. */
void comm_set_step(dt_comm *c, int step);

/* buf[n] ← the sum over ranks of buf[n], on every rank (MPI_Iallreduce, in place). */
void comm_iallreduce_sum(dt_comm *c, float *buf, size_t n);
/* buf[n] on rank `root` ← the sum over ranks; other ranks' buf is only read (MPI_Ireduce). */
void comm_ireduce_sum(dt_comm *c, float *buf, size_t n, int root);
/* Lets posted operations advance; returns at once. */
void comm_progress(dt_comm *c);
/* Completes every posted operation. Returns the seconds spent waiting. `what` names the phase. */
double comm_wait(dt_comm *c, const char *what);

/* Blocking (bounded) collectives. */
/* all[size × bytes] ← every rank's mine[bytes], in rank order. */
void comm_allgather(dt_comm *c, const void *mine, void *all, size_t bytes, const char *what);
/* buf[bounds[r] .. bounds[r+1]) on every rank ← rank r's slice (in place, all ranks). */
void comm_allgatherv_f32(dt_comm *c, float *buf, const size_t *bounds, const char *what);
/* all[bounds[r] .. bounds[r+1]) on rank 0 ← rank r's mine (its slice); all is used on rank 0 only. */
void comm_gatherv_f32(dt_comm *c, const float *mine, float *all, const size_t *bounds, const char *what);
/* buf[bytes] on every rank ← rank 0's. */
void comm_bcast(dt_comm *c, void *buf, size_t bytes, const char *what);

/* Every rank brings its status (0, or -1 with a message in err) and n_fp (<= 4) fingerprints of
 * what it runs with (fp_names[i] names each: "the data file", ...). Returns 0 on every rank when
 * every rank succeeded and all fingerprints equal rank 0's; otherwise -1 on every rank, with
 * rank 0's err naming each failed rank and its message (or the first fingerprint that differs and
 * the ranks that differ) and the other ranks' err empty: rank 0 reports for the job. */
int comm_agree(dt_comm *c, int status, const uint64_t *fp, const char *const *fp_names, int n_fp, dt_error *err);
#define COMM_DETAIL_BYTES 1536 /* the longest fp_detail text taken (the options and model config take ~900) */
/* comm_agree where fp_detail[i] (or NULL) says what fingerprint i covers as "name value" lines: a
 * fingerprint that differs is then named by the names whose values differ, with each rank's value
 * ("lr 0.001 on rank 0, 0.01 on rank 1"); by the hashes when the lines are alike (cut short). */
int comm_agree_detail(dt_comm *c, int status, const uint64_t *fp, const char *const *fp_names,
                      const char *const *fp_detail, int n_fp, dt_error *err);
/* Fails when n values are too many for one MPI collective (more than INT_MAX) on more than one rank. */
int comm_check_count(const dt_comm *c, size_t n, dt_error *err);
/* Slices of n items over the ranks: bounds[r] = n·r/size, bounds[size] = n (size + 1 entries). */
void comm_bounds(const dt_comm *c, size_t n, size_t *bounds);
#endif
