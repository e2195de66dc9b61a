/* Per-source limits on TLS handshakes: how many handshakes one source (the server
 * passes its /24 or /64 group, rdzv_hslimit_group, as the address) may
 * have in flight, and how many new ones it may start per second (a token bucket). The server
 * asks before it does any TLS work for a new connection, so that a flood of ClientHellos from
 * one address costs a bounded share of the server's CPU whatever its rate.
 *
 * Sources are 16-byte addresses (IPv4 as v4-mapped IPv6) in an open-addressing hash table that
 * grows up to max_sources entries. An entry with nothing in flight and a full bucket is the same
 * as no entry, so such entries are dropped when room is needed: the table holds only sources
 * that are busy or were recently. Not thread-safe: the server's loop thread only. */
#ifndef MUSTER_RDZV_HSLIMIT_H
#define MUSTER_RDZV_HSLIMIT_H

#include <stdint.h>

struct rdzv_hslimit;

/* Makes an empty table that holds at most max_sources addresses (at least 16). Returns 0 or
 * -ENOMEM; *out is set on success. */
int rdzv_hslimit_new(unsigned max_sources, struct rdzv_hslimit **out);

/* Frees the table. Accepts NULL. */
void rdzv_hslimit_free(struct rdzv_hslimit *l);

/* Sets the limits (applies to later calls; counts in flight are kept): max_in_flight
 * handshakes per source at once, rate new handshakes per second per source with a bucket of
 * burst (at least 1). 0 for max_in_flight or rate means no such limit. */
void rdzv_hslimit_configure(struct rdzv_hslimit *l, unsigned max_in_flight, unsigned rate,
                            unsigned burst);

/* A new handshake from addr at now_ms (a monotonic clock). Returns 0 when it may start (it is
 * counted in flight: call rdzv_hslimit_end exactly once later), -EBUSY when addr has
 * max_in_flight handshakes in flight, -EAGAIN when its bucket is empty (over the rate), or
 * -ENOMEM when the table is full of sources with handshakes in flight (or out of memory).
 * Refusals take no token. */
int rdzv_hslimit_begin(struct rdzv_hslimit *l, const uint8_t addr[16], uint64_t now_ms);

/* The handshake from addr that rdzv_hslimit_begin admitted finished, failed or was closed. */
void rdzv_hslimit_end(struct rdzv_hslimit *l, const uint8_t addr[16]);

/* The group a source address counts against: its /24 for IPv4 (v4-mapped), its
 * /64 for IPv6. One machine or one user rarely holds a single address (a login node's users,
 * an IPv6 host's privacy addresses, a flood binding 127.0.0.x one by one), and a /24 or /64 is
 * what one site usually gets; keyed on the exact address, 130 addresses were enough to fill
 * every limit. group may be addr. */
void rdzv_hslimit_group(const uint8_t addr[16], uint8_t group[16]);

/* Gives back the token that rdzv_hslimit_begin took for addr: the connection closed without
 * sending a byte, so it cost no TLS work. A flood of silent connections from a /24 then does
 * not empty the bucket that an agent of that /24 needs to connect. */
void rdzv_hslimit_refund(struct rdzv_hslimit *l, const uint8_t addr[16]);

/* Addresses in the table now (for tests and metrics). */
unsigned rdzv_hslimit_sources(const struct rdzv_hslimit *l);

/* Handshakes in flight from addr (for tests). */
unsigned rdzv_hslimit_in_flight(const struct rdzv_hslimit *l, const uint8_t addr[16]);

#endif
