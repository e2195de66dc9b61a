/* Codec tests: every message type round-trips, and malformed frames are rejected before any
 * allocation or out-of-bounds read. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gprec.h"
#include "message.h"
#include "msgfix.h"

#define BUF_CAP (RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD)

static uint8_t buf[BUF_CAP];
static uint8_t buf2[BUF_CAP]; /* a second encoding of the same message */

/* PREFLIGHT: the GPU count is checked before any GPU is read (a hostile count
 * cannot walk past the array), levels beyond FAILURE and over-long strings are refused both
 * ways. */
/* TELEMETRY's counts are bounded both ways: the largest message fits a frame and round-trips,
 * one GPU, process or warning over a maximum is refused by the sender (-EINVAL) and, forged
 * into the bytes, by the receiver (-EPROTO). */
static void test_telemetry_limits(void **state)
{
    static struct rdzv_msg m, out;
    struct rdzv_telemetry *t = &m.u.telemetry;
    uint8_t *p = buf + RDZV_HEADER_SIZE;
    size_t len;

    (void)state;
    rdzv_msg_init(&m, RDZV_MSG_TELEMETRY);
    t->ngpus = RDZV_TEL_GPUS_MAX;
    for (uint32_t i = 0; i < RDZV_TEL_GPUS_MAX; i++) {
        t->gpus[i].gpu = i;
        t->gpus[i].nprocs = RDZV_TEL_PROCS_MAX;
        for (uint32_t k = 0; k < RDZV_TEL_PROCS_MAX; k++)
            t->gpus[i].procs[k] = (struct rdzv_tel_proc){1000 + k, (int32_t)k, k << 20};
    }
    t->nwarn = RDZV_TEL_WARN_MAX;
    for (uint32_t i = 0; i < RDZV_TEL_WARN_MAX; i++)
        memset(t->warn[i], 'w', RDZV_TEL_WARN_LEN);
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_true(len < RDZV_MAX_PAYLOAD / 4);
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_TELEMETRY, p, len - RDZV_HEADER_SIZE, &out), 0);
    assert_memory_equal(&out.u.telemetry, t, sizeof(*t));
    t->warn[2][RDZV_TEL_WARN_LEN] = 'x'; /* a warning one byte too long */
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    t->warn[2][RDZV_TEL_WARN_LEN] = '\0';
    t->nwarn = RDZV_TEL_WARN_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    t->nwarn = 0;
    t->gpus[7].nprocs = RDZV_TEL_PROCS_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    t->gpus[7].nprocs = 0;
    t->ngpus = RDZV_TEL_GPUS_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    /* forged: one GPU without processes or warnings, then each count over its maximum; the
     * payload is t_ms (8), ngpus (1), the GPU's 60 bytes, nprocs (1), nwarn (1) */
    t->ngpus = 1;
    t->gpus[0].nprocs = 0;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(len - RDZV_HEADER_SIZE, 8 + 1 + 60 + 1 + 1);
    p[8] = RDZV_TEL_GPUS_MAX + 1;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_TELEMETRY, p, len - RDZV_HEADER_SIZE, &out), -EPROTO);
    p[8] = 1;
    p[69] = RDZV_TEL_PROCS_MAX + 1;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_TELEMETRY, p, len - RDZV_HEADER_SIZE, &out), -EPROTO);
    p[69] = 0;
    p[70] = RDZV_TEL_WARN_MAX + 1;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_TELEMETRY, p, len - RDZV_HEADER_SIZE, &out), -EPROTO);
    p[70] = 0;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_TELEMETRY, p, len - RDZV_HEADER_SIZE, &out), 0);
    assert_int_equal(out.u.telemetry.ngpus, 1);
}

static void test_preflight_limits(void **state)
{
    static struct rdzv_msg m, out;
    size_t len;
    uint8_t *count;

    (void)state;
    rdzv_msg_init(&m, RDZV_MSG_PREFLIGHT);
    msgfix_preflight(&m.u.preflight);
    m.u.preflight.count = 0;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    /* the count is the payload's last 4 bytes here: claim RDZV_PF_GPUS_MAX + 1, then 2^32-1 */
    count = buf + len - 4;
    count[3] = RDZV_PF_GPUS_MAX + 1;
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_PREFLIGHT, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        -EPROTO);
    memset(count, 0xff, 4);
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_PREFLIGHT, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        -EPROTO);
    /* the sender refuses them too */
    m.u.preflight.count = RDZV_PF_GPUS_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    m.u.preflight.count = RDZV_PF_GPUS_MAX; /* all 64, with long notes: fits a frame */
    for (int i = 0; i < RDZV_PF_GPUS_MAX; i++) {
        m.u.preflight.gpus[i].index = (uint32_t)i;
        memset(m.u.preflight.gpus[i].note, 'n', RDZV_PF_NOTE_MAX);
        memset(m.u.preflight.gpus[i].model, 'm', RDZV_PF_MODEL_MAX);
        memset(m.u.preflight.gpus[i].uuid, 'u', RDZV_PF_UUID_MAX);
    }
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_PREFLIGHT, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        0);
    assert_int_equal(out.u.preflight.count, RDZV_PF_GPUS_MAX);
    m.u.preflight.gpus[3].note[RDZV_PF_NOTE_MAX] = 'x'; /* one byte over */
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    m.u.preflight.gpus[3].note[RDZV_PF_NOTE_MAX] = '\0';
    m.u.preflight.gpus[5].level = RDZV_PF_FAILURE + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    m.u.preflight.count = 1;
    m.u.preflight.gpus[0].level = RDZV_PF_FAILURE;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    /* the level byte sits right before the note (u16 length + RDZV_PF_NOTE_MAX bytes) */
    buf[len - 4 * 0 - RDZV_PF_NOTE_MAX - 2 - 1] = RDZV_PF_FAILURE + 1;
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_PREFLIGHT, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        -EPROTO);
}

/* Patches the first occurrence of the n bytes `from` in buf[0..len) with `to` (same length). */
static void patch(size_t len, const char *from, const char *to)
{
    size_t n = strlen(from);

    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(buf + i, from, n) == 0) {
            memcpy(buf + i, to, n);
            return;
        }
    fail_msg("%s not in the frame", from);
}

/* Identifiers (job id, host, addr) that are not valid UTF-8 are refused both ways;
 * free text is made valid (a character cut short at the end dropped, other bad bytes '?'). */
static void test_utf8(void **state)
{
    static struct rdzv_msg m, out;
    size_t len;

    (void)state;
    rdzv_msg_init(&m, RDZV_MSG_JOIN);
    strcpy(m.u.join.job_id, "j");
    strcpy(m.u.join.host, "bad\xffhost");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    strcpy(m.u.join.host, "h\xc3\xa9te-Xhost"); /* valid: "héte" */
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_JOIN, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out), 0);
    assert_string_equal(out.u.join.host, m.u.join.host);
    patch(len, "Xhost", "\xc0\xafost"); /* an overlong '/' */
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_JOIN, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        -EPROTO);
    strcpy(m.u.join.host, "h");
    strcpy(m.u.join.addr, "10.0.0.1");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    patch(len, "10.0.0.1", "10.0.\xed\xa0\x80"); /* a surrogate */
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_JOIN, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        -EPROTO);

    rdzv_msg_init(&m, RDZV_MSG_FAILED);
    msgfix_failure(&m.u.failed);
    strcpy(m.u.failed.text, "caf\xc3\xa9 \xff done \xe2\x82"); /* a bad byte, a cut euro */
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_FAILED, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out), 0);
    assert_string_equal(out.u.failed.text, "caf\xc3\xa9 ? done ");
    /* an older sender's raw text is made valid on receipt too */
    strcpy(m.u.failed.text, "abcXdef");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    patch(len, "cXd",
          "c\x80"
          "d");
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_FAILED, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out), 0);
    assert_string_equal(out.u.failed.text, "abc?def");
    strcpy(m.u.failed.host, "n\xfe");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    assert_false(rdzv_ckpt_name_ok("step-\xff.pt"));
    assert_true(rdzv_ckpt_name_ok("step-\xc3\xa9.pt"));
}

/* GOODPUT: a fixed layout (round, restarts, wall, the six phases, lost: 72 bytes), and the
 * server's check of what a lying agent may send (rendezvous/gprec.h). */
static void test_goodput(void **state)
{
    static struct rdzv_msg in, out;
    struct rdzv_goodput g;
    size_t len;

    (void)state;
    msgfix_example(RDZV_MSG_GOODPUT, &in);
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, RDZV_HEADER_SIZE + 72);
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_GOODPUT, buf + RDZV_HEADER_SIZE, 72, &out), 0);
    assert_int_equal(out.u.goodput.phase_ms[RDZV_GP_TRAINING], 12000);
    assert_int_equal(out.u.goodput.lost_ms, 4000);
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_GOODPUT, buf + RDZV_HEADER_SIZE, 71, &out), -EPROTO);
    assert_string_equal(rdzv_msg_name(RDZV_MSG_GOODPUT), "GOODPUT");
    assert_int_equal(RDZV_MSG_GOODPUT, 29); /* append-only: the number is on the wire */

    g = in.u.goodput;
    assert_null(rdzv_goodput_check(&g));
    assert_true(rdzv_goodput_ratio(&g) > 0.38 && rdzv_goodput_ratio(&g) < 0.39); /* 8/21 */
    g.lost_ms = 12001; /* more lost than trained */
    assert_string_equal(rdzv_goodput_check(&g), "lost_ms over training_ms");
    g = in.u.goodput;
    g.wall_ms = 1; /* phases that do not add up */
    assert_string_equal(rdzv_goodput_check(&g), "wall_ms is not the sum of the phases");
    g = in.u.goodput;
    /* phases that wrap the sum around to wall_ms: each is bounded first */
    g.phase_ms[0] = UINT64_MAX - 19999;
    g.phase_ms[1] = 20000 + 1000;
    assert_string_equal(rdzv_goodput_check(&g), "a figure over ten years");
    g = in.u.goodput;
    g.wall_ms = g.lost_ms = UINT64_MAX;
    assert_string_equal(rdzv_goodput_check(&g), "a figure over ten years");
    memset(&g, 0, sizeof(g)); /* nothing yet: valid, ratio 0 */
    assert_null(rdzv_goodput_check(&g));
    assert_true(rdzv_goodput_ratio(&g) == 0);
}

static void test_roundtrip_all(void **state)
{
    (void)state;
    for (unsigned t = 1; t < RDZV_MSG_TYPE_MAX_; t++) {
        static struct rdzv_msg in, out; /* ~130 KB each: not on the stack */
        uint8_t type;
        uint32_t plen;
        size_t len, len2;

        if (strcmp(rdzv_msg_name(t), "UNKNOWN") == 0)
            continue; /* a reserved number */
        msgfix_example((uint8_t)t, &in);
        assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), 0);
        assert_int_equal(rdzv_header_decode(buf, &type, &plen), 0);
        assert_int_equal(type, t);
        assert_int_equal(plen + RDZV_HEADER_SIZE, len);
        memset(&out, 0xa5, sizeof(out)); /* the decoder zeroes the member it fills... */
        assert_int_equal(rdzv_msg_decode(type, buf + RDZV_HEADER_SIZE, plen, &out), 0);
        /* ...and only that (rdzv_msg_init), less a trailing buffer: the rest is left as it was */
        size_t clear = offsetof(struct rdzv_msg, u) + rdzv_msg_clear_size(t);

        assert_true(rdzv_msg_clear_size(t) <= rdzv_msg_body_size(t));
        assert_int_equal(((uint8_t *)&out)[sizeof(out) - 1], 0xa5);
        /* Examples are memset first, so what was zeroed compares whole... */
        assert_memory_equal(&in, &out, clear);
        /* ...and the buffer's used part by encoding the decoded message again */
        assert_int_equal(rdzv_msg_encode(&out, buf2, sizeof(buf2), &len2), 0);
        assert_int_equal(len2, len);
        assert_memory_equal(buf, buf2, len);
        assert_string_not_equal(rdzv_msg_name(t), "UNKNOWN");
    }
    assert_string_equal(rdzv_msg_name(0), "UNKNOWN");
    assert_string_equal(rdzv_msg_name(RDZV_MSG_TYPE_MAX_), "UNKNOWN");
    assert_string_equal(rdzv_msg_name(RDZV_MSG_JOB_FAILED), "JOB_FAILED");
}

static void test_header_bytes(void **state)
{
    static struct rdzv_msg m;
    size_t len;
    static const uint8_t want[] = {
        'M', 'S', 'T', 'R', RDZV_PROTO_VERSION, RDZV_MSG_DONE, 0, 0, 0, 0, 0, 4, 0, 0, 0, 42};

    (void)state;
    msgfix_example(RDZV_MSG_DONE, &m);
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
}

static void test_header_rejects(void **state)
{
    uint8_t h[RDZV_HEADER_SIZE] = {'M', 'S', 'T', 'R', RDZV_PROTO_VERSION, 1, 0, 0, 0, 1, 0, 0};
    uint8_t type;
    uint32_t plen;

    (void)state;
    assert_int_equal(rdzv_header_decode(h, &type, &plen), 0);
    assert_int_equal(plen, RDZV_MAX_PAYLOAD);
    h[10] = 0;
    h[11] = 1; /* 65537: one byte over */
    assert_int_equal(rdzv_header_decode(h, &type, &plen), -EMSGSIZE);
    h[8] = 0xff; /* 4 GiB: must not be trusted for an allocation */
    assert_int_equal(rdzv_header_decode(h, &type, &plen), -EMSGSIZE);
    h[8] = 0;
    h[4] = RDZV_PROTO_VERSION + 1;
    assert_int_equal(rdzv_header_decode(h, &type, &plen), -EPROTONOSUPPORT);
    h[4] = RDZV_PROTO_VERSION;
    h[0] = 'G'; /* "GET / HTTP/1.1" from a confused browser */
    assert_int_equal(rdzv_header_decode(h, &type, &plen), -EPROTO);
}

static void test_unknown_type(void **state)
{
    static struct rdzv_msg m;
    size_t len;

    (void)state;
    assert_int_equal(rdzv_msg_decode(0, buf, 0, &m), -ENOTSUP);
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_TYPE_MAX_, buf, 0, &m), -ENOTSUP);
    assert_int_equal(rdzv_msg_decode(200, buf, 0, &m), -ENOTSUP);
    memset(&m, 0, sizeof(m));
    m.type = 99;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
}

/* Every strict prefix of every payload is short (-EPROTO), and one extra byte is trailing. */
static void test_truncated_and_trailing(void **state)
{
    (void)state;
    for (unsigned t = 1; t < RDZV_MSG_TYPE_MAX_; t++) {
        static struct rdzv_msg in, out;
        size_t len, plen;

        if (strcmp(rdzv_msg_name(t), "UNKNOWN") == 0)
            continue; /* a reserved number */
        msgfix_example((uint8_t)t, &in);
        assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), 0);
        plen = len - RDZV_HEADER_SIZE;
        for (size_t cut = 0; cut < plen; cut++)
            assert_int_equal(rdzv_msg_decode((uint8_t)t, buf + RDZV_HEADER_SIZE, cut, &out),
                             -EPROTO);
        buf[len] = 0;
        assert_int_equal(rdzv_msg_decode((uint8_t)t, buf + RDZV_HEADER_SIZE, plen + 1, &out),
                         -EPROTO);
    }
}

/* The length of in encoded into buf (asserted). */
static size_t encode(const struct rdzv_msg *in)
{
    size_t len = 0;

    assert_int_equal(rdzv_msg_encode(in, buf, sizeof(buf), &len), 0);
    return len;
}

/* in becomes type's example (msgfix.h); returns its encoded length. */
static size_t example_len(uint8_t type, struct rdzv_msg *in)
{
    msgfix_example(type, in);
    return encode(in);
}

/* in encoded into buf (its length in *len) and decoded back into out, both asserted; returns
 * the payload's length. */
static uint32_t roundtrip(const struct rdzv_msg *in, struct rdzv_msg *out, size_t *len)
{
    uint8_t type;
    uint32_t plen;

    *len = encode(in);
    assert_int_equal(rdzv_header_decode(buf, &type, &plen), 0);
    assert_int_equal(type, in->type);
    assert_int_equal(rdzv_msg_decode(type, buf + RDZV_HEADER_SIZE, plen, out), 0);
    return plen;
}

/* in encoded into buf; returns the payload's length (no decode). */
static uint32_t roundtrip_raw(const struct rdzv_msg *in, size_t *len)
{
    *len = encode(in);
    return (uint32_t)(*len - RDZV_HEADER_SIZE);
}

/* The optional tails: JOIN's backoff fields and RESTART's delay_ms are sent only when
 * non-zero (so a JOIN or RESTART that does not use them has the layout peers built before them
 * accept), read when present, and never part of REJOIN's copy of the JOIN. */
static void test_optional_tails(void **state)
{
    static struct rdzv_msg in, out;
    uint32_t plen;
    size_t len, len0;

    (void)state;
    len0 = example_len(RDZV_MSG_JOIN, &in);
    in.u.join.backoff_min_ms = 500;
    in.u.join.backoff_max_ms = 2000;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 16);
    assert_int_equal(out.u.join.backoff_min_ms, 500);
    assert_int_equal(out.u.join.backoff_max_ms, 2000);
    assert_int_equal(out.u.join.exclude_after, 0);
    in.u.join.backoff_min_ms = in.u.join.backoff_max_ms = 0;
    in.u.join.exclude_after = 3; /* the tail goes out when any of its fields is set */
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 16);
    assert_int_equal(out.u.join.exclude_after, 3);
    /* half a tail is a protocol error */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    /* so is a tail of zeros: it is sent as no tail, so the codec stays canonical (found by
     * fuzz_message's re-encoding oracle) */
    memset(buf + RDZV_HEADER_SIZE + plen - 16, 0, 16);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);

    /* REJOIN carries the JOIN's tail at its end (hot spares): a job rebuilt after a server
     * restart keeps --restart-backoff and --exclude-after, a waiting spare stays one */
    len0 = example_len(RDZV_MSG_REJOIN, &in);
    in.u.rejoin.join.backoff_min_ms = 500;
    in.u.rejoin.join.flags = RDZV_JOIN_SPARE;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 20);
    assert_int_equal(out.u.rejoin.join.backoff_min_ms, 500);
    assert_int_equal(out.u.rejoin.join.flags, RDZV_JOIN_SPARE);
    assert_int_equal(out.u.rejoin.assign.round, in.u.rejoin.assign.round);

    len0 = example_len(RDZV_MSG_RESTART, &in);
    in.u.restart.delay_ms = 2100;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 4);
    assert_int_equal(out.u.restart.delay_ms, 2100);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), 0);
    assert_int_equal(out.u.restart.delay_ms, 0);
    memset(buf + RDZV_HEADER_SIZE + plen - 4, 0, 4); /* delay 0 sent as a tail: not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);

    /* CKPT's holder, a string sent only when not "" */
    len0 = example_len(RDZV_MSG_CKPT, &in);
    strcpy(in.u.ckpt.holder, "node-b");
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 2 + 6);
    assert_string_equal(out.u.ckpt.holder, "node-b");
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 6, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + plen - 8] = 0; /* "" sent as a tail: not canonical */
    buf[RDZV_HEADER_SIZE + plen - 7] = 0;
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 6, &out), -EPROTO);

    /* REPL_BEGIN's direct link (port, link, key, host), sent only with a port */
    len0 = example_len(RDZV_MSG_REPL_BEGIN, &in);
    in.u.repl_begin.port = 40123;
    in.u.repl_begin.link = 0x80000005u;
    memset(in.u.repl_begin.key, 0xa5, sizeof(in.u.repl_begin.key));
    strcpy(in.u.repl_begin.host, "10.0.0.7");
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 4 + 4 + 32 + 2 + 8);
    assert_int_equal(out.u.repl_begin.port, 40123);
    assert_int_equal(out.u.repl_begin.link, 0x80000005u);
    assert_memory_equal(out.u.repl_begin.key, in.u.repl_begin.key, 32);
    assert_string_equal(out.u.repl_begin.host, "10.0.0.7");
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 10, &out), -EPROTO);
    /* port 0 in a tail is not canonical, a port over 65535 is no port */
    memset(buf + RDZV_HEADER_SIZE + len0 - RDZV_HEADER_SIZE, 0, 4);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.repl_begin.port = 70000;
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);
    in.u.repl_begin.port = 0; /* no tail: the relay, as before the link */
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, len0);
    /* flags (a directory checkpoint): a second part, behind a first whose port may be 0 */
    in.u.repl_begin.flags = RDZV_REPL_BEGIN_DIR;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 4 + 4 + 32 + 2 + 8 + 4);
    assert_int_equal(out.u.repl_begin.flags, RDZV_REPL_BEGIN_DIR);
    assert_int_equal(out.u.repl_begin.port, 0);
    /* without the flags, a first part with port 0 is not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + plen - 1] = 2; /* a flag nobody defined */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + plen - 1] = 0; /* flags 0 sent: not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    /* the original's mode: a third part, behind the others (zeros there then) */
    in.u.repl_begin.flags = 0;
    in.u.repl_begin.mode = 0600;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 4 + 4 + 32 + 2 + 8 + 4 + 4);
    assert_int_equal(out.u.repl_begin.mode, 0600);
    assert_int_equal(out.u.repl_begin.flags, 0);
    assert_int_equal(out.u.repl_begin.port, 0);
    /* without the mode, flags 0 are not canonical; a mode of 0 or with bits beyond 07777
     * neither */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    memset(buf + RDZV_HEADER_SIZE + plen - 4, 0, 4);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + plen - 3] = 1; /* 0x10000: S_IFREG's territory, not a mode */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.repl_begin.mode = 0100644; /* a whole st_mode: the sender masks it */
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);
    /* all three parts: a directory of mode 0700 on a direct link */
    in.u.repl_begin.mode = 0700;
    in.u.repl_begin.flags = RDZV_REPL_BEGIN_DIR;
    in.u.repl_begin.port = 40123;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.repl_begin.mode, 0700);
    assert_int_equal(out.u.repl_begin.flags, RDZV_REPL_BEGIN_DIR);
    assert_int_equal(out.u.repl_begin.port, 40123);
    /* an older sender's BEGIN (no third part) still decodes, with mode 0 */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), 0);
    assert_int_equal(out.u.repl_begin.mode, 0);
    assert_int_equal(out.u.repl_begin.flags, RDZV_REPL_BEGIN_DIR);
}

/* Sharded checkpoints: CKPT's part (behind the holder, "" allowed there then), REPL_BEGIN's
 * fourth part (behind the mode, 0 allowed there then), ASSIGN's resume_parts and CKPT_PART,
 * each checked: 1 <= part <= parts <= RDZV_PARTS_MAX, known flags, a name; zeros sent as a
 * part are not canonical. */
static void test_parts_tails(void **state)
{
    static struct rdzv_msg in, out;
    uint32_t plen;
    size_t len, len0;

    (void)state;
    len0 = example_len(RDZV_MSG_CKPT, &in);
    in.u.ckpt.part = 2;
    in.u.ckpt.parts = 3;
    in.u.ckpt.part_flags = RDZV_CKPT_PART_EMPTY;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 2 + 12);
    assert_string_equal(out.u.ckpt.holder, "");
    assert_int_equal(out.u.ckpt.part, 2);
    assert_int_equal(out.u.ckpt.parts, 3);
    assert_int_equal(out.u.ckpt.part_flags, RDZV_CKPT_PART_EMPTY);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    /* without the part, a holder of "" is not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 12, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + plen - 1] = 2; /* a flag nobody defined */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    strcpy(in.u.ckpt.holder, "node-b");
    in.u.ckpt.part_flags = 0;
    plen = roundtrip(&in, &out, &len);
    assert_string_equal(out.u.ckpt.holder, "node-b");
    assert_int_equal(out.u.ckpt.part, 2);
    buf[RDZV_HEADER_SIZE + plen - 12 + 3] = 4; /* part 4 of 3 */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + plen - 12 + 3] = 0; /* part 0: sent as no part */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.ckpt.part = 4;
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);
    in.u.ckpt.part = 1;
    in.u.ckpt.parts = RDZV_PARTS_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);

    len0 = example_len(RDZV_MSG_REPL_BEGIN, &in);
    in.u.repl_begin.part = 3;
    in.u.repl_begin.parts = 3;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 4 + 4 + 32 + 2 + 4 + 4 + 8);
    assert_int_equal(out.u.repl_begin.part, 3);
    assert_int_equal(out.u.repl_begin.parts, 3);
    assert_int_equal(out.u.repl_begin.mode, 0);
    /* without the part, a mode of 0 is not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 8, &out), -EPROTO);
    in.u.repl_begin.part = 0;
    in.u.repl_begin.parts = 0;
    in.u.repl_begin.mode = 0600; /* a BEGIN with a mode and no part decodes as before */
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.repl_begin.part, 0);
    in.u.repl_begin.part = 2;
    in.u.repl_begin.parts = 1;
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);

    len0 = example_len(RDZV_MSG_ASSIGN, &in);
    in.u.assign.resume_parts = 3;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 4);
    assert_int_equal(out.u.assign.resume_parts, 3);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), 0);
    assert_int_equal(out.u.assign.resume_parts, 0); /* an older server's ASSIGN */
    memset(buf + RDZV_HEADER_SIZE + plen - 4, 0, 4);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.assign.resume[0] = '\0'; /* parts of no checkpoint */
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);

    example_len(RDZV_MSG_CKPT_PART, &in);
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.ckpt_part.part, 2);
    assert_int_equal(out.u.ckpt_part.parts, 3);
    assert_string_equal(out.u.ckpt_part.name, "step-00000042");
    buf[RDZV_HEADER_SIZE + plen - 5] = 9; /* part 9 of 3 */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.ckpt_part.part = 0;
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);
    strcpy(in.u.ckpt_part.name, "../x");
    in.u.ckpt_part.part = 1;
    assert_int_equal(rdzv_msg_encode(&in, buf, sizeof(buf), &len), -EINVAL);
}

/* JOIN's tail, second part (hot spares): flags go out only when set, behind the first part
 * (zeros allowed there then); a first part of zeros without flags, or flags of 0, are not
 * canonical; an older peer's JOIN without any tail still decodes with flags 0. */
static void test_join_flags_tail(void **state)
{
    size_t len, len0;
    uint32_t plen;
    static struct rdzv_msg in, out;

    (void)state;
    len0 = example_len(RDZV_MSG_JOIN, &in);
    in.u.join.flags = RDZV_JOIN_SPARE;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 20);
    assert_int_equal(out.u.join.flags, RDZV_JOIN_SPARE);
    assert_int_equal(out.u.join.backoff_min_ms, 0);
    assert_int_equal(out.u.join.exclude_after, 0);
    /* without the flags the first part alone is all zeros: refused */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    /* flags of zero after the first part: refused */
    memset(buf + RDZV_HEADER_SIZE + plen - 4, 0, 4);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    /* both parts set */
    in.u.join.exclude_after = 2;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.join.flags, RDZV_JOIN_SPARE);
    assert_int_equal(out.u.join.exclude_after, 2);
    /* the first part alone (an agent built before spares) */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), 0);
    assert_int_equal(out.u.join.flags, 0);
    assert_int_equal(out.u.join.exclude_after, 2);
    /* half of the flags */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 2, &out), -EPROTO);
}

/* JOIN's tail, third part: 1 + --max-same-failure, sent only when not the default (0), behind
 * the other two (zeros there then); 0 or more than 1 + RDZV_SAME_FAILURE_MAX sent are refused;
 * an older agent's JOIN decodes with 0 (the default). */
static void test_join_same_failure_tail(void **state)
{
    size_t len, len0;
    uint32_t plen;
    static struct rdzv_msg in, out;

    (void)state;
    len0 = example_len(RDZV_MSG_JOIN, &in);
    in.u.join.same_failure = 1; /* --max-same-failure 0: off */
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 24);
    assert_int_equal(out.u.join.same_failure, 1);
    assert_int_equal(out.u.join.flags, 0);
    /* without it, the zeros before it are not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    memset(buf + RDZV_HEADER_SIZE + plen - 4, 0, 4); /* 0 sent: not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.join.same_failure = RDZV_SAME_FAILURE_MAX + 2; /* past the limit: refused on decode */
    plen = roundtrip_raw(&in, &len);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.join.same_failure = RDZV_SAME_FAILURE_MAX + 1;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.join.same_failure, RDZV_SAME_FAILURE_MAX + 1);
    /* with the spare flag and the backoff: all three parts; an older server's reading stops
     * nowhere else, an older agent's JOIN (two parts) decodes with the default */
    in.u.join.same_failure = 4;
    in.u.join.flags = RDZV_JOIN_SPARE;
    in.u.join.backoff_min_ms = 100;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.join.same_failure, 4);
    assert_int_equal(out.u.join.flags, RDZV_JOIN_SPARE);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), 0);
    assert_int_equal(out.u.join.same_failure, 0);
    /* REJOIN keeps it (a job rebuilt after a server restart keeps its K) */
    example_len(RDZV_MSG_REJOIN, &in);
    in.u.rejoin.join.same_failure = 6;
    roundtrip(&in, &out, &len);
    assert_int_equal(out.u.rejoin.join.same_failure, 6);
}

/* JOIN's tail, fourth part: --exclude-stragglers K, sent only when non-zero, behind the other
 * three (zeros there then, same_failure's 0 included: the default); 0 or more than
 * RDZV_STRAGGLERS_MAX sent are refused, and so is a same_failure of 0 as the last part. */
static void test_join_stragglers_tail(void **state)
{
    size_t len, len0;
    uint32_t plen;
    static struct rdzv_msg in, out;

    (void)state;
    len0 = example_len(RDZV_MSG_JOIN, &in);
    in.u.join.stragglers = 3;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(len, len0 + 28);
    assert_int_equal(out.u.join.stragglers, 3);
    assert_int_equal(out.u.join.same_failure, 0); /* the default, sent as 0 before it */
    /* cut before it: a same_failure of 0 at the end is not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), -EPROTO);
    memset(buf + RDZV_HEADER_SIZE + plen - 4, 0, 4); /* 0 sent: not canonical */
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    in.u.join.stragglers = RDZV_STRAGGLERS_MAX + 1;
    plen = roundtrip_raw(&in, &len);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    /* with every other part set: all four come back; an older server's reading of three
     * parts is what it was */
    in.u.join.stragglers = RDZV_STRAGGLERS_MAX;
    in.u.join.same_failure = 4;
    in.u.join.flags = RDZV_JOIN_SPARE;
    in.u.join.exclude_after = 2;
    plen = roundtrip(&in, &out, &len);
    assert_int_equal(out.u.join.stragglers, RDZV_STRAGGLERS_MAX);
    assert_int_equal(out.u.join.same_failure, 4);
    assert_int_equal(out.u.join.exclude_after, 2);
    assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 4, &out), 0);
    assert_int_equal(out.u.join.stragglers, 0);
    assert_int_equal(out.u.join.same_failure, 4);
    /* REJOIN keeps it */
    example_len(RDZV_MSG_REJOIN, &in);
    in.u.rejoin.join.stragglers = 2;
    roundtrip(&in, &out, &len);
    assert_int_equal(out.u.rejoin.join.stragglers, 2);
}

/* The signature tail of FAILED, LEAVE and JOB_FAILED: u8 class + text, sent only with both;
 * a class of 0, an empty text, a text over RDZV_SIG_MAX or cut short are refused; a class this
 * build does not know is kept (the server does not limit it); invalid UTF-8 is made valid. An
 * older agent's FAILED (no tail) decodes with no signature. RESTART carries none. */
static void test_failure_sig_tail(void **state)
{
    static const uint8_t types[] = {RDZV_MSG_FAILED, RDZV_MSG_LEAVE, RDZV_MSG_JOB_FAILED};
    static struct rdzv_msg in, out;
    struct rdzv_failure *fi, *fo;
    size_t len, len0;
    uint32_t plen;

    (void)state;
    for (size_t t = 0; t < sizeof(types); t++) {
        len0 = example_len(types[t], &in);
        fi = types[t] == RDZV_MSG_JOB_FAILED ? &in.u.job_failed.cause : &in.u.failed;
        fo = types[t] == RDZV_MSG_JOB_FAILED ? &out.u.job_failed.cause : &out.u.failed;
        fi->sig_class = RDZV_SIG_SCRIPT;
        strcpy(fi->sig, "KeyError at train.py:88 in load_batch");
        plen = roundtrip(&in, &out, &len);
        assert_int_equal(len, len0 + 1 + 2 + strlen(fi->sig));
        assert_int_equal(fo->sig_class, RDZV_SIG_SCRIPT);
        assert_string_equal(fo->sig, fi->sig);
        /* no tail: an older agent's */
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE,
                                         (uint32_t)(len0 - RDZV_HEADER_SIZE), &out),
                         0);
        assert_int_equal(fo->sig_class, RDZV_SIG_NONE);
        assert_string_equal(fo->sig, "");
        /* cut short */
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen - 1, &out), -EPROTO);
        /* class 0 sent: not canonical */
        buf[len0] = 0;
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
        /* a class from a newer peer: kept as it is */
        buf[len0] = 200;
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), 0);
        assert_int_equal(fo->sig_class, 200);
        assert_false(rdzv_sig_retry_limited(fo->sig_class));
        /* invalid UTF-8 and control bytes in the text: made valid, kept (escaped where shown) */
        buf[len0 + 3] = (uint8_t)0xff;
        buf[len0 + 4] = '\n';
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE, plen, &out), 0);
        assert_true(strlen(fo->sig) > 0);
        /* an empty text with a class */
        fi->sig[0] = '\0';
        assert_int_equal(encode(&in), len0); /* not sent */
        buf[len0] = RDZV_SIG_SCRIPT;
        buf[len0 + 1] = buf[len0 + 2] = 0;
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE,
                                         (uint32_t)(len0 + 3 - RDZV_HEADER_SIZE), &out),
                         -EPROTO);
        /* the longest text goes; one byte more is refused both ways */
        memset(fi->sig, 'x', RDZV_SIG_MAX);
        fi->sig[RDZV_SIG_MAX] = '\0';
        roundtrip(&in, &out, &len);
        assert_int_equal(strlen(fo->sig), RDZV_SIG_MAX);
        buf[len0 + 1] = (uint8_t)((RDZV_SIG_MAX + 1) >> 8);
        buf[len0 + 2] = (uint8_t)((RDZV_SIG_MAX + 1) & 0xff);
        buf[len] = 'x';
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE,
                                         (uint32_t)(len + 1 - RDZV_HEADER_SIZE), &out),
                         -EPROTO);
        /* a huge length field with little behind it */
        buf[len0 + 1] = buf[len0 + 2] = 0xff;
        assert_int_equal(rdzv_msg_decode(in.type, buf + RDZV_HEADER_SIZE,
                                         (uint32_t)(len - RDZV_HEADER_SIZE), &out),
                         -EPROTO);
    }
    /* RESTART's cause: no signature on the wire (its tail is delay_ms) */
    len0 = example_len(RDZV_MSG_RESTART, &in);
    in.u.restart.cause.sig_class = RDZV_SIG_SCRIPT;
    strcpy(in.u.restart.cause.sig, "KeyError");
    assert_int_equal(encode(&in), len0);
}

static void test_small_buffer(void **state)
{
    static struct rdzv_msg m;
    size_t len;

    (void)state;
    msgfix_example(RDZV_MSG_JOIN, &m);
    assert_int_equal(rdzv_msg_encode(&m, buf, 20, &len), -ENOBUFS);
    assert_int_equal(rdzv_msg_encode(&m, buf, 0, &len), -ENOBUFS);
}

static void test_overlong_strings(void **state)
{
    static struct rdzv_msg m;
    uint8_t p[64] = {0};
    size_t len;

    (void)state;
    /* Encoder: an unterminated job id (129 bytes) is over the limit. */
    msgfix_example(RDZV_MSG_JOIN, &m);
    memset(m.u.join.job_id, 'x', sizeof(m.u.join.job_id));
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    /* Decoder: ERROR whose text claims 1025 bytes (over RDZV_TEXT_MAX) with enough data. */
    memset(buf, 'a', 2000);
    buf[0] = buf[1] = buf[2] = 0;
    buf[3] = RDZV_ERR_PROTOCOL;
    buf[4] = (RDZV_TEXT_MAX + 1) >> 8;
    buf[5] = (RDZV_TEXT_MAX + 1) & 0xff;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_ERROR, buf, 6 + RDZV_TEXT_MAX + 1, &m), -EPROTO);
    buf[4] = RDZV_TEXT_MAX >> 8; /* exactly the limit is fine */
    buf[5] = RDZV_TEXT_MAX & 0xff;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_ERROR, buf, 6 + RDZV_TEXT_MAX, &m), 0);
    assert_int_equal(strlen(m.u.error.text), RDZV_TEXT_MAX);
    /* Decoder: a NUL inside a string. */
    p[3] = 1;
    p[5] = 3;
    memcpy(p + 6, "a\0b", 3);
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_ERROR, p, 9, &m), -EPROTO);
}

/* The largest KV value and STATUS text fit one frame; one byte more is refused both ways. */
static void test_blob_limits(void **state)
{
    static struct rdzv_msg m, out;
    size_t len;

    (void)state;
    msgfix_example(RDZV_MSG_KV_PUT, &m);
    memset(m.u.kv.key, 'k', RDZV_KEY_MAX);
    m.u.kv.key[RDZV_KEY_MAX] = '\0';
    m.u.kv.value_len = RDZV_VALUE_MAX;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_KV_PUT, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out), 0);
    assert_int_equal(out.u.kv.value_len, RDZV_VALUE_MAX);
    m.u.kv.value_len = RDZV_VALUE_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    msgfix_example(RDZV_MSG_STATUS, &m);
    memset(m.u.status.json, ' ', RDZV_STATUS_MAX);
    m.u.status.len = RDZV_STATUS_MAX;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    assert_int_equal(len, RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD);
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_STATUS, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out), 0);
    assert_int_equal(strlen(out.u.status.json), RDZV_STATUS_MAX);
    /* a NUL inside the JSON text is refused */
    buf[RDZV_HEADER_SIZE + 10] = 0;
    assert_int_equal(
        rdzv_msg_decode(RDZV_MSG_STATUS, buf + RDZV_HEADER_SIZE, len - RDZV_HEADER_SIZE, &out),
        -EPROTO);
    m.u.status.len = RDZV_STATUS_MAX + 1;
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
}

/* Checkpoint names are joined to the agent's checkpoint directory: no '/', no "." or "..". */
static void test_ckpt_names(void **state)
{
    static struct rdzv_msg m, out;
    size_t len, plen;

    (void)state;
    assert_true(rdzv_ckpt_name_ok(""));
    assert_true(rdzv_ckpt_name_ok("step-1.pt"));
    assert_true(rdzv_ckpt_name_ok("..x"));
    assert_false(rdzv_ckpt_name_ok("a/b"));
    assert_false(rdzv_ckpt_name_ok("/etc/passwd"));
    assert_false(rdzv_ckpt_name_ok(".."));
    assert_false(rdzv_ckpt_name_ok("."));
    /* Encoder refuses, in CKPT, JOIN and ASSIGN (and REJOIN through them). */
    msgfix_example(RDZV_MSG_CKPT, &m);
    strcpy(m.u.ckpt.name, "../x");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    msgfix_example(RDZV_MSG_JOIN, &m);
    strcpy(m.u.join.resume, "dir/ckpt");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    msgfix_example(RDZV_MSG_ASSIGN, &m);
    strcpy(m.u.assign.resume, "..");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    /* Decoder refuses a '/' a peer put on the wire: CKPT's payload starts with the name. */
    msgfix_example(RDZV_MSG_CKPT, &m);
    strcpy(m.u.ckpt.name, "ab");
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), 0);
    plen = len - RDZV_HEADER_SIZE;
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_CKPT, buf + RDZV_HEADER_SIZE, plen, &out), 0);
    buf[RDZV_HEADER_SIZE + 3] = '/';
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_CKPT, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    buf[RDZV_HEADER_SIZE + 2] = buf[RDZV_HEADER_SIZE + 3] = '.';
    assert_int_equal(rdzv_msg_decode(RDZV_MSG_CKPT, buf + RDZV_HEADER_SIZE, plen, &out), -EPROTO);
    /* An over-long name (256 bytes) is refused. */
    msgfix_example(RDZV_MSG_CKPT, &m);
    memset(m.u.ckpt.name, 'n', sizeof(m.u.ckpt.name));
    assert_int_equal(rdzv_msg_encode(&m, buf, sizeof(buf), &len), -EINVAL);
    assert_string_equal(rdzv_msg_name(RDZV_MSG_CKPT), "CKPT");
    assert_int_equal(RDZV_MSG_CKPT, 24);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all),
        cmocka_unit_test(test_goodput),
        cmocka_unit_test(test_header_bytes),
        cmocka_unit_test(test_header_rejects),
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_truncated_and_trailing),
        cmocka_unit_test(test_optional_tails),
        cmocka_unit_test(test_parts_tails),
        cmocka_unit_test(test_join_flags_tail),
        cmocka_unit_test(test_join_same_failure_tail),
        cmocka_unit_test(test_join_stragglers_tail),
        cmocka_unit_test(test_failure_sig_tail),
        cmocka_unit_test(test_small_buffer),
        cmocka_unit_test(test_overlong_strings),
        cmocka_unit_test(test_blob_limits),
        cmocka_unit_test(test_ckpt_names),
        cmocka_unit_test(test_preflight_limits),
        cmocka_unit_test(test_telemetry_limits),
        cmocka_unit_test(test_utf8),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
