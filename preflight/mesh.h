/* Pre-flight stage 2: the TCP reachability mesh. Every node listens on an ephemeral port and
 * answers pings; every node connects to every other node and to MASTER_ADDR:MASTER_PORT (where
 * group rank 0's node listens for the length of the stage), sends one ping and times the echo.
 * Plain blocking-free sockets and poll(): this runs in the pre-flight's own process. */
#ifndef MUSTER_PREFLIGHT_MESH_H
#define MUSTER_PREFLIGHT_MESH_H

#include <stdint.h>

#define PF_MESH_ADDR_MAX 64

/* A listening socket that echoes pings from a thread until pf_mesh_listener_close(). */
struct pf_mesh_listener {
    int fd;
    unsigned port;
    int thread_started;
    int stop_pipe[2];
    uint64_t thread; /* pthread_t */
};

/* Listens on every address, on port (0: ephemeral; otherwise bound with SO_REUSEADDR so it can
 * share the agent's MASTER_PORT reservation). Returns 0 or a negative errno. */
int pf_mesh_listen(struct pf_mesh_listener *l, unsigned port);
void pf_mesh_listener_close(struct pf_mesh_listener *l);

struct pf_mesh_target {
    char host[PF_MESH_ADDR_MAX]; /* numeric address or name */
    unsigned port;
    /* results */
    int ok;
    double rtt_us; /* connect + one ping round trip */
    double connect_us;
    char error[128];
};

/* Connects to every target at once (non-blocking), sends a ping and waits for its echo, all
 * within timeout_ms. Fills each target's results. Returns the number of failed targets. */
int pf_mesh_probe(struct pf_mesh_target *t, int n, int timeout_ms);

/* The local address this node uses to reach host (a connected UDP socket's name: no packet is
 * sent). Writes a numeric address into out. Returns 0 or a negative errno. */
int pf_mesh_local_addr(const char *host, char *out, int cap);

#endif
