#include "gpus.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

const char *launcher_nvidia_proc_dir(void)
{
    const char *v = getenv("MUSTER_NVIDIA_PROC_DIR");
    return v != NULL && *v != '\0' ? v : LAUNCHER_NVIDIA_PROC_DIR_DEFAULT;
}

static int count_dir(const char *proc_dir)
{
    DIR *d = opendir(proc_dir);
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

int launcher_count_gpus(const char *proc_dir, const char *cuda_visible)
{
    int total = count_dir(proc_dir), n = 0;
    char seen[256] = {0};

    if (cuda_visible == NULL)
        return total;
    for (const char *s = cuda_visible; *s && total > 0;) {
        size_t len = strcspn(s, ",");
        char item[128];
        if (len == 0 || len >= sizeof(item))
            break;
        memcpy(item, s, len);
        item[len] = '\0';
        if (strncmp(item, "GPU-", 4) == 0 || strncmp(item, "MIG-", 4) == 0) {
            n++; /* a UUID: only NVML could check it, and the agent stays away from it */
        } else {
            char *end;
            long idx = strtol(item, &end, 10);
            if (*end != '\0' || idx < 0 || idx >= total || idx >= 256 || seen[idx])
                break; /* CUDA ignores this entry and every one after it */
            seen[idx] = 1;
            n++;
        }
        s += len + (s[len] == ',');
    }
    return n < total ? n : total;
}
