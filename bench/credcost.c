/* What the credential checks cost the server, per peer: deriving the key of a
 * claimed PSK identity (HMAC-SHA256, once per TLS handshake) and checking a node secret against
 * its node id (SHA-256, once per JOIN/REJOIN). Built by CMake as build/bench/credcost, run by
 * bench/cred_bench.sh. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cred.h"

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
    const unsigned char id[] = "job:team-a-*";
    unsigned char master[RDZV_KEY_LEN], secret[RDZV_KEY_LEN];
    struct rdzv_cred c;
    uint64_t node;
    const int n = 200000;
    double t0, t1, t2;

    rdzv_cred_master("bench-secret", master);
    if (rdzv_node_secret_new(secret, &node) != 0)
        return 1;
    t0 = now_s();
    for (int i = 0; i < n; i++)
        if (rdzv_cred_from_identity(master, id, sizeof(id) - 1, &c) != 0)
            return 1;
    t1 = now_s();
    for (int i = 0; i < n; i++)
        if (!rdzv_node_secret_ok(secret, node))
            return 1;
    t2 = now_s();
    printf("identity_to_key_us %.2f\nnode_secret_check_us %.2f\n", (t1 - t0) / n * 1e6,
           (t2 - t1) / n * 1e6);
    return 0;
}
