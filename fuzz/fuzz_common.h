/* Helpers shared by the launcher fuzz targets. Header-only: each target is one .c file. */
#ifndef MUSTER_FUZZ_COMMON_H
#define MUSTER_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Removes every PET_* / SLURM_* / MUSTER_* / torchrun variable the config parser reads, so that
 * the machine running the fuzzer cannot change what an input does (reproducible crashes). Call
 * once, from LLVMFuzzerInitialize. */
static inline void fuzz_clean_env(void)
{
    extern char **environ;
    static const char *const exact[] = {"CUDA_VISIBLE_DEVICES", "PYTHON_EXEC",
                                        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", NULL};
    int again = 1;

    while (again) { /* unsetenv reshuffles environ: rescan until a pass removes nothing */
        again = 0;
        for (char **e = environ; e != NULL && *e != NULL; e++) {
            if (strncmp(*e, "PET_", 4) == 0 || strncmp(*e, "SLURM_", 6) == 0 ||
                strncmp(*e, "MUSTER_", 7) == 0) {
                char name[256];
                size_t n = strcspn(*e, "=");
                if (n >= sizeof(name))
                    continue;
                memcpy(name, *e, n);
                name[n] = '\0';
                unsetenv(name);
                again = 1;
                break;
            }
        }
    }
    for (int i = 0; exact[i] != NULL; i++)
        unsetenv(exact[i]);
}

/* A NUL-terminated copy of data[0..size) (the caller frees it); NULL when out of memory. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    if (s != NULL) {
        memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}

/* Splits data into a NULL-terminated vector of NUL-separated strings, at most max of them.
 * *store receives the single allocation that backs the strings; free it and the vector. */
static inline char **fuzz_split(const uint8_t *data, size_t size, int max, int *argc, char **store)
{
    char *s = fuzz_strndup(data, size);
    char **v = calloc((size_t)max + 1, sizeof(*v));
    int n = 0;

    if (s == NULL || v == NULL) {
        free(s);
        free(v);
        return NULL;
    }
    for (char *p = s; p <= s + size && n < max; p += strlen(p) + 1)
        v[n++] = p;
    if (size == 0)
        n = 0;
    *argc = n;
    *store = s;
    return v;
}

#endif
