/* One destination of output (the agent's console fd 1 or 2, a worker's log file, the server's
 * stderr) behind a bounded queue and a writer thread of its own: the event loop only copies
 * bytes into the queue and never waits for the terminal, pipe or disk behind the fd (a console
 * nobody read blocked the loop, and with it SIGTERM handling and heartbeats).
 *
 * Why a thread doing blocking writes rather than an O_NONBLOCK fd on the loop: fds 1 and 2 are
 * inherited, and O_NONBLOCK is a flag of the open file description, shared with the shell, the
 * other programs of a pipeline and anything else holding it; setting it would make their writes
 * fail with EAGAIN. Regular files (log files on a slow or stalled disk) ignore O_NONBLOCK
 * anyway. A thread also writes whatever mode the fd comes in (it polls on EAGAIN).
 *
 * Bounds: the queue takes everything up to the hard limit (MC_SINK_HARD_FACTOR x budget) and
 * refuses, counting the bytes, beyond it. Producers that can wait (a worker's pipe) stop when
 * mc_sink_over() says the budget is used and resume when the wake handle fires (the queue is
 * down to half the budget): in normal operation nothing is dropped. All functions are thread
 * safe (one mutex for every sink: they are few and the critical sections copy memory only). */
#ifndef MUSTER_COMMON_SINK_H
#define MUSTER_COMMON_SINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <uv.h>

#define MC_SINK_HARD_FACTOR 4 /* the hard limit is this many budgets */

struct mc_sink;

/* Starts a writer for fd. owns_fd: the writer closes fd once it has drained after
 * mc_sink_close. wake (borrowed; NULL: none) is uv_async_send'd from the writer thread when
 * a queue that was found over budget is down to budget / 2, or the writer stopped on an error.
 * Returns 0 with *out set, or a negative errno (-ENOMEM, pthread_create's); on error an owned
 * fd is still the caller's. */
int mc_sink_new(int fd, int owns_fd, size_t budget, uv_async_t *wake, struct mc_sink **out);

/* Queues the bytes of iov (cnt entries) as one piece: they are written in order, after
 * everything queued before. Never waits for the writer. Returns 0; -ENOBUFS when the queue is at
 * its hard limit (the bytes are dropped and counted); or the negative errno the writer stopped
 * on (-EPIPE: the reader went away; nothing is queued any more). */
int mc_sink_writev(struct mc_sink *s, const struct iovec *iov, int cnt);

/* 1 when the queued bytes reach the budget (and then arms the wake for the drain), else 0.
 * A writer that stopped on an error is never over. */
int mc_sink_over(struct mc_sink *s);

/* Bytes queued and not yet written. */
size_t mc_sink_queued(struct mc_sink *s);

/* Replaces the wake handle (NULL: none); call with NULL before closing that handle. */
void mc_sink_set_wake(struct mc_sink *s, uv_async_t *wake);

/* Sets the wake handle of every sink that has wake to NULL: call before closing it. */
void mc_sink_forget_wake(uv_async_t *wake);

/* No more writes: the writer drains the queue, closes an owned fd and frees the sink on its
 * own (a stalled disk never holds up the caller). Accepts NULL. */
void mc_sink_close(struct mc_sink *s);

/* Routes muster's own log lines (common/log.h) into s from now on, in order with everything
 * else queued there, so that a stalled stderr never holds the caller; a line beyond the hard
 * limit is dropped and counted. before (NULL: none) runs first for each line, on the thread
 * that logs. NULL s restores log.h's direct, bounded write. Borrows s: call with NULL before
 * closing it. Not thread safe itself: call while one thread runs. */
void mc_sink_take_log(struct mc_sink *s, void (*before)(void));

/* Waits at most timeout_ms until every sink, closed or not, has written all it holds. Returns
 * the bytes that were not written: still queued at the deadline plus those refused at the hard
 * limit so far (0: everything got out). Sinks keep working afterwards. */
uint64_t mc_sink_drain_all(unsigned timeout_ms);

#endif
