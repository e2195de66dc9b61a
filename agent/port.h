/* MASTER_PORT reservation: a TCP port this node verified free, kept bound (SO_REUSEADDR, not
 * listening) while the workers run so that no other program's bind(0) or connect() can take
 * it; the TCPStore (group rank 0's agent's, agent/store.h, or worker rank 0's) still binds it
 * (SO_REUSEADDR on both sides, only it listens). */
#ifndef MUSTER_AGENT_PORT_H
#define MUSTER_AGENT_PORT_H

/* Binds an ephemeral port on every address. Returns 0 and sets *fd and *port, or a negative
 * errno. Close *fd with close() once the port is no longer needed. */
int agent_port_reserve(int *fd, unsigned *port);

#endif
