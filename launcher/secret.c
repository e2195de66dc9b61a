#include "secret.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The mapping starts with its own size, so that launcher_secret_free() needs only the pointer,
 * and a magic number, so that a pointer from malloc() given to it aborts instead of unmapping
 * someone else's pages. 16 bytes keep the caller's part aligned like malloc's. */
#define SECRET_HEADER 16
#define SECRET_MAGIC 0x6d75737465727365ULL /* "musterse" */

int launcher_secret_alloc(size_t len, char **out)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t size;
    char *base;

    *out = NULL;
    if (len == 0 || len > SIZE_MAX / 2 || page <= 0)
        return -EINVAL;
    size = (len + SECRET_HEADER + (size_t)page - 1) / (size_t)page * (size_t)page;
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return -ENOMEM;
    /* Best effort, each on its own: an old kernel lacks MADV_WIPEONFORK, and mlock fails when
     * RLIMIT_MEMLOCK is small (the secret may then reach swap, as any heap copy would). */
    (void)madvise(base, size, MADV_DONTDUMP);
#ifdef MADV_WIPEONFORK
    (void)madvise(base, size, MADV_WIPEONFORK);
#endif
    (void)mlock(base, size);
    uint64_t magic = SECRET_MAGIC;
    memcpy(base, &size, sizeof(size));
    memcpy(base + 8, &magic, sizeof(magic));
    *out = base + SECRET_HEADER;
    return 0;
}

int launcher_secret_strdup(const char *s, char **out)
{
    size_t n = strlen(s);
    int rc = launcher_secret_alloc(n + 1, out);

    if (rc == 0)
        memcpy(*out, s, n + 1);
    return rc;
}

void launcher_secret_free(char *p)
{
    char *base;
    size_t size;
    uint64_t magic;

    if (p == NULL)
        return;
    base = p - SECRET_HEADER;
    memcpy(&size, base, sizeof(size));
    memcpy(&magic, base + 8, sizeof(magic));
    if (magic != SECRET_MAGIC)
        abort(); /* not a secret region: a bug in the caller */
    /* munmap leaves the bytes in the freed physical pages until the kernel reuses them */
    explicit_bzero(base, size);
    (void)munlock(base, size);
    munmap(base, size);
}

int launcher_secret_protect_process(void)
{
    const char *allow = getenv(LAUNCHER_SECRET_ALLOW_DUMPS_ENV);

    if (allow != NULL && strcmp(allow, "1") == 0)
        return 0;
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : -errno;
}
