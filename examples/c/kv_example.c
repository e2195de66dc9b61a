/* The NCCL-unique-id exchange through libmuster, without NCCL: rank 0 makes a 128-byte id
 * (random bytes, like ncclGetUniqueId()), puts it under a key; every other rank waits for the
 * key; then all ranks check they hold the same bytes by a second round of keys and a barrier.
 * Run it under `muster run --no-python`, which sets MUSTER_ENDPOINT, MUSTER_TOKEN,
 * MUSTER_JOB_ID, MUSTER_ROUND, RANK and WORLD_SIZE. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "muster.h"

#define ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define WAIT_MS 30000

static int fail(int rank, const char *what, int err)
{
    fprintf(stderr, "[rank %d] %s: %s\n", rank, what, muster_strerror(err));
    return 1;
}

/* Rank 0 creates and publishes the id; the others wait for it. */
static int exchange_id(struct muster *m, int rank, unsigned char *id)
{
    size_t len = 0;
    int err;

    if (rank == 0) {
        if (getrandom(id, ID_BYTES, 0) != ID_BYTES)
            return -EIO;
        return muster_kv_put(m, "nccl/unique_id", id, ID_BYTES);
    }
    err = muster_kv_get(m, "nccl/unique_id", id, ID_BYTES, &len, WAIT_MS);
    if (err == 0 && len != ID_BYTES)
        err = -EPROTO;
    return err;
}

/* Every rank publishes what it got; after the barrier each compares rank 0's copy with its own. */
static int verify_id(struct muster *m, int rank, int world, const unsigned char *id)
{
    unsigned char seen[ID_BYTES];
    char key[64];
    size_t len = 0;
    int err;

    snprintf(key, sizeof(key), "nccl/seen/%d", rank);
    if ((err = muster_kv_put(m, key, id, ID_BYTES)) < 0)
        return err;
    if ((err = muster_barrier(m, "nccl/id_exchanged", (unsigned)world, WAIT_MS)) < 0)
        return err;
    snprintf(key, sizeof(key), "nccl/seen/%d", (rank + 1) % world); /* a neighbour's copy */
    if ((err = muster_kv_get(m, key, seen, sizeof(seen), &len, 0)) < 0)
        return err;
    return len == ID_BYTES && memcmp(seen, id, ID_BYTES) == 0 ? 0 : -EBADMSG;
}

int main(void)
{
    unsigned char id[ID_BYTES];
    const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
    int rank = r != NULL ? atoi(r) : 0, world = w != NULL ? atoi(w) : 1;
    struct muster *m = NULL;
    int err;

    if (world < 1)
        world = 1;
    if ((err = muster_connect(&m)) < 0)
        return fail(rank, "muster_connect", err);
    if ((err = exchange_id(m, rank, id)) < 0) {
        muster_close(m);
        return fail(rank, "unique id exchange", err);
    }
    if ((err = verify_id(m, rank, world, id)) < 0) {
        muster_close(m);
        return fail(rank, "unique id check", err);
    }
    printf("[rank %d] got id %02x%02x%02x%02x%02x%02x%02x%02x\n", rank, id[0], id[1], id[2], id[3],
           id[4], id[5], id[6], id[7]);
    muster_close(m);
    return 0;
}
