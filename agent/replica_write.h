/* The writer of one checkpoint replica being received (replica.h): a thread of its own takes
 * the copy's bytes in the order they came, writes them through a target (replica_store.h in
 * the agent), hashes them, and at the end verifies the checksum and has the target make the
 * copy durable and put it in place, while the agent's loop goes on. A directory replica of
 * 28,000 members fsynced on the loop silenced its agent for over 3 s: the server declared the
 * node lost and the job failed.
 *
 * A thread per copy, not libuv's pool: the pool's 4 threads also run the agent's getaddrinfo
 * (a direct link's set-up) and the TLS handshake steps of a server the agent hosts (conn.c
 * keeps pool threads free for them); AGENT_REPLICA_MAX_IN copies fsyncing for seconds would
 * fill it.
 *
 * Backpressure: bytes pushed and not yet written are at most `max` (push refuses more). The
 * receiver acknowledges only what was written (agent_replica_writer_written), so a sender that
 * keeps its window never reaches a bound of one window, and a disk slower than the link slows
 * the sender, never the loop.
 *
 * A target whose bytes land at offsets (a file: ops->positional) has its chunks placed by
 * helper threads at once (write_at) while the writer's thread hashes them in order: one
 * thread's pwrite into fresh page-cache pages was what bound a 2 GB copy on a 16-core host
 * (docs/BENCHMARKS.md "Replicas on bulk streams").
 *
 * The loop never waits for the thread: close returns at once; the thread finishes the call in
 * flight, lets the target clean up (remove what is not finished), and the writer frees itself
 * once the thread ended. No callback runs after close, so its owner may go at once. */
#ifndef MUSTER_AGENT_REPLICA_WRITE_H
#define MUSTER_AGENT_REPLICA_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* What the thread calls, one at a time, in this order: open, write for every chunk, finish
 * once every byte is written and the checksum verified, and always close last. open, write
 * and finish return 0 or a negative errno with a one-line reason in why (then only close
 * follows). Plain blocking calls; they never touch the loop. */
struct agent_replica_write_ops {
    int (*open)(void *target, char *why, size_t whylen);
    int (*write)(void *target, const uint8_t *p, size_t n, char *why, size_t whylen);
    int (*finish)(void *target, char *why, size_t whylen);
    /* kept: finish succeeded (the copy stays); else remove what open made. Frees target. */
    void (*close)(void *target, int kept);
    /* Optional (NULL: every byte goes through write, in order). After open: 1 when the
     * target's bytes land at their offsets (a file), so that write_at may place chunks from
     * several threads at once; then write is never called. */
    int (*positional)(void *target);
    /* n bytes at offset off, from any of the writer's threads, several at once at distinct
     * offsets; 0 or a negative errno with why (of whylen bytes, the calling thread's). */
    int (*write_at)(void *target, const uint8_t *p, size_t n, uint64_t off, char *why,
                    size_t whylen);
};

/* Helper threads that place a positional target's chunks (write_at), so that its page cache
 * fills on several cores while the writer's thread hashes in order: a quarter of the cores,
 * 1 to AGENT_REPLICA_WRITE_HELPERS_MAX (MUSTER_REPLICA_WRITE_HELPERS sets it, for tests and
 * benchmarks). A chunk counts as written once it and every chunk
 * before it are placed. */
#define AGENT_REPLICA_WRITE_HELPERS_MAX 4

enum agent_replica_write_event {
    AGENT_REPLICA_WRITE_PROGRESS, /* agent_replica_writer_written grew */
    AGENT_REPLICA_WRITE_DONE,     /* finish succeeded: the copy is in place */
    AGENT_REPLICA_WRITE_FAILED, /* why says what (a call, the checksum); nothing more is written */
};

/* On the loop. May call agent_replica_writer_close. DONE and FAILED come once, last; during
 * DONE the loop may read the target (the thread waits for close before it touches it again). */
typedef void (*agent_replica_write_cb)(void *data, enum agent_replica_write_event ev,
                                       const char *why);

struct agent_replica_writer; /* replica_write.c */

/* Starts a writer of a copy whose bytes must hash (XXH3-64) to checksum; at most max bytes
 * queued. Takes target on every path (on an error it is closed, not kept, before the return;
 * open never ran then). Borrows loop and ops. Returns 0 with *out set, or -ENOMEM or a UV_E*
 * error (the thread could not start); cb is then never called. */
int agent_replica_writer_start(uv_loop_t *loop, const struct agent_replica_write_ops *ops,
                               void *target, uint64_t checksum, size_t max,
                               agent_replica_write_cb cb, void *data,
                               struct agent_replica_writer **out);

/* Queues a copy of the next n bytes. Returns 0, -ENOBUFS when queued + n would pass max
 * (nothing queued), -EPIPE after finish or a failure, or -ENOMEM. */
int agent_replica_writer_push(struct agent_replica_writer *w, const uint8_t *p, size_t n);

/* Like push, from any thread (replica_bulk.h's), for a writer whose bytes all come this way,
 * without a copy: data is a buffer of agent_replica_writer_buf's holding the next n bytes,
 * which the writer takes on success and frees once written. At most max bytes fed and not yet
 * written by the thread. Returns 0, or -ENOBUFS (nothing queued) or -EPIPE once finishing,
 * failed or closed: data stays the caller's then. */
int agent_replica_writer_feed(struct agent_replica_writer *w, uint8_t *data, size_t n);

/* A buffer of n bytes for agent_replica_writer_feed (NULL without memory), and its release
 * when it was not fed (accepts NULL). */
uint8_t *agent_replica_writer_buf(size_t n);
void agent_replica_writer_buf_free(uint8_t *data);

/* Where the writer's time went, as one line: hashing, writing (placing, summed over the
 * helpers) and waiting for the helpers. For the log of a finished copy and benchmarks. */
void agent_replica_writer_times(struct agent_replica_writer *w, char *out, size_t cap);

/* The bytes allowed queued from now on (a direct link that became a bulk path's). */
void agent_replica_writer_set_max(struct agent_replica_writer *w, size_t max);

/* Every byte was pushed: verify and finish after the last write (DONE or FAILED follows).
 * Returns 0, or -EPIPE when called twice or after a failure. */
int agent_replica_writer_finish(struct agent_replica_writer *w);

/* Bytes written as the last callback said; bytes pushed and not yet written. */
uint64_t agent_replica_writer_written(const struct agent_replica_writer *w);
size_t agent_replica_writer_queued(const struct agent_replica_writer *w);

/* Ends w without waiting (see above). Accepts NULL. */
void agent_replica_writer_close(struct agent_replica_writer *w);

#endif
