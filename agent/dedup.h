/* --dedup: a console line said identically by several workers within a short window is printed
 * once, as "[ranks 0-3,5]: text". Pure logic (no I/O, no clock): the caller passes the time,
 * arms its own timer for agent_dedup_deadline() and gets lines back through emit_cb.
 *
 * Order: one queue of entries; a rank joins an entry queued after its own previous line, or
 * one before it that can move behind that line without passing a later line of any of its
 * ranks, so one rank's lines are never reordered (different ranks' lines never had an order).
 * Delay: when an entry's window ends, it leaves with everything queued before it, so no line
 * waits longer than the window; an entry that every expected rank has joined leaves at once. */
#ifndef MUSTER_AGENT_DEDUP_H
#define MUSTER_AGENT_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#define AGENT_DEDUP_WINDOW_MS 100
#define AGENT_DEDUP_LINE_MAX 4096  /* longer lines are not compared: the caller prints them */
#define AGENT_DEDUP_QUEUE_MAX 1024 /* each new line scans them; beyond it the oldest leave */

struct agent_dedup;

/* One line out. ranks (sorted, n >= 1) said text (len bytes, without its newline) on fd;
 * prefix is the first rank's own console prefix, for n == 1. All borrowed for the call. */
typedef void (*agent_dedup_emit_cb)(void *arg, int fd, const int *ranks, size_t n,
                                    const char *prefix, const char *text, size_t len);

/* Returns 0 or -ENOMEM. emit_cb and arg are borrowed. */
int agent_dedup_new(unsigned window_ms, agent_dedup_emit_cb emit_cb, void *arg,
                    struct agent_dedup **out);

/* Emits everything still queued, then frees. Accepts NULL. */
void agent_dedup_free(struct agent_dedup *d);

/* Queues line text (len <= AGENT_DEDUP_LINE_MAX, no newline) of rank on fd at now_ms.
 * *last_seq is the caller's per-stream cookie (0 at first): the entry the stream's previous
 * line is in. expected: how many streams feed fd, so that an entry all of them joined leaves
 * at once. Returns 0 or -ENOMEM (nothing queued: print the line yourself after
 * agent_dedup_flush_to(*last_seq)). May emit. */
int agent_dedup_add(struct agent_dedup *d, int fd, int rank, const char *prefix, const char *text,
                    size_t len, uint64_t now_ms, int expected, uint64_t *last_seq);

/* Emits every entry up to and including the one named seq (0 or gone: nothing), so that what
 * the stream prints next comes after its queued lines. */
void agent_dedup_flush_to(struct agent_dedup *d, uint64_t seq);

/* Emits the entries whose window has passed at now_ms. */
void agent_dedup_flush_due(struct agent_dedup *d, uint64_t now_ms);

/* When the oldest entry is due (ms, same clock as now_ms), or 0 when nothing is queued. */
uint64_t agent_dedup_deadline(const struct agent_dedup *d);

/* Writes the sorted ranks compressed into ranges ("0-3,5,7-8") to buf (always terminated).
 * Returns the length it needed, like snprintf. */
size_t agent_dedup_ranks_fmt(const int *ranks, size_t n, char *buf, size_t len);

#endif
