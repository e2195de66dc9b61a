/* One filled, valid example of every message type (rendezvous/message.h), in one place: the
 * codec's unit test (test_rdzv_message: every type round-trips, every prefix is short) and the
 * seed corpus of fuzz_message (fuzz/gen_corpus.c) start from the same messages, so a new type
 * gets its example once. The optional tails (JOIN's backoff and flags, RESTART's delay, CKPT's
 * holder, REPL_BEGIN's direct link) are left unset: the test sets them one at a time. Plain C,
 * no cmocka, so that a program outside the tests can use it. */
#ifndef MUSTER_TESTS_MSGFIX_H
#define MUSTER_TESTS_MSGFIX_H

#include <stdint.h>

#include "message.h"

/* m becomes a zeroed message of type with every field of its payload filled (any type below
 * RDZV_MSG_TYPE_MAX_; a type without a payload is just zeroed). */
void msgfix_example(uint8_t type, struct rdzv_msg *m);

/* The failure every FAILED, LEAVE, RESTART and JOB_FAILED example carries. */
void msgfix_failure(struct rdzv_failure *f);

/* The PREFLIGHT example (round 4, from a node that joined later): P2P at WARNING, two GPUs,
 * GPU 1 slow (FAILURE, 474 TFLOP/s) with a note. */
void msgfix_preflight(struct rdzv_preflight *pf);

/* The TELEMETRY example: 2 GPUs, GPU 0 with the processes of ranks 0 and 1 (one of them no
 * rank's), GPU 1 throttled (power cap, HW thermal), one warning. */
void msgfix_telemetry(struct rdzv_telemetry *t);

#endif
