/* The one test harness of the unit tests (libuv's test/task.h plays this part
 * there): run a private loop until a condition holds under a watchdog, let time pass on it,
 * close it checking that no handle leaked, and temporary files and directories.
 *
 * Async tests count callbacks instead of sleeping (docs/ARCHITECTURE.md "Adding a test"):
 * HARNESS_RUN_UNTIL runs the loop one iteration at a time and re-evaluates the condition after
 * each, so a callback need not tell anyone that something changed, and a condition the loop never
 * makes true fails at the watchdog instead of hanging the test. */
#ifndef MUSTER_TESTS_HARNESS_H
#define MUSTER_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct harness {
    uv_loop_t *loop;
    uv_timer_t watchdog;
    uv_timer_t later; /* harness_run_for */
    unsigned timeout_ms;
    int fired; /* the watchdog fired during the last wait */
    int later_fired;
    /* explain (may be NULL): called once when a wait fails, to print what the test knows
     * (a server's log, its clients' states) before the failure is reported */
    void (*explain)(void *data);
    void *data;
};

/* Starts the two timers of h on loop (borrowed). timeout_ms: the watchdog of every wait. */
void harness_init(struct harness *h, uv_loop_t *loop, unsigned timeout_ms);

/* Closes h's timers (the caller's uv_run completes the close). */
void harness_close(struct harness *h);

/* Runs loop until nothing is left to close and asserts that uv_loop_close() succeeds, i.e.
 * that every handle was closed: a leaked handle fails the test instead of looping forever.
 * Handles still open are listed (uv_print_all_handles) and closed first. */
void harness_loop_close(uv_loop_t *loop);

/* Runs h's loop until cond (an expression, evaluated after every iteration) holds; fails the
 * test, saying which condition and where, when the watchdog fires first. */
#define HARNESS_RUN_UNTIL(h, cond)                                                                 \
    do {                                                                                           \
        harness_arm_(h);                                                                           \
        while (!(cond) && !(h)->fired)                                                             \
            uv_run((h)->loop, UV_RUN_ONCE);                                                        \
        harness_done_(h, (cond) != 0, #cond, __FILE__, __LINE__);                                  \
    } while (0)

/* Lets the loop run for ms (timers and I/O proceed): what must NOT happen meanwhile is
 * asserted afterwards. */
void harness_run_for(struct harness *h, uint64_t ms);

void harness_arm_(struct harness *h);
void harness_done_(struct harness *h, int ok, const char *cond, const char *file, int line);

/* --- files ------------------------------------------------------------------------------ */

/* Creates a fresh private directory /tmp/muster-<what>-XXXXXX into dir (len >= 64). Asserts. */
void harness_mkdtemp(char *dir, size_t len, const char *what);

/* The start of a fixture that owns a loop and a temp directory: uv_loop_init(loop) (asserted),
 * harness_init(h, loop, timeout_ms), then harness_mkdtemp(dir, len, what). */
void harness_init_tmp(struct harness *h, uv_loop_t *loop, unsigned timeout_ms, char *dir,
                      size_t len, const char *what);

/* Removes path and everything under it (nftw, no shell). Missing: nothing to do. */
void harness_rmtree(const char *path);

/* Writes text to path (created 0600, or truncated) or fails the test. */
void harness_write_file(const char *path, const char *text);

/* Reads at most len - 1 bytes of path into buf, NUL-terminated. Returns the length or -1. */
long harness_read_file(const char *path, char *buf, size_t len);

/* The permission bits (07777) of dir/rel, not following a last symlink. Fails the test where
 * it does not exist. */
mode_t harness_mode(const char *dir, const char *rel);

#endif
