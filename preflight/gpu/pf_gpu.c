#include "log.h"
#include "pf_gpu.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <jansson.h>
#include <nccl.h>

void pf_gpu_format_uuid(const unsigned char b[16], char *out, size_t cap)
{
    snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

int pf_gpu_query(int dev, struct pf_gpu *g, char *err, size_t cap)
{
    struct cudaDeviceProp p;
    cudaError_t ce;

    memset(g, 0, sizeof(*g));
    g->index = dev;
    ce = cudaGetDeviceProperties(&p, dev);
    if (ce != cudaSuccess) {
        snprintf(err, cap, "cudaGetDeviceProperties(%d): %s", dev, cudaGetErrorString(ce));
        return -EIO;
    }
    ce = cudaDeviceGetPCIBusId(g->pci, (int)sizeof(g->pci), dev);
    if (ce != cudaSuccess) {
        snprintf(err, cap, "cudaDeviceGetPCIBusId(%d): %s", dev, cudaGetErrorString(ce));
        return -EIO;
    }
    /* CUDA prints the bus id in upper case ("0000:1B:00.0"); nvidia-smi's UUIDs and our
     * reports use lower case, and the node process compares these strings. */
    for (char *c = g->pci; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    pf_gpu_format_uuid((const unsigned char *)p.uuid.bytes, g->uuid, sizeof(g->uuid));
    snprintf(g->name, sizeof(g->name), "%.*s", (int)sizeof(p.name), p.name);
    g->memory = (uint64_t)p.totalGlobalMem;
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    return 0;
}

void pf_driver_version(char *out, size_t cap)
{
    char line[512];
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    size_t n = 0;

    out[0] = '\0';
    if (f == NULL)
        return;
    /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  <date>" or, for the open
     * modules, "... Open Kernel Module for x86_64  580.159.04  Release Build ...": the version
     * is the first token after "Kernel Module" that starts with a digit. */
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, "Kernel Module");
        if (p == NULL)
            continue;
        for (p += strlen("Kernel Module"); *p; p++) {
            if (isdigit((unsigned char)*p) && isspace((unsigned char)p[-1]))
                break;
        }
        while (*p && (isdigit((unsigned char)*p) || *p == '.') && n + 1 < cap)
            out[n++] = *p++;
        out[n] = '\0';
        break;
    }
    fclose(f);
}

static json_t *gpu_json(const struct pf_gpu *g)
{
    char cc[32];

    snprintf(cc, sizeof(cc), "%d.%d", g->cc_major, g->cc_minor);
    return json_pack("{s:i, s:s, s:s, s:s, s:I, s:s}", "index", g->index, "uuid", g->uuid, "pci",
                     g->pci, "name", g->name, "memory", (json_int_t)g->memory, "cc", cc);
}

/* Versions first, so they appear even when CUDA cannot start. */
static json_t *versions_json(void)
{
    char drv[64];
    int cuda_driver = 0, cuda_runtime = 0, nccl = 0;

    pf_driver_version(drv, sizeof(drv));
    if (cudaDriverGetVersion(&cuda_driver) != cudaSuccess)
        cuda_driver = 0;
    if (cudaRuntimeGetVersion(&cuda_runtime) != cudaSuccess)
        cuda_runtime = 0;
    if (ncclGetVersion(&nccl) != ncclSuccess)
        nccl = 0;
    return json_pack("{s:s, s:i, s:i, s:i}", "driver", drv, "cuda_driver", cuda_driver,
                     "cuda_runtime", cuda_runtime, "nccl", nccl);
}

static int print_json(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

    if (s == NULL) {
        mc_error("out of memory formatting JSON");
        return -ENOMEM;
    }
    printf("%s\n", s);
    fflush(stdout);
    free(s);
    return 0;
}

/* Fills gpus[] with every visible device; returns 0 or -EIO with the error text in err. */
static int list_gpus(json_t *gpus, char *err, size_t cap)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);

    if (ce != cudaSuccess) {
        snprintf(err, cap, "%s", cudaGetErrorString(ce));
        return -EIO;
    }
    if (n <= 0) {
        snprintf(err, cap, "no CUDA device is visible");
        return -EIO;
    }
    for (int d = 0; d < n; d++) {
        struct pf_gpu g;
        if (pf_gpu_query(d, &g, err, cap) < 0)
            return -EIO;
        if (json_array_append_new(gpus, gpu_json(&g)) < 0) {
            snprintf(err, cap, "out of memory");
            return -EIO;
        }
    }
    return 0;
}

int pf_inventory_main(void)
{
    char err[512] = "";
    json_t *o = versions_json();
    json_t *gpus = json_array();
    int code = PFG_EXIT_OK;

    if (o == NULL || gpus == NULL) {
        json_decref(o);
        json_decref(gpus);
        mc_error("out of memory");
        return PFG_EXIT_START;
    }
    if (list_gpus(gpus, err, sizeof(err)) < 0) {
        mc_error("CUDA cannot start: %s", err);
        json_object_set_new(o, "error", json_string(err));
        json_array_clear(gpus); /* the contract: "gpus": [] whenever CUDA failed */
        code = PFG_EXIT_START;
    }
    json_object_set_new(o, "gpus", gpus);
    if (print_json(o) < 0)
        code = PFG_EXIT_START;
    json_decref(o);
    return code;
}
