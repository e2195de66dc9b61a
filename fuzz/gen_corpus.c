/* Writes the seed corpus of fuzz_message: one valid message of every type, encoded with
 * rdzv_msg_encode(), as "TYPE byte + payload" (the target's single-message mode), plus one
 * "0 + frame, frame, ..." stream of several whole frames (its stream mode).
 * The messages are the codec unit test's examples (tests/unit/msgfix.c) with every optional
 * tail set. Usage: fuzz_gen_corpus DIR   (fuzz/run.sh regenerates nothing; the output is
 * committed: seeds, not a reference, so an older run's bytes may differ). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"
#include "msgfix.h"

static struct rdzv_msg msg;
static uint8_t buf[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];
static uint8_t stream[8192];
static size_t stream_len = 1; /* stream[0] = 0: the stream mode selector */

/* Every optional tail set (msgfix's examples leave them out), so that the fuzzer starts from
 * the longest layouts too. */
static void set_join_tail(struct rdzv_join *j)
{
    j->backoff_min_ms = 1000;
    j->backoff_max_ms = 60000;
    j->exclude_after = 2;
    j->flags = RDZV_JOIN_SPARE;
    j->same_failure = 1 + 3; /* --max-same-failure 3 */
}

static void set_sig(struct rdzv_failure *f)
{
    f->sig_class = RDZV_SIG_SCRIPT;
    strcpy(f->sig, "KeyError at train.py:88 in load_batch");
}

static void set_tails(struct rdzv_msg *m)
{
    switch (m->type) {
    case RDZV_MSG_JOIN:
        set_join_tail(&m->u.join);
        break;
    case RDZV_MSG_REJOIN:
        set_join_tail(&m->u.rejoin.join);
        break;
    case RDZV_MSG_RESTART:
        m->u.restart.delay_ms = 2100;
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        set_sig(&m->u.failed);
        break;
    case RDZV_MSG_JOB_FAILED:
        set_sig(&m->u.job_failed.cause);
        break;
    case RDZV_MSG_CKPT:
        strcpy(m->u.ckpt.holder, "node-b");
        break;
    case RDZV_MSG_REPL_BEGIN: /* its tail's three parts: a direct link, a directory, a mode */
        m->u.repl_begin.port = 41015;
        m->u.repl_begin.link = 0x80000001u;
        memset(m->u.repl_begin.key, 0xa5, sizeof(m->u.repl_begin.key));
        strcpy(m->u.repl_begin.host, "10.0.0.1");
        m->u.repl_begin.flags = RDZV_REPL_BEGIN_DIR;
        m->u.repl_begin.mode = 0750;
        break;
    default:
        break;
    }
}

/* A valid example of each type in msg: the unit tests' own (tests/unit/msgfix.h), tails set. */
static void fill(uint8_t type)
{
    msgfix_example(type, &msg);
    set_tails(&msg);
}

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        return -EIO;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t len = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    for (unsigned t = 1; t < RDZV_MSG_TYPE_MAX_; t++) {
        char name[64];
        fill((uint8_t)t);
        if (rdzv_msg_encode(&msg, buf, sizeof(buf), &len) != 0) {
            fprintf(stderr, "cannot encode %s\n", rdzv_msg_name(t));
            return 1;
        }
        /* single-message mode: the type byte replaces the 12-byte header */
        buf[RDZV_HEADER_SIZE - 1] = (uint8_t)t;
        snprintf(name, sizeof(name), "%02u_%s", t, rdzv_msg_name(t));
        if (write_file(argv[1], name, buf + RDZV_HEADER_SIZE - 1, len - RDZV_HEADER_SIZE + 1))
            return 1;
        /* the stream: a client's first frames, HELLO, JOIN, HEARTBEAT, CKPT, LEAVE */
        if ((t == RDZV_MSG_HELLO || t == RDZV_MSG_JOIN || t == RDZV_MSG_HEARTBEAT ||
             t == RDZV_MSG_CKPT || t == RDZV_MSG_LEAVE) &&
            stream_len + len <= sizeof(stream)) {
            fill((uint8_t)t);
            rdzv_msg_encode(&msg, stream + stream_len, sizeof(stream) - stream_len, &len);
            stream_len += len;
        }
    }
    stream[0] = 0;
    return write_file(argv[1], "00_stream", stream, stream_len) ? 1 : 0;
}
