/* checkpoint.c — staged, then committed, training checkpoints (see checkpoint.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "train/checkpoint.h"

#define STAGE CHECKPOINT_STAGE
#define LAST CHECKPOINT_LAST

static int sync_dir(const char *dir, dt_error *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return dt_fail_io(err, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : dt_fail_io(err, "%s: fsync: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

/* Removes every file of the stage directory, and the directory. */
static int discard_stage(const char *stage, dt_error *err) {
    DIR *d = opendir(stage);
    if (!d) return errno == ENOENT ? 0 : dt_fail_io(err, "%s: cannot open: %s", stage, strerror(errno));
    char path[4400];
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            rc = dt_pathf(path, sizeof path, err, "%s/%s", stage, e->d_name);
            if (rc == 0 && unlink(path) != 0) rc = dt_fail_io(err, "%s: cannot remove: %s", path, strerror(errno));
        }
    closedir(d);
    if (rc == 0 && rmdir(stage) != 0) rc = dt_fail_io(err, "%s: cannot remove: %s", stage, strerror(errno));
    return rc;
}

int checkpoint_stage(const char *dir, char *stage, size_t n, dt_error *err) {
    if (dt_pathf(stage, n, err, "%s/%s", dir, STAGE) != 0 || discard_stage(stage, err) != 0) return -1;
    if (mkdir(stage, 0755) != 0) return dt_fail_io(err, "%s: cannot create directory: %s", stage, strerror(errno));
    return 0;
}

void checkpoint_discard(const char *dir) {
    char stage[4200];
    dt_error ignored;
    if (dt_pathf(stage, sizeof stage, &ignored, "%s/%s", dir, STAGE) == 0) discard_stage(stage, &ignored);
}

static int move(const char *stage, const char *dir, const char *name, dt_error *err) {
    char from[4400], to[4400];
    if (dt_pathf(from, sizeof from, err, "%s/%s", stage, name) || dt_pathf(to, sizeof to, err, "%s/%s", dir, name))
        return -1;
    if (rename(from, to) != 0) return dt_fail_io(err, "%s: cannot rename to %s: %s", from, to, strerror(errno));
    return 0;
}

/* Puts the staged file into DIR and keeps it in the stage too (a second link, renamed into place):
 * until train_state.json leaves the stage, a reader finds the whole new checkpoint there, while
 * DIR holds some of its files beside the previous one's. A file system without hard links moves it. */
static int place(const char *stage, const char *dir, const char *name, dt_error *err) {
    char from[4400], via[4400], to[4400];
    if (dt_pathf(from, sizeof from, err, "%s/%s", stage, name) ||
        dt_pathf(via, sizeof via, err, "%s/%s.tmp.commit", stage, name) ||
        dt_pathf(to, sizeof to, err, "%s/%s", dir, name))
        return -1;
    if (unlink(via) != 0 && errno != ENOENT) return dt_fail_io(err, "%s: cannot remove: %s", via, strerror(errno));
    if (link(from, via) != 0) {
        if (errno == EPERM || errno == ENOTSUP || errno == EOPNOTSUPP || errno == EMLINK)
            return move(stage, dir, name, err);
        return dt_fail_io(err, "%s: cannot link to %s: %s", from, via, strerror(errno));
    }
    if (rename(via, to) != 0) return dt_fail_io(err, "%s: cannot rename to %s: %s", via, to, strerror(errno));
    return 0;
}

int checkpoint_commit(const char *dir, dt_error *err) {
    char stage[4200];
    if (dt_pathf(stage, sizeof stage, err, "%s/%s", dir, STAGE) != 0 || sync_dir(stage, err) != 0) return -1;
    DIR *d = opendir(stage);
    if (!d) return dt_fail_io(err, "%s: cannot open: %s", stage, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LAST) &&
            !strstr(e->d_name, ".tmp."))
            rc = place(stage, dir, e->d_name, err);
    closedir(d);
    if (rc == 0) rc = move(stage, dir, LAST, err);
    if (rc != 0) return -1;
    /* committed: the emptied stage goes even when the sync fails */
    rc = sync_dir(dir, err);
    dt_error discard_err;
    if (discard_stage(stage, &discard_err) != 0 && rc == 0) {
        if (err) *err = discard_err;
        rc = -1;
    }
    return rc;
}

int checkpoint_recover(const char *dir, dt_error *err) {
    char stage[4200], last[4400];
    struct stat sb;
    if (dt_pathf(stage, sizeof stage, err, "%s/%s", dir, STAGE) || dt_pathf(last, sizeof last, err, "%s/%s", stage, LAST))
        return -1;
    if (stat(stage, &sb) != 0) return 0; /* nothing was interrupted */
    if (stat(last, &sb) == 0) return checkpoint_commit(dir, err);
    return discard_stage(stage, err);
}

int dt_train_checkpoint(const char *dir, char *state, size_t n) {
    char stage[4200];
    struct stat sb;
    if (checkpoint_pending(dir, stage, sizeof stage)) return dt_pathf(state, n, NULL, "%s/%s", stage, LAST) == 0;
    return dt_pathf(state, n, NULL, "%s/%s", dir, LAST) == 0 && stat(state, &sb) == 0 && S_ISREG(sb.st_mode);
}

int checkpoint_lock(const char *dir, int *fd, dt_error *err) {
    *fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0) return dt_fail_io(err, "%s: cannot open directory: %s", dir, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0) return 0;
    const int busy = errno == EWOULDBLOCK;
    close(*fd);
    *fd = -1;
    if (!busy) return 0; /* a file system without locks (some NFS mounts): the run goes on unguarded */
    return dt_fail_io(err, "%s: another difftrans train is writing this directory; let it finish or stop it "
                           "(Ctrl-C) first", dir);
}

int dt_train_forget(const char *dir, dt_error *err) {
    static const char *const old_run[] = {"train_state.json", "optimizer.safetensors", "metrics.jsonl"};
    int fd;
    if (checkpoint_lock(dir, &fd, err) != 0) return -1;
    char path[4400];
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < sizeof old_run / sizeof old_run[0]; k++) {
        rc = dt_pathf(path, sizeof path, err, "%s/%s", dir, old_run[k]);
        if (rc == 0 && unlink(path) != 0 && errno != ENOENT)
            rc = dt_fail_io(err, "%s: cannot remove the old run's file: %s", path, strerror(errno));
    }
    /* a finished stage would otherwise be committed by the next resume, the old run's weights with it */
    if (rc == 0) rc = dt_pathf(path, sizeof path, err, "%s/%s", dir, STAGE);
    if (rc == 0) rc = discard_stage(path, err);
    if (fd >= 0) close(fd);
    return rc;
}
