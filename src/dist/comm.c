/* comm.c — dt_comm over MPI (see comm.h). Every blocking collective is a non-blocking one
 * completed by comm_wait(), the one place that waits, so that every wait is bounded. */
#include <mpi.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>

#include "base/base.h"
#include "dist/comm.h"

#define TAG_HEARTBEAT 7301

struct dt_comm {
    int mpi;                     /* 1: this process joined an MPI job (and finalizes it) */
    int rank, size, local_size;
    double timeout_s;
    MPI_Comm world;              /* our duplicate of MPI_COMM_WORLD */
    MPI_Comm beat;               /* heartbeats, apart from the collectives */
    MPI_Request *reqs;           /* posted, not yet completed */
    int n_reqs;
    size_t cap_reqs;
    int step;
    int waits;                   /* comm_wait calls so far: the same sequence on every rank */
    /* heartbeats: on entering a wait, and every `pulse` seconds while waiting, rank r > 0 sends
     * {waits, step} to rank 0, which can then tell, when a wait times out, which ranks never
     * reached it and which stopped responding inside it */
    int beat_out[2], beat_sent, closing;
    double pulse, beat_time;
    MPI_Request beat_send;
    int *beat_in;                /* rank 0: [size][2] receive buffers */
    int *last;                   /* rank 0: [size][2] the last {waits, step} of every rank */
    double *heard;               /* rank 0: [size] when it last heard from every rank */
    MPI_Request *beat_recv;      /* rank 0: [size] */
    /* allocated by dt_comm_create, so that no collective allocates (and none can fail for memory) */
    int *counts;                 /* [2][size]: the counts and displacements of a v-collective */
    struct agreement *agree;     /* [size]: comm_agree's gathered statuses */
    struct agreement *agree_mine; /* this rank's, before the gather (too large for the stack) */
};

static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

#define MAX_FP 4

/* comm_agree's message of one rank; code is the rank's dt_errcode when status != 0. */
typedef struct agreement {
    int status, code;
    uint64_t fp[MAX_FP];
    char msg[sizeof(((dt_error *)0)->msg)];
    char detail[MAX_FP][COMM_DETAIL_BYTES]; /* what each fingerprint covers, as the rank has it */
} agreement;

#define INITIAL_REQUESTS 64

int dt_comm_create(dt_comm **out, double timeout_s, dt_error *err) {
    *out = NULL;
    if (!(timeout_s > 0)) return dt_fail(err, "communication timeout %g s: must be positive", timeout_s);
    dt_comm *c = calloc(1, sizeof *c);
    if (!c) return dt_fail_oom(err, "out of memory");
    c->size = c->local_size = 1;
    c->timeout_s = timeout_s;
    c->pulse = timeout_s / 4 < 1 ? timeout_s / 4 : 1;
    c->beat_send = MPI_REQUEST_NULL;
    if (!launched_by_mpi()) {
        *out = c;
        return 0;
    }
    int provided = 0;
    /* Only the thread that runs the training loop calls MPI (OpenMP threads never do). */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        free(c);
        return dt_fail_io(err, "MPI_Init_thread failed");
    }
    c->mpi = 1;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->world);
    MPI_Comm_dup(MPI_COMM_WORLD, &c->beat);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm node;
    MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);
    c->counts = malloc(2 * (size_t)c->size * sizeof(int));
    c->agree = malloc((size_t)c->size * sizeof *c->agree);
    c->agree_mine = malloc(sizeof *c->agree_mine);
    c->reqs = malloc(INITIAL_REQUESTS * sizeof *c->reqs);
    c->cap_reqs = c->reqs ? INITIAL_REQUESTS : 0;
    const int size = c->size;
    if (!c->counts || !c->agree || !c->agree_mine || !c->reqs) {
        dt_comm_free(c);
        return dt_fail_oom(err, "out of memory for the communicator of %d ranks", size);
    }
    if (c->rank == 0) {
        c->beat_in = calloc(2 * (size_t)c->size, sizeof(int));
        c->last = calloc(2 * (size_t)c->size, sizeof(int));
        c->heard = calloc((size_t)c->size, sizeof(double));
        c->beat_recv = malloc((size_t)c->size * sizeof(MPI_Request));
        if (!c->beat_in || !c->last || !c->heard || !c->beat_recv) {
            free(c->beat_recv); /* no receive was posted: nothing for dt_comm_free to cancel */
            c->beat_recv = NULL;
            dt_comm_free(c);
            return dt_fail_oom(err, "out of memory for the heartbeats of %d ranks", size);
        }
        c->beat_recv[0] = MPI_REQUEST_NULL;
        for (int r = 1; r < c->size; r++)
            MPI_Irecv(&c->beat_in[2 * r], 2, MPI_INT, r, TAG_HEARTBEAT, c->beat, &c->beat_recv[r]);
    }
    *out = c;
    return 0;
}

int dt_comm_rank(const dt_comm *c) { return c ? c->rank : 0; }
int dt_comm_size(const dt_comm *c) { return c ? c->size : 1; }
int dt_comm_local_size(const dt_comm *c) { return c ? c->local_size : 1; }

int dt_comm_default_threads(const dt_comm *c) {
    const int online = (int)sysconf(_SC_NPROCESSORS_ONLN), usable = omp_get_num_procs();
    /* a launcher that binds each rank to its cores already gave it its share */
    int n = usable < online ? usable : online / dt_comm_local_size(c);
    return n > 0 ? n : 1;
}

static void collect_heartbeats(dt_comm *c) {
    if (c->rank != 0 || c->size < 2) return;
    for (;;) {
        int idx = MPI_UNDEFINED, flag = 0;
        MPI_Testany(c->size, c->beat_recv, &idx, &flag, MPI_STATUS_IGNORE);
        if (!flag || idx == MPI_UNDEFINED) return;
        c->last[2 * idx] = c->beat_in[2 * idx];
        c->last[2 * idx + 1] = c->beat_in[2 * idx + 1];
        c->heard[idx] = monotonic_seconds();
        MPI_Irecv(&c->beat_in[2 * idx], 2, MPI_INT, idx, TAG_HEARTBEAT, c->beat, &c->beat_recv[idx]);
    }
}

/* Ranks > 0: sends {waits, step} unless rank 0 already has it; one message in flight at most. */
static void send_heartbeat(dt_comm *c) {
    if (c->rank == 0 || c->size < 2 || c->closing) return;
    const double now = monotonic_seconds();
    if (c->beat_sent == c->waits && now - c->beat_time < c->pulse) return;
    if (c->beat_send != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&c->beat_send, &done, MPI_STATUS_IGNORE);
        if (!done) return; /* comm_wait's polling sends it later */
    }
    c->beat_time = now;
    c->beat_out[0] = c->beat_sent = c->waits;
    c->beat_out[1] = c->step;
    MPI_Isend(c->beat_out, 2, MPI_INT, 0, TAG_HEARTBEAT, c->beat, &c->beat_send);
}

void comm_set_step(dt_comm *c, int step) {
    if (c) c->step = step;
}

/* Ends the job: the operations already posted cannot be withdrawn, so no rank can go on without
 * the missing ones. Rank 0 names them. The one place the library ends a process (difftrans.h,
 * dt_comm_create): MPI_Abort with error code COMM_ABORT_CODE, which mpirun passes on as its exit
 * status; Open MPI's MPI_Abort does not return. */
#define COMM_ABORT_CODE 7
static void timed_out(dt_comm *c, const char *what, double waited) {
    char who[768] = "";
    size_t used = 0;
    if (c->rank == 0) {
        collect_heartbeats(c);
        const double now = monotonic_seconds();
        for (int r = 1; r < c->size && used + 96 < sizeof who; r++) {
            if (c->last[2 * r] < c->waits)
                used += (size_t)snprintf(who + used, sizeof who - used, "%srank %d never reached it (last seen at step %d)",
                                         used ? "; " : "", r, c->last[2 * r + 1]);
            else if (now - c->heard[r] > 3 * c->pulse)
                used += (size_t)snprintf(who + used, sizeof who - used,
                                         "%srank %d stopped responding inside it (silent for %.0f s)", used ? "; " : "",
                                         r, now - c->heard[r]);
        }
        if (!used) snprintf(who, sizeof who, "every rank is in it, responding, and it does not complete");
    } else {
        snprintf(who, sizeof who, "rank 0 or another rank stopped responding");
    }
    fprintf(stderr,
            "difftrans: rank %d of %d: no progress for %.0f s in %s at step %d: %s; ending the job "
            "(the last checkpoint is intact)\n",
            c->rank, c->size, waited, what, c->step, who);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, COMM_ABORT_CODE);
}

static double complete_posted(dt_comm *c, const char *what);

static void add_request(dt_comm *c, MPI_Request r) {
    if (grow_array(&c->reqs, &c->cap_reqs, (size_t)c->n_reqs + 1, sizeof *c->reqs, INITIAL_REQUESTS) != 0) {
        /* no memory to keep more pending: the operations are completed now instead of later (in
         * the order every rank posted them), which costs only the overlap */
        const char *what = "posted operations (no memory to keep more pending)";
        if (c->n_reqs == 0) { /* not even the first one has a slot: complete it alone */
            MPI_Request *keep = c->reqs;
            c->reqs = &r;
            c->n_reqs = 1;
            complete_posted(c, what);
            c->reqs = keep;
            return;
        }
        complete_posted(c, what);
    }
    c->reqs[c->n_reqs++] = r;
}

void comm_iallreduce_sum(dt_comm *c, float *buf, size_t n) {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->world, &r);
    add_request(c, r);
}

void comm_ireduce_sum(dt_comm *c, float *buf, size_t n, int root) {
    MPI_Request r;
    if (c->rank == root) MPI_Ireduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, root, c->world, &r);
    else MPI_Ireduce(buf, NULL, (int)n, MPI_FLOAT, MPI_SUM, root, c->world, &r);
    add_request(c, r);
}

int comm_check_count(const dt_comm *c, size_t n, dt_error *err) {
    if (dt_comm_size(c) > 1 && n > INT_MAX)
        return dt_fail(err, "%zu parameters: data-parallel training moves at most %d values per collective "
                            "(MPI counts are int)", n, INT_MAX);
    return 0;
}

void comm_progress(dt_comm *c) {
    if (!c || !c->mpi) return;
    int flag;
    if (c->n_reqs) MPI_Testall(c->n_reqs, c->reqs, &flag, MPI_STATUSES_IGNORE);
    collect_heartbeats(c);
}

/* Completes every posted operation, bounded by the timeout; returns the seconds it waited. */
static double complete_posted(dt_comm *c, const char *what) {
    /* Rank 0 gives up first, so that the message naming the missing ranks is the one printed. */
    const double limit = c->rank == 0 ? c->timeout_s : 1.5 * c->timeout_s + 2;
    const double t0 = monotonic_seconds();
    for (long spin = 0;; spin++) {
        int flag = 0;
        MPI_Testall(c->n_reqs, c->reqs, &flag, MPI_STATUSES_IGNORE);
        if (flag) break;
        collect_heartbeats(c);
        send_heartbeat(c);
        double waited = monotonic_seconds() - t0;
        if (waited > limit) timed_out(c, what, waited);
        /* yield at first (the peer may share our core), then sleep briefly */
        if (spin < 1000) sched_yield();
        else nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    c->n_reqs = 0;
    return monotonic_seconds() - t0;
}

double comm_wait(dt_comm *c, const char *what) {
    if (!c || !c->mpi || c->n_reqs == 0) return 0;
    c->waits++;
    send_heartbeat(c);
    return complete_posted(c, what);
}

void comm_allgather(dt_comm *c, const void *mine, void *all, size_t bytes, const char *what) {
    if (!c || !c->mpi || c->size == 1) {
        memcpy(all, mine, bytes);
        return;
    }
    MPI_Request r;
    MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->world, &r);
    add_request(c, r);
    comm_wait(c, what);
}

/* Counts and displacements of the slices as MPI ints (comm_check_count() bounded them). */
static void slices(const dt_comm *c, const size_t *bounds, int *counts, int *displs) {
    for (int r = 0; r < c->size; r++) {
        counts[r] = (int)(bounds[r + 1] - bounds[r]);
        displs[r] = (int)bounds[r];
    }
}

void comm_allgatherv_f32(dt_comm *c, float *buf, const size_t *bounds, const char *what) {
    if (!c || !c->mpi || c->size == 1) return;
    int *counts = c->counts, *displs = counts + c->size;
    slices(c, bounds, counts, displs);
    MPI_Request r;
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, c->world, &r);
    add_request(c, r);
    comm_wait(c, what);
}

void comm_gatherv_f32(dt_comm *c, const float *mine, float *all, const size_t *bounds, const char *what) {
    if (!c || !c->mpi || c->size == 1) {
        memcpy(all, mine, (bounds[1] - bounds[0]) * sizeof(float));
        return;
    }
    int *counts = c->counts, *displs = counts + c->size;
    slices(c, bounds, counts, displs);
    MPI_Request r;
    MPI_Igatherv(mine, counts[c->rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, c->world, &r);
    add_request(c, r);
    comm_wait(c, what);
}

void comm_bcast(dt_comm *c, void *buf, size_t bytes, const char *what) {
    if (!c || !c->mpi || c->size == 1) return;
    MPI_Request r;
    MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, c->world, &r);
    add_request(c, r);
    comm_wait(c, what);
}

/* The value of `name` in "name value" lines, as a length into *len; NULL when there is none. */
static const char *detail_value(const char *lines, const char *name, size_t name_len, size_t *len) {
    for (const char *p = lines; *p;) {
        const char *end = strchr(p, '\n');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) > name_len && !strncmp(p, name, name_len) && p[name_len] == ' ') {
            *len = (size_t)(end - p) - name_len - 1;
            return p + name_len + 1;
        }
        p = *end ? end + 1 : end;
    }
    return NULL;
}

/* Appends to msg[used..) each name whose value differs between rank 0 and a rank whose
 * fingerprint k differs from rank 0's: "lr 0.001 on rank 0, 0.01 on rank 1" (a name that only
 * some ranks have is "(none)" on the others). Returns the new length; unchanged when the lines
 * name nothing that differs. */
static size_t describe_difference(const agreement *all, int size, int k, char *msg, size_t cap, size_t used) {
    const size_t start = used;
    int listed = 0;
    for (int from = 0; from < size; from++) { /* rank 0's names, then names only other ranks have */
        if (from > 0 && all[from].fp[k] == all[0].fp[k]) continue;
        for (const char *p = all[from].detail[k]; *p && used + 64 < cap;) {
            const char *end = strchr(p, '\n');
            if (!end) end = p + strlen(p);
            const char *sp = memchr(p, ' ', (size_t)(end - p));
            const size_t name_len = sp ? (size_t)(sp - p) : 0;
            size_t l0 = 0, lr = 0;
            const char *v0 = name_len ? detail_value(all[0].detail[k], p, name_len, &l0) : NULL;
            int seen = from > 0 && v0 != NULL; /* rank 0's names were listed from its own lines */
            for (int e = 1; e < from && !seen; e++)
                seen = all[e].fp[k] != all[0].fp[k] && detail_value(all[e].detail[k], p, name_len, &lr);
            for (int r = 1, first = 1; name_len && !seen && r < size && used + 64 < cap; r++) {
                if (all[r].fp[k] == all[0].fp[k]) continue;
                const char *v = detail_value(all[r].detail[k], p, name_len, &lr);
                if (v && v0 && lr == l0 && !memcmp(v, v0, l0)) continue;
                if (first)
                    used += (size_t)snprintf(msg + used, cap - used, "%s%.*s %.*s on rank 0", listed++ ? "; " : "",
                                             (int)name_len, p, v0 ? (int)l0 : 6, v0 ? v0 : "(none)");
                first = 0;
                if (used + 64 < cap)
                    used += (size_t)snprintf(msg + used, cap - used, ", %.*s on rank %d", v ? (int)lr : 6,
                                             v ? v : "(none)", r);
            }
            p = *end ? end + 1 : end;
        }
    }
    if (used >= cap) used = cap - 1;
    return listed ? used : start;
}

int comm_agree(dt_comm *c, int status, const uint64_t *fp, const char *const *fp_names, int n_fp, dt_error *err) {
    return comm_agree_detail(c, status, fp, fp_names, NULL, n_fp, err);
}

int comm_agree_detail(dt_comm *c, int status, const uint64_t *fp, const char *const *fp_names,
                      const char *const *fp_detail, int n_fp, dt_error *err) {
    if (!c || !c->mpi || c->size == 1) return status;
    if (n_fp > MAX_FP) n_fp = MAX_FP;
    agreement *all = c->agree, *mine = c->agree_mine;
    memset(mine, 0, sizeof *mine);
    mine->status = status;
    for (int i = 0; i < n_fp; i++) {
        mine->fp[i] = fp[i];
        if (fp_detail && fp_detail[i]) snprintf(mine->detail[i], sizeof mine->detail[i], "%s", fp_detail[i]);
    }
    if (status != 0) {
        mine->code = err->code;
        snprintf(mine->msg, sizeof mine->msg, "%s", err->msg);
    }
    comm_allgather(c, mine, all, sizeof *mine, "the agreement between ranks");
    int failed = 0, differs = -1;
    for (int r = 0; r < c->size; r++) {
        if (all[r].status != 0) failed = 1;
        for (int i = 0; i < n_fp && differs < 0; i++)
            if (all[r].fp[i] != all[0].fp[i]) differs = i;
    }
    if (!failed && differs < 0) return 0;
    /* rank 0 reports for everybody; every rank fails with the first failed rank's code (or, for
     * ranks started differently, an invalid argument), so that every process exits alike */
    err->msg[0] = 0;
    err->code = DT_ERR_INVALID;
    for (int r = 0; r < c->size; r++)
        if (all[r].status != 0) {
            err->code = (dt_errcode)all[r].code;
            break;
        }
    if (c->rank == 0) {
        int n_failed = 0, same = 1, first = -1;
        for (int r = 0; r < c->size; r++)
            if (all[r].status != 0) {
                n_failed++;
                if (first < 0) first = r;
                else if (strcmp(all[r].msg, all[first].msg) != 0) same = 0;
            }
        size_t used = 0;
        const size_t cap = sizeof err->msg;
        if (failed && same && n_failed == c->size) { /* every rank failed alike: say it once */
            snprintf(err->msg, cap, "%s", all[first].msg);
        } else if (failed) {
            for (int r = 0; r < c->size && used + 8 < cap; r++)
                if (all[r].status != 0)
                    used += (size_t)snprintf(err->msg + used, cap - used, "%srank %d: %s", used ? "; " : "", r,
                                             all[r].msg);
        } else {
            /* every fingerprint that differs, by what it covers where the ranks say (the option and
             * its values: a hash alone left the user to find which of twenty options it was) */
            for (int k = differs; k < n_fp && used + 64 < cap; k++) {
                int odd = 0;
                for (int r = 1; r < c->size; r++) odd |= all[r].fp[k] != all[0].fp[k];
                if (!odd) continue;
                used += (size_t)snprintf(err->msg + used, cap - used, "%s %s: ",
                                         k > differs ? "; and in" : "the ranks differ in", fp_names[k]);
                if (used >= cap) break;
                const size_t at = used;
                used = describe_difference(all, c->size, k, err->msg, cap, used);
                if (used != at) continue;
                used += (size_t)snprintf(err->msg + used, cap - used, "rank 0 has %016llx, and",
                                         (unsigned long long)all[0].fp[k]);
                for (int r = 1; r < c->size && used + 40 < cap; r++)
                    if (all[r].fp[k] != all[0].fp[k])
                        used += (size_t)snprintf(err->msg + used, cap - used, " rank %d %016llx", r,
                                                 (unsigned long long)all[r].fp[k]);
            }
        }
    }
    return -1;
}

void comm_bounds(const dt_comm *c, size_t n, size_t *bounds) {
    const int size = dt_comm_size(c);
    for (int r = 0; r <= size; r++) bounds[r] = (size_t)((unsigned __int128)n * (unsigned)r / (unsigned)size);
}

void dt_comm_free(dt_comm *c) {
    if (!c) return;
    if (c->mpi) {
        if (c->size > 1) {
            /* no new heartbeats; the last one completes within the final barrier, while rank 0 is
             * still listening */
            c->closing = 1;
            if (c->beat_send != MPI_REQUEST_NULL) {
                MPI_Request r = c->beat_send;
                c->beat_send = MPI_REQUEST_NULL;
                add_request(c, r);
            }
            MPI_Request b;
            MPI_Ibarrier(c->world, &b);
            add_request(c, b);
            comm_wait(c, "the final barrier");
            if (c->rank == 0 && c->beat_recv)
                for (int r = 1; r < c->size; r++) {
                    MPI_Cancel(&c->beat_recv[r]);
                    MPI_Wait(&c->beat_recv[r], MPI_STATUS_IGNORE);
                }
        }
        MPI_Comm_free(&c->beat);
        MPI_Comm_free(&c->world);
        MPI_Finalize();
    }
    free(c->reqs);
    free(c->counts);
    free(c->agree);
    free(c->agree_mine);
    free(c->beat_in);
    free(c->last);
    free(c->heard);
    free(c->beat_recv);
    free(c);
}
