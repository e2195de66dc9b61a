#include "numa.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 64
#define MAX_GPUS 64

struct topo {
    const char *root; /* "/sys" or MUSTER_SYSFS_ROOT */
    cpu_set_t allowed;
    int nnodes;
    int node_id[MAX_NODES];
    cpu_set_t node_cpus[MAX_NODES]; /* within allowed; empty nodes are left out */
    int ngpus;
    int gpu_node[MAX_GPUS]; /* index into node_id, -1: not one of ours */
};

/* Reads root/rel (printf-style) into buf; 0 or -1. */
static int read_sys(const struct topo *t, char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int read_sys(const struct topo *t, char *buf, size_t len, const char *fmt, ...)
{
    char rel[256], path[512];
    va_list ap;
    FILE *f;
    size_t n;

    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "%s/%s", t->root, rel);
    if ((f = fopen(path, "re")) == NULL)
        return -1;
    n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* "0-3,8,10-11" (sysfs's list format) into set. 0 or -1. */
static int parse_list(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s != '\0') {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || lo < 0)
            return -1;
        if (*end == '-') {
            s = end + 1;
            hi = strtol(s, &end, 10);
            if (end == s || hi < lo)
                return -1;
        }
        if (hi >= CPU_SETSIZE)
            return -1;
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        s = end + (*end == ',');
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return 0;
}

static int read_list(const struct topo *t, cpu_set_t *set, const char *rel, int n)
{
    char buf[4096], path[128];
    snprintf(path, sizeof(path), rel, n);
    return read_sys(t, buf, sizeof(buf), "%s", path) == 0 ? parse_list(buf, set) : -1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int node_index(const struct topo *t, int id)
{
    for (int i = 0; i < t->nnodes; i++)
        if (t->node_id[i] == id)
            return i;
    return -1;
}

/* The NUMA nodes with CPUs this agent may use. */
static void load_nodes(struct topo *t)
{
    for (int id = 0; id < 1024 && t->nnodes < MAX_NODES; id++) {
        cpu_set_t s;
        if (read_list(t, &s, "devices/system/node/node%d/cpulist", id) != 0)
            continue;
        CPU_AND(&s, &s, &t->allowed);
        if (CPU_COUNT(&s) == 0)
            continue;
        t->node_id[t->nnodes] = id;
        t->node_cpus[t->nnodes++] = s;
    }
}

/* NVIDIA GPUs in PCI order (the devices bound to the nvidia driver) and their nodes. */
static int load_gpus(struct topo *t)
{
    char path[512], *names[MAX_GPUS], buf[32];
    int n = 0;
    DIR *d;
    struct dirent *e;

    snprintf(path, sizeof(path), "%s/bus/pci/drivers/nvidia", t->root);
    if ((d = opendir(path)) == NULL)
        return 0;
    while ((e = readdir(d)) != NULL && n < MAX_GPUS) {
        unsigned dom, bus, dev, fn;
        char tail;
        if (sscanf(e->d_name, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4)
            continue;
        if ((names[n] = strdup(e->d_name)) == NULL)
            break;
        n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof(*names), cmp_str);
    for (int i = 0; i < n; i++) {
        int node = 0;
        if (read_sys(t, buf, sizeof(buf), "bus/pci/devices/%s/numa_node", names[i]) == 0)
            node = atoi(buf) < 0 ? 0 : atoi(buf); /* -1 on one-node machines */
        t->gpu_node[i] = node_index(t, node);
        free(names[i]);
    }
    t->ngpus = n;
    return 0;
}

/* Local rank i's GPU: entry i of CUDA_VISIBLE_DEVICES when it holds indices, else GPU i.
 * -1 when it cannot be told (a UUID, or past the GPUs). */
static int gpu_of(const struct topo *t, const char *cvd, int i)
{
    long g = i;
    if (cvd != NULL && *cvd != '\0') {
        const char *s = cvd;
        char *end;
        for (int k = 0; k < i && s != NULL; k++)
            if ((s = strchr(s, ',')) != NULL)
                s++;
        if (s == NULL)
            return -1;
        g = strtol(s, &end, 10);
        if (end == s || (*end != ',' && *end != '\0' && *end != ' '))
            return -1;
    }
    return g >= 0 && g < t->ngpus ? (int)g : -1;
}

/* ---- the modes --------------------------------------------------------------------------- */

/* The lowest CPU in the list at rel (printf with cpu): the name of cpu's group. */
static int group_of(const struct topo *t, int cpu, const char *rel)
{
    char path[160], buf[4096];
    cpu_set_t s;

    snprintf(path, sizeof(path), rel, cpu);
    if (read_sys(t, buf, sizeof(buf), "%s", path) != 0 || parse_list(buf, &s) != 0)
        return cpu;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s))
            return c;
    return cpu;
}

/* The last-level data cache shared with cpu, named by its lowest CPU. */
static int llc_of(const struct topo *t, int cpu)
{
    int best_level = -1, best = cpu;
    char buf[64], rel[160];

    for (int k = 0; k < 16; k++) {
        if (read_sys(t, buf, sizeof(buf), "devices/system/cpu/cpu%d/cache/index%d/type", cpu, k))
            continue;
        if (strcmp(buf, "Unified") != 0 && strcmp(buf, "Data") != 0)
            continue;
        if (read_sys(t, buf, sizeof(buf), "devices/system/cpu/cpu%d/cache/index%d/level", cpu, k) !=
                0 ||
            atoi(buf) <= best_level)
            continue;
        best_level = atoi(buf);
        snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%%d/cache/index%d/shared_cpu_list", k);
        best = group_of(t, cpu, rel);
    }
    return best;
}

static int first_cpu(const cpu_set_t *s)
{
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, s))
            return c;
    return -1;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The groups (by `name`) of node's CPUs: ids[] sorted, count returned. */
static int groups(const struct topo *t, const cpu_set_t *cpus,
                  int (*name)(const struct topo *, int), int *ids)
{
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, cpus))
            continue;
        int g = name(t, c), seen = 0;
        for (int k = 0; k < n && !seen; k++)
            seen = ids[k] == g;
        if (!seen)
            ids[n++] = g;
    }
    qsort(ids, (size_t)n, sizeof(*ids), cmp_int);
    return n;
}

static int core_of(const struct topo *t, int cpu)
{
    return group_of(t, cpu, "devices/system/cpu/cpu%d/topology/thread_siblings_list");
}

/* The CPUs of node k whose group (by name) is g. */
static void cpus_in_group(const struct topo *t, int k, int (*name)(const struct topo *, int), int g,
                          cpu_set_t *out)
{
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &t->node_cpus[k]) && name(t, c) == g)
            CPU_SET(c, out);
}

/* exclusive: member rel of nmem gets its slice of node k's physical cores. */
static int bind_exclusive(const struct topo *t, int k, int rel, int nmem, cpu_set_t *out, char *err,
                          size_t errlen)
{
    static int ids[CPU_SETSIZE];
    int n = groups(t, &t->node_cpus[k], core_of, ids), per = n / nmem, extra = n % nmem;
    int start = rel * per + (rel < extra ? rel : extra), end = start + per + (rel < extra);

    if (per < 1) {
        snprintf(err, errlen,
                 "--numa-binding exclusive: NUMA node %d has %d physical core%s "
                 "for %d GPUs",
                 t->node_id[k], n, n == 1 ? "" : "s", nmem);
        return -EINVAL;
    }
    for (int i = start; i < end; i++)
        cpus_in_group(t, k, core_of, ids[i], out);
    return 0;
}

/* core-complex: the caches with the most CPUs first, then the lowest; member rel takes the
 * rel-th (round robin when the node has fewer caches than members). */
static void bind_core_complex(const struct topo *t, int k, int rel, cpu_set_t *out)
{
    static int ids[CPU_SETSIZE], size[CPU_SETSIZE];
    int n = groups(t, &t->node_cpus[k], llc_of, ids);

    for (int i = 0; i < n; i++) {
        cpu_set_t s;
        CPU_ZERO(&s);
        cpus_in_group(t, k, llc_of, ids[i], &s);
        size[i] = CPU_COUNT(&s);
    }
    for (int i = 1; i < n; i++) /* stable insertion sort by size, larger first */
        for (int j = i; j > 0 && size[j] > size[j - 1]; j--) {
            int a = ids[j], b = size[j];
            ids[j] = ids[j - 1], size[j] = size[j - 1];
            ids[j - 1] = a, size[j - 1] = b;
        }
    cpus_in_group(t, k, llc_of, ids[rel % n], out);
}

static int package_of(const struct topo *t, int k)
{
    char buf[32];
    int cpu = first_cpu(&t->node_cpus[k]);
    if (read_sys(t, buf, sizeof(buf), "devices/system/cpu/cpu%d/topology/physical_package_id",
                 cpu) != 0)
        return -1 - k; /* unknown: a socket of its own */
    return atoi(buf);
}

/* Worker i's node (index into t's nodes) and its place among the members of that node. */
static void place(const struct topo *t, const char *cvd, int nproc, int by_gpu, int i, int *k,
                  int *rel, int *nmem)
{
    *rel = 0, *nmem = 0;
    if (by_gpu) {
        int g = gpu_of(t, cvd, i);
        *k = t->gpu_node[g];
        for (int h = 0; h < t->ngpus; h++) /* torchrun: all the GPUs on the node */
            if (t->gpu_node[h] == *k)
                *rel += h < g, (*nmem)++;
        return;
    }
    *k = (int)((long)i * t->nnodes / nproc);
    for (int j = 0; j < nproc; j++)
        if ((int)((long)j * t->nnodes / nproc) == *k)
            *rel += j < i, (*nmem)++;
}

static int bind_one(const struct topo *t, const char *mode, int k, int rel, int nmem,
                    struct agent_spawn_bind *b, char *err, size_t errlen)
{
    CPU_ZERO(&b->cpus);
    b->mem_node = strcmp(t->root, "/sys") == 0 ? t->node_id[k] : -1;
    memset(b->mems, 0, sizeof(b->mems));
    if (b->mem_node >= 0 && (size_t)b->mem_node < 8 * sizeof(b->mems)) /* the child's mask */
        b->mems[b->mem_node / (8 * sizeof(long))] |= 1UL << (b->mem_node % (8 * sizeof(long)));
    else
        b->mem_node = -1;
    if (strcmp(mode, "node") == 0) {
        b->cpus = t->node_cpus[k];
    } else if (strcmp(mode, "socket") == 0) {
        for (int j = 0; j < t->nnodes; j++)
            if (package_of(t, j) == package_of(t, k))
                CPU_OR(&b->cpus, &b->cpus, &t->node_cpus[j]);
    } else if (strcmp(mode, "exclusive") == 0) {
        return bind_exclusive(t, k, rel, nmem, &b->cpus, err, errlen);
    } else if (strcmp(mode, "core-complex") == 0) {
        bind_core_complex(t, k, rel, &b->cpus);
    } else {
        snprintf(err, errlen, "--numa-binding: unknown mode '%s'", mode);
        return -EINVAL;
    }
    return 0;
}

/* Every worker's GPU is known and on a node of ours. */
static int all_by_gpu(const struct topo *t, const char *cvd, int nproc)
{
    for (int i = 0; i < nproc; i++) {
        int g = gpu_of(t, cvd, i);
        if (g < 0 || t->gpu_node[g] < 0)
            return 0;
    }
    return nproc > 0;
}

int agent_numa_plan(const char *mode, int nproc, const char *cvd, const char *root,
                    struct agent_numa *out, char *err, size_t errlen)
{
    struct topo *t = calloc(1, sizeof(*t));
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (t == NULL)
        return -ENOMEM;
    t->root = root != NULL && *root != '\0' ? root : "/sys";
    if (sched_getaffinity(0, sizeof(t->allowed), &t->allowed) != 0)
        CPU_ZERO(&t->allowed);
    load_nodes(t);
    load_gpus(t);
    out->nnodes = t->nnodes;
    if (t->nnodes <= 1) {
        snprintf(out->why, sizeof(out->why),
                 "%s NUMA node on this machine: --numa-binding %s "
                 "has nothing to bind",
                 t->nnodes ? "one" : "no", mode);
        goto out;
    }
    out->by_gpu = all_by_gpu(t, cvd, nproc);
    if ((out->bind = calloc((size_t)nproc, sizeof(*out->bind))) == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < nproc && rc == 0; i++) {
        int k, rel, nmem;
        place(t, cvd, nproc, out->by_gpu, i, &k, &rel, &nmem);
        rc = bind_one(t, mode, k, rel, nmem, &out->bind[i], err, errlen);
    }
    if (rc == 0)
        out->nbind = nproc;
out:
    free(t);
    if (rc != 0)
        agent_numa_free(out);
    return rc;
}

void agent_numa_free(struct agent_numa *n)
{
    if (n == NULL)
        return;
    free(n->bind);
    n->bind = NULL;
    n->nbind = 0;
}

void agent_numa_describe(const struct agent_numa *n, int i, char *buf, size_t len)
{
    const struct agent_spawn_bind *b = &n->bind[i];
    size_t used = (size_t)snprintf(buf, len, "cpus ");

    for (int c = 0; c < CPU_SETSIZE && used < len; c++) {
        if (!CPU_ISSET(c, &b->cpus) || (c > 0 && CPU_ISSET(c - 1, &b->cpus)))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &b->cpus))
            e++;
        used += (size_t)snprintf(buf + used, len - used, used > 5 ? ",%d" : "%d", c);
        if (e > c && used < len)
            used += (size_t)snprintf(buf + used, len - used, "-%d", e);
    }
    if (used < len && b->mem_node >= 0)
        snprintf(buf + used, len - used, ", memory from node %d first", b->mem_node);
}
