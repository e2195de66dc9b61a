/* libFuzzer target: the checkpoint registry JSON loader, agent_ckpt_registry_load(), on a file.
 * The input is written to one temporary file per process (created once, rewritten each run).
 * Oracle: every loaded entry has a valid name (prune deletes by name: "../x" must never load),
 * a failed load leaves the registry as it was, and a loaded registry saves and reloads. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_hash.h"

static char path[64];
static char save_path[80];
static int fd = -1;

static void cleanup(void)
{
    if (fd >= 0)
        unlink(path);
    unlink(save_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* /dev/shm when there is one: the save/reload check fsyncs, which a disk makes slow. */
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || strlen(tmp) >= 30)
        tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof(path), "%s/muster-fuzz-reg-XXXXXX", tmp);
    fd = mkstemp(path);
    if (fd < 0)
        abort();
    snprintf(save_path, sizeof(save_path), "%s.saved", path);
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct agent_ckpt_registry reg, again;
    struct agent_ckpt_entry sentinel;
    int rc;

    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    agent_ckpt_registry_init(&reg);
    memset(&sentinel, 0, sizeof(sentinel));
    strcpy(sentinel.name, "sentinel.pt");
    sentinel.step = 7;
    if (agent_ckpt_registry_add(&reg, &sentinel) != 0)
        abort();
    rc = agent_ckpt_registry_load(&reg, path);
    if (rc != 0) {
        if (reg.n != 1 || strcmp(reg.entries[0].name, "sentinel.pt") != 0)
            abort(); /* "reg is left unchanged on error" */
    } else {
        for (size_t i = 0; i < reg.n; i++)
            if (!agent_ckpt_name_valid(reg.entries[i].name))
                abort();
        /* What loaded must survive a save/load cycle unchanged in count. */
        agent_ckpt_registry_init(&again);
        if (agent_ckpt_registry_save(&reg, save_path) == 0) {
            if (agent_ckpt_registry_load(&again, save_path) != 0 || again.n != reg.n)
                abort();
        }
        agent_ckpt_registry_close(&again);
    }
    agent_ckpt_registry_close(&reg);
    return 0;
}
