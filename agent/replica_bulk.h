/* The bulk data path of a checkpoint replica (replica.h): once a direct link (replica_link.h)
 * is named, the chunks leave mbedTLS's record layer, whose ChaCha20-Poly1305 held a copy to one
 * core's ~150-250 MB/s (docs/BENCHMARKS.md "Where a replica's time goes"), and go on S plain TCP
 * streams, each record sealed with AES-256-GCM by OpenSSL's libcrypto (AES-NI/VAES), read,
 * sealed, sent, opened and handed to the writer on threads of their own, never on the loop.
 *
 * Keys: HKDF-SHA256 of the checkpoint's link key (random per checkpoint, passed by the server
 * inside TLS to the chosen receivers only) with a random 32-byte salt per offer (sent on the
 * authenticated link) and the transfer id as info: a fresh key per copy attempt. Nonces: the
 * stream's index and the record's number on it, so no (key, nonce) pair repeats; the receiver's
 * hello on a stream uses the index with the top bit set. docs/SECURITY.md "Replica bulk path".
 *
 * On a stream: the receiver's hello (a sealed empty record naming the stream), then the
 * sender's records: a 16-byte header in the clear and authenticated (length, type, offset),
 * the sealed bytes, the 16-byte tag. Chunks are AGENT_REPLICA_BULK_CHUNK bytes (the last one
 * shorter), each stream's in increasing order; the receiver refuses a record at an offset not
 * a chunk's, of a length not that chunk's, past the size, already delivered, or whose tag does
 * not verify, and hands chunks to the writer in order (at most a chunk per stream waits).
 *
 * Flow: the sender takes a chunk only while sent - confirmed + chunk <= window; confirmations
 * are the writer's progress, acknowledged on the link (agent_replica_bulk_confirmed), so the
 * sender reads from disk only as fast as the receiver writes; its memory is a chunk per stream.
 * The receiver refuses more than a window pushed to its writer and not yet written. */
#ifndef MUSTER_AGENT_REPLICA_BULK_H
#define MUSTER_AGENT_REPLICA_BULK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "replica_dir.h"

#define AGENT_REPLICA_BULK_CHUNK (1u << 20)
#define AGENT_REPLICA_BULK_WINDOW (32u << 20) /* sent and not yet confirmed written */
#define AGENT_REPLICA_BULK_STREAMS_MAX 8
#define AGENT_REPLICA_BULK_SETUP_MS 5000  /* every stream connected and its hello proved */
#define AGENT_REPLICA_BULK_STALL_MS 60000 /* a stream silent that long (no byte either way) */
#define AGENT_REPLICA_BULK_HDR 16
#define AGENT_REPLICA_BULK_TAG 16

enum agent_replica_bulk_event {
    AGENT_REPLICA_BULK_SENT,     /* sender: every chunk was handed to the sockets */
    AGENT_REPLICA_BULK_RECEIVED, /* receiver: every chunk was handed to the writer */
    AGENT_REPLICA_BULK_FAILED,   /* either: the transport failed (why); the streams are closed */
    AGENT_REPLICA_BULK_REFUSED,  /* receiver: the sender broke the protocol (why): not retried */
};

/* On the loop, once (SENT/RECEIVED or FAILED), never after agent_replica_bulk_close. */
typedef void (*agent_replica_bulk_cb)(void *data, enum agent_replica_bulk_event ev,
                                      const char *why);

struct agent_replica_bulk;
struct agent_replica_writer;

/* Streams per copy: MUSTER_REPLICATE_STREAMS (0: no bulk path, the chunks stay on the TLS
 * link; 1..8) or a quarter of the cores, 1 to 4. */
unsigned agent_replica_bulk_streams(void);

/* Sender: listens on bind_addr ("" every address) port (0 ephemeral) for `streams`
 * connections and sends size bytes read from fd (a file; dup'ed) or from src (a directory
 * checkpoint's stream; cloned), which the caller may close at once, at most bytes_per_ms
 * (0: no cap; --replicate-bandwidth's share of this copy). Returns 0 with *out, the port and
 * the salt to offer on the link, or a negative errno. */
int agent_replica_bulk_serve(uv_loop_t *loop, const char *bind_addr, unsigned port,
                             const uint8_t link_key[32], uint32_t xfer, unsigned streams,
                             uint64_t size, double bytes_per_ms, int fd,
                             const struct agent_replica_src *src, agent_replica_bulk_cb cb,
                             void *data, struct agent_replica_bulk **out, uint16_t *port_out,
                             uint8_t salt_out[32]);

/* Sender: the receiver confirmed this many bytes written (its PROGRESS on the link). */
void agent_replica_bulk_confirmed(struct agent_replica_bulk *b, uint64_t written);

/* Where the streams' time went, summed over their threads, as one line: the sender's read,
 * seal, send and wait for the window; the receiver's receive, open and wait for the chunks
 * before its own (in order to the writer). For the log of a finished copy and benchmarks. */
void agent_replica_bulk_times(struct agent_replica_bulk *b, char *out, size_t cap);

/* Receiver: connects `streams` streams to host:port and feeds size bytes, verified and in
 * order, to wr (agent_replica_writer_feed) with at most `window` bytes queued there. */
int agent_replica_bulk_fetch(uv_loop_t *loop, const char *host, unsigned port,
                             const uint8_t link_key[32], const uint8_t salt[32], uint32_t xfer,
                             unsigned streams, uint64_t size, struct agent_replica_writer *wr,
                             agent_replica_bulk_cb cb, void *data, struct agent_replica_bulk **out);

/* Ends b without waiting: the threads stop (sockets shut down), no callback comes, and b frees
 * itself once the last thread is gone. A receiver's writer is not touched after this returns.
 * Accepts NULL. */
void agent_replica_bulk_close(struct agent_replica_bulk *b);

/* Bytes the sender took from the file so far (read, being sealed or sent): at most the
 * confirmed bytes and a window. */
uint64_t agent_replica_bulk_taken(struct agent_replica_bulk *b);

/* For tests: seals one record as a sender would (buf: HDR + n + TAG bytes). */
int agent_replica_bulk_seal_for_test(const uint8_t link_key[32], const uint8_t salt[32],
                                     uint32_t xfer, uint32_t stream, uint64_t seq, uint8_t type,
                                     uint64_t offset, const uint8_t *p, uint32_t n, uint8_t *buf);

#define AGENT_REPLICA_BULK_HELLO 1
#define AGENT_REPLICA_BULK_DATA 2
#define AGENT_REPLICA_BULK_HELLO_BIT 0x80000000u /* in a hello's nonce: the receiver's */

#endif
