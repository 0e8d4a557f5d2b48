/* util.c — paths, the random number generator and atomic file writes (errors: error.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "difftrans.h"
#include "internal.h"

int dt_pathf(char *out, size_t n, dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n)
        return dt_fail(err, "%.200s...: path too long (%d bytes, limit %zu)", out, k, n - 1);
    return 0;
}

/* splitmix64: tiny, fast, and its whole state is one integer we can checkpoint. */
uint64_t dt_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float dt_rng_uniform(uint64_t *state) { return (float)(dt_rng_next(state) >> 40) * (1.0f / 16777216.0f); }

float dt_rng_normal(uint64_t *state) {
    /* Box–Muller in double; u1 in (0, 1] so the log is finite. */
    double u1 = ((double)(dt_rng_next(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(dt_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

int dt_atomic_open(dt_atomic_file *f, const char *path, dt_error *err) {
    memset(f, 0, sizeof *f);
    if (dt_pathf(f->path, sizeof f->path, err, "%s", path) != 0 ||
        dt_pathf(f->tmp, sizeof f->tmp, err, "%s.tmp.%ld", path, (long)getpid()) != 0) {
        memset(f, 0, sizeof *f); /* no cut-short name for dt_atomic_abort to unlink */
        return -1;
    }
    /* the rename would replace whatever the name holds: never a device or a FIFO (an output of
     * /dev/null, run as root, would have become a regular file) */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        memset(f, 0, sizeof *f);
        const char *what = S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" : "a device or socket";
        return dt_fail_io(err, "%s: exists and is not a regular file (%s): outputs are written to a new file and "
                               "renamed over the old one",
                          path, what);
    }
    if (dir_ensure_parent(path, err) != 0) {
        memset(f, 0, sizeof *f);
        return -1;
    }
    temp_dir_register(path); /* before the file exists: a signal may come at any time after */
    f->fp = fopen(f->tmp, "wb");
    if (!f->fp) return dt_fail_io(err, "%s: cannot create: %s", path, strerror(errno));
    return 0;
}

/* The rename is durable only once the directory entry is on disk: fsync the directory. */
int sync_parent_dir(const char *path, dt_error *err) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path); /* path fits: dt_atomic_open checked */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return dt_fail_io(err, "%s: cannot open its directory to sync it: %s", path, strerror(errno));
    int rc = fsync(fd), saved = errno;
    close(fd);
    if (rc != 0) return dt_fail_io(err, "%s: written, but syncing its directory failed: %s", path, strerror(saved));
    return 0;
}

int atomic_finish(dt_atomic_file *f, dt_error *err) {
    FILE *fp = f->fp;
    f->fp = NULL;
    int bad = ferror(fp) || fflush(fp) != 0 || fsync(fileno(fp)) != 0;
    int saved = errno;
    if (fclose(fp) != 0) bad = 1;
    if (bad) {
        unlink(f->tmp);
        return dt_fail_io(err, "%s: write failed: %s", f->path, strerror(saved));
    }
    return 0;
}

int dt_atomic_commit(dt_atomic_file *f, dt_error *err) {
    if (atomic_finish(f, err) != 0) return -1;
    return atomic_rename(f, err);
}

int atomic_rename(dt_atomic_file *f, dt_error *err) {
    int saved;
    if (rename(f->tmp, f->path) != 0) {
        saved = errno;
        unlink(f->tmp);
        return dt_fail_io(err, "%s: cannot rename into place: %s", f->path, strerror(saved));
    }
    return sync_parent_dir(f->path, err);
}

void dt_atomic_abort(dt_atomic_file *f) {
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
    if (f->tmp[0]) unlink(f->tmp);
}

static int write_atomic(const char *path, const void *data, size_t len, int newline, dt_error *err) {
    dt_atomic_file f;
    if (dt_atomic_open(&f, path, err) != 0) return -1;
    if ((len > 0 && fwrite(data, 1, len, f.fp) != len) || (newline && fputc('\n', f.fp) == EOF)) {
        int saved = errno;
        dt_atomic_abort(&f);
        return dt_fail_io(err, "%s: write failed: %s", path, strerror(saved));
    }
    return dt_atomic_commit(&f, err);
}

int write_text_atomic(const char *path, const char *text, dt_error *err) {
    return write_atomic(path, text, strlen(text), 1, err);
}

int write_file_atomic(const char *path, const void *data, size_t len, dt_error *err) {
    return write_atomic(path, data, len, 0, err);
}

int open_regular_fd(const char *path, struct stat *sb, dt_error *err) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        dt_fail_io(err, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    const char *problem = NULL;
    if (fstat(fd, &st) != 0) problem = strerror(errno);
    else if (!S_ISREG(st.st_mode)) problem = "not a regular file";
    else {
        /* reads of a regular file do not block anyway; cleared so that the descriptor is a plain one */
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) problem = strerror(errno);
    }
    if (problem) {
        close(fd);
        dt_fail_io(err, "%s: %s", path, problem);
        errno = EINVAL;
        return -1;
    }
    if (sb) *sb = st;
    return fd;
}

FILE *open_regular_file(const char *path, dt_error *err) {
    int fd = open_regular_fd(path, NULL, err);
    if (fd < 0) return NULL;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        int e = errno;
        close(fd);
        dt_fail_io(err, "%s: cannot open: %s", path, strerror(e));
        errno = e;
    }
    return fp;
}

int read_text_file(const char *path, size_t max_bytes, const char *what, char **out, size_t *len, dt_error *err) {
    FILE *fp = open_regular_file(path, err);
    if (!fp) return -1;
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        int e = errno;
        fclose(fp);
        return dt_fail_io(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if ((uintmax_t)sb.st_size > max_bytes) {
        fclose(fp);
        return dt_fail_format(err, "%s: %lld bytes is too large for %s (limit %zu bytes)", path, (long long)sb.st_size,
                              what, max_bytes);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(fp);
        return dt_fail_oom(err, "%s: out of memory for %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, fp);
    /* one more byte read must hit the end: a file that grew while we read is not trusted either */
    int bad = ferror(fp) || got != n || fgetc(fp) != EOF || ferror(fp);
    int saved = errno;
    fclose(fp);
    if (bad) {
        free(buf);
        return dt_fail_io(err, "%s: read failed: %s", path,
                          got != n || !saved ? "file changed while reading" : strerror(saved));
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* `mkdir -p`, as a user expects of an output path (and Hugging Face's save_pretrained does): a
 * component that exists is used as it is, a missing one is made. Each is looked at before it is
 * made, so that an existing directory on a read-only file system or in one we may not write to
 * is not refused; two processes making the same one both succeed (EEXIST, then a directory).
 * Messages begin with `output`, the path the caller was asked to write. */
static int make_dirs(const char *path, const char *output, dt_error *err) {
    char p[4096];
    if (dt_pathf(p, sizeof p, err, "%s", path) != 0) return -1;
    const size_t n = strlen(p);
    if (n == 0) return dt_fail(err, "an empty directory name");
    for (size_t i = 1; i <= n; i++) {
        if ((i < n && p[i] != '/') || p[i - 1] == '/') continue; /* the end of a component: p[0, i) */
        const char c = p[i];
        p[i] = '\0';
        struct stat st;
        int rc = 0;
        if (stat(p, &st) != 0 && mkdir(p, 0755) != 0 && errno != EEXIST)
            rc = dt_fail_io(err, "%s: cannot create the directory %s: %s", output, p, strerror(errno));
        else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            rc = !strcmp(p, output) ? dt_fail_io(err, "%s: exists and is not a directory", output)
                                    : dt_fail_io(err, "%s: %s exists and is not a directory, so nothing can be "
                                                      "created in it", output, p);
        if (rc != 0) return rc;
        p[i] = c;
    }
    return 0;
}

int dir_ensure(const char *path, dt_error *err) { return make_dirs(path, path, err); }

int dir_ensure_parent(const char *path, dt_error *err) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path) return 0; /* the working directory, or / */
    char dir[4096];
    if ((size_t)(slash - path) >= sizeof dir) return dt_fail(err, "%s: path too long", path);
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
    return make_dirs(dir, path, err);
}
