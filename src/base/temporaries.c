/* temporaries.c — what a process stopped by a signal leaves of the outputs it was writing.
 *
 * Every output is written under a temporary name, "<name>.tmp.<pid>" (a file of dt_atomic_open,
 * or the directory a quantised checkpoint is built in), and renamed into place when complete;
 * some writers keep many complete temporaries until the last is done (a token dataset's
 * shards). The directories those names are made in are registered here as they are first used,
 * and dt_remove_temporaries, from a signal handler, removes every entry of them whose name ends
 * in this process's ".tmp.<pid>" — a directory with its files. Only async-signal-safe calls run
 * there: open / openat, the getdents64 system call, unlinkat, close; nothing allocates, and the
 * registry is append-only (a directory's path is complete before the count that makes it visible
 * is raised), so the handler reads it without a lock.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define TEMP_DIRS 64 /* directories one process writes outputs into: a handful in practice */
static char temp_dirs[TEMP_DIRS][4096];
static volatile sig_atomic_t temp_dirs_n;
static char temp_suffix[32]; /* ".tmp.<pid>" */
static pthread_mutex_t temp_mu = PTHREAD_MUTEX_INITIALIZER;

void temp_dir_register(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return; /* no such path is ever written (dt_pathf limits them) */
    pthread_mutex_lock(&temp_mu);
    if (!temp_suffix[0]) snprintf(temp_suffix, sizeof temp_suffix, ".tmp.%ld", (long)getpid());
    int known = 0;
    for (int i = 0; i < temp_dirs_n && !known; i++) known = strcmp(temp_dirs[i], dir) == 0;
    if (!known && temp_dirs_n < TEMP_DIRS) {
        memcpy(temp_dirs[temp_dirs_n], dir, strlen(dir) + 1);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        temp_dirs_n = temp_dirs_n + 1;
    }
    pthread_mutex_unlock(&temp_mu);
}

/* the kernel's record of one directory entry (getdents64) */
struct dirent64_record {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int ends_with_suffix(const char *name) {
    size_t n = strlen(name), k = strlen(temp_suffix);
    return k > 0 && n > k && memcmp(name + n - k, temp_suffix, k) == 0;
}

/* Unlinks the entries of the open directory fd: those ending in the suffix (all when every), a
 * directory among them with its files (depth: how many levels more may be entered). */
static void remove_entries(int fd, int every, int depth) {
    char buf[8192];
    for (;;) {
        long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (got <= 0) return;
        for (long at = 0; at < got;) {
            const struct dirent64_record *e = (const struct dirent64_record *)(buf + at);
            at += e->d_reclen;
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            if (!every && !ends_with_suffix(e->d_name)) continue;
            if (e->d_type == DT_DIR) {
                if (depth <= 0) continue;
                const int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (sub >= 0) {
                    remove_entries(sub, 1, depth - 1);
                    close(sub);
                }
                unlinkat(fd, e->d_name, AT_REMOVEDIR);
            } else {
                unlinkat(fd, e->d_name, 0);
            }
        }
    }
}

void dt_remove_temporaries(void) {
    const int n = temp_dirs_n;
    for (int i = 0; i < n; i++) {
        const int fd = open(temp_dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) continue;
        /* twice: entries unlinked while the directory is read may hide others from that pass */
        for (int pass = 0; pass < 2; pass++) {
            lseek(fd, 0, SEEK_SET);
            remove_entries(fd, 0, 1);
        }
        close(fd);
    }
}
