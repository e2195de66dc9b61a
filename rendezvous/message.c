/* Wire codec for the rendezvous protocol. The byte layout is documented in PROTOCOL.md; keep the
 * two in step. Every field is written and read one byte at a time so that host endianness,
 * struct padding and alignment never reach the wire. */
#include "message.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"

static const char *const msg_names[RDZV_MSG_TYPE_MAX_] = {
    [RDZV_MSG_HELLO] = "HELLO",
    [RDZV_MSG_WELCOME] = "WELCOME",
    [RDZV_MSG_ERROR] = "ERROR",
    [RDZV_MSG_JOIN] = "JOIN",
    [RDZV_MSG_WAITING] = "WAITING",
    [RDZV_MSG_ASSIGN] = "ASSIGN",
    [RDZV_MSG_FAILED] = "FAILED",
    [RDZV_MSG_RESTART] = "RESTART",
    [RDZV_MSG_DONE] = "DONE",
    [RDZV_MSG_JOB_DONE] = "JOB_DONE",
    [RDZV_MSG_JOB_FAILED] = "JOB_FAILED",
    [RDZV_MSG_LEAVE] = "LEAVE",
    [RDZV_MSG_HEARTBEAT] = "HEARTBEAT",
    [RDZV_MSG_REJOIN] = "REJOIN",
    [RDZV_MSG_REJOIN_OK] = "REJOIN_OK",
    [RDZV_MSG_ATTACH] = "ATTACH",
    [RDZV_MSG_ATTACH_OK] = "ATTACH_OK",
    [RDZV_MSG_KV_PUT] = "KV_PUT",
    [RDZV_MSG_KV_GET] = "KV_GET",
    [RDZV_MSG_KV_REPLY] = "KV_REPLY",
    [RDZV_MSG_BARRIER] = "BARRIER",
    [RDZV_MSG_STATUS_REQ] = "STATUS_REQ",
    [RDZV_MSG_STATUS] = "STATUS",
    [RDZV_MSG_CKPT] = "CKPT",
    [RDZV_MSG_PREFLIGHT] = "PREFLIGHT",
    [RDZV_MSG_REPL_BEGIN] = "REPL_BEGIN",
    [RDZV_MSG_REPL_DATA] = "REPL_DATA",
    [RDZV_MSG_REPL_ACK] = "REPL_ACK",
    [RDZV_MSG_GOODPUT] = "GOODPUT",
    [RDZV_MSG_COLLECT] = "COLLECT",
    [RDZV_MSG_EVIDENCE] = "EVIDENCE",
    [RDZV_MSG_DEBUG_REQ] = "DEBUG_REQ",
    [RDZV_MSG_TELEMETRY] = "TELEMETRY",
    [RDZV_MSG_NOTICE] = "NOTICE",
    [RDZV_MSG_CKPT_PART] = "CKPT_PART",
    [RDZV_MSG_LOG] = "LOG",
    [RDZV_MSG_LOGS_REQ] = "LOGS_REQ",
    [RDZV_MSG_LOGS] = "LOGS",
};

const char *rdzv_msg_name(unsigned type)
{
    if (type >= RDZV_MSG_TYPE_MAX_ || msg_names[type] == NULL)
        return "UNKNOWN";
    return msg_names[type];
}

static const struct {
    const char *name;
    int err;
} err_table[] = {
    [RDZV_ERR_PROTOCOL] = {"PROTOCOL", -EPROTO},
    [RDZV_ERR_VERSION] = {"VERSION", -EPROTONOSUPPORT},
    [RDZV_ERR_AUTH] = {"AUTH", -EACCES},
    /* a join timeout is -ETIMEDOUT like any other timeout */
    [RDZV_ERR_TIMEOUT] = {"TIMEOUT", -ETIMEDOUT},
    [RDZV_ERR_MISMATCH] = {"MISMATCH", -EINVAL},
    [RDZV_ERR_CLOSED] = {"CLOSED", -ESHUTDOWN},
    [RDZV_ERR_UNKNOWN_TYPE] = {"UNKNOWN_TYPE", -EPROTO},
    [RDZV_ERR_EXCLUDED] = {"EXCLUDED", -EPERM},
};

int rdzv_err_errno(uint32_t code)
{
    if (code >= sizeof(err_table) / sizeof(err_table[0]) || err_table[code].name == NULL)
        return -EPROTO;
    return err_table[code].err;
}

const char *rdzv_err_name(uint32_t code)
{
    if (code >= sizeof(err_table) / sizeof(err_table[0]) || err_table[code].name == NULL)
        return "UNKNOWN";
    return err_table[code].name;
}

/* --- writer ---------------------------------------------------------------------------------
 * Keeps counting past the end of the buffer so a too-small buffer is reported once, at the end,
 * instead of after every field. */
struct writer {
    uint8_t *buf;
    size_t cap, pos;
    int err;
};

static void put_u8(struct writer *w, uint8_t v)
{
    if (w->pos < w->cap)
        w->buf[w->pos] = v;
    w->pos++;
}

static void put_u16(struct writer *w, uint16_t v)
{
    put_u8(w, (uint8_t)(v >> 8));
    put_u8(w, (uint8_t)v);
}

static void put_u32(struct writer *w, uint32_t v)
{
    put_u16(w, (uint16_t)(v >> 16));
    put_u16(w, (uint16_t)v);
}

static void put_u64(struct writer *w, uint64_t v)
{
    put_u32(w, (uint32_t)(v >> 32));
    put_u32(w, (uint32_t)v);
}

/* Two's complement on the wire; the cast through uint32_t is defined for every int32_t. */
static void put_i32(struct writer *w, int32_t v)
{
    put_u32(w, (uint32_t)v);
}

static void put_i64(struct writer *w, int64_t v)
{
    put_u64(w, (uint64_t)v);
}

/* `max` is the field's limit; the struct arrays are max + 1 so strnlen() stays inside them. */
/* Any bytes but NUL (KV keys, HELLO.token: handed back or ignored, never shown). */
static void put_raw_str(struct writer *w, const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);

    if (n > max) {
        w->err = -EINVAL;
        return;
    }
    put_u16(w, (uint16_t)n);
    for (size_t i = 0; i < n; i++)
        put_u8(w, (uint8_t)s[i]);
}

/* Identifiers and names (job ids, hosts, addresses): valid UTF-8 or not sent. */
static void put_str(struct writer *w, const char *s, size_t max)
{
    if (!mc_utf8_valid(s, strnlen(s, max + 1))) {
        w->err = -EINVAL;
        return;
    }
    put_raw_str(w, s, max);
}

/* Free text (failure and error texts): made valid UTF-8 on the way out, so that a text a
 * fixed-size snprintf cut mid-character is still a text the other side accepts. */
static void put_text(struct writer *w, const char *s, size_t max)
{
    char copy[RDZV_TEXT_MAX + 1];

    if (max > RDZV_TEXT_MAX || strnlen(s, max + 1) > max) {
        w->err = -EINVAL;
        return;
    }
    snprintf(copy, sizeof(copy), "%s", s);
    mc_utf8_sanitize(copy);
    put_raw_str(w, copy, max);
}

/* --- reader ------------------------------------------------------------------------------- */
struct reader {
    const uint8_t *p;
    size_t len, pos;
    int err;
};

static int need(struct reader *r, size_t n)
{
    if (r->err || r->len - r->pos < n) {
        r->err = -EPROTO;
        return 0;
    }
    return 1;
}

static uint8_t get_u8(struct reader *r)
{
    if (!need(r, 1))
        return 0;
    return r->p[r->pos++];
}

static uint16_t get_u16(struct reader *r)
{
    uint16_t hi = get_u8(r);

    return (uint16_t)(hi << 8 | get_u8(r));
}

static uint32_t get_u32(struct reader *r)
{
    uint32_t hi = get_u16(r);

    return hi << 16 | get_u16(r);
}

static uint64_t get_u64(struct reader *r)
{
    uint64_t hi = get_u32(r);

    return hi << 32 | get_u32(r);
}

static int32_t get_i32(struct reader *r)
{
    uint32_t v = get_u32(r);

    /* Portable two's complement decode: avoids the implementation-defined unsigned->signed cast. */
    return v <= INT32_MAX ? (int32_t)v : -(int32_t)(~v) - 1;
}

static int64_t get_i64(struct reader *r)
{
    uint64_t v = get_u64(r);

    return v <= INT64_MAX ? (int64_t)v : -(int64_t)(~v) - 1;
}

/* dst has room for max + 1 bytes. A NUL inside the string is rejected: C code downstream would
 * silently truncate it, so two peers could disagree about a job id or a token. */
static void get_raw_str(struct reader *r, char *dst, size_t max)
{
    uint16_t n = get_u16(r);

    dst[0] = '\0';
    if (r->err)
        return;
    if (n > max || !need(r, n) || memchr(r->p + r->pos, '\0', n) != NULL) {
        r->err = -EPROTO;
        return;
    }
    memcpy(dst, r->p + r->pos, n);
    dst[n] = '\0';
    r->pos += n;
}

/* An identifier or name that is not valid UTF-8 is a malformed message: it would
 * reach /metrics labels and /status, whose consumers refuse the whole document over it. */
static void get_str(struct reader *r, char *dst, size_t max)
{
    get_raw_str(r, dst, max);
    if (!r->err && !mc_utf8_valid(dst, strlen(dst)))
        r->err = -EPROTO;
}

/* Free text is made valid instead: an older peer may have cut a character short, and the
 * text only explains; refusing it would lose the failure it reports. */
static void get_text(struct reader *r, char *dst, size_t max)
{
    get_raw_str(r, dst, max);
    if (!r->err)
        mc_utf8_sanitize(dst);
}

int rdzv_ckpt_name_ok(const char *name)
{
    size_t n = strnlen(name, RDZV_CKPT_NAME_MAX + 1);

    /* UTF-8: the name is shown in /status; a file name of other bytes is not sent */
    return n <= RDZV_CKPT_NAME_MAX && memchr(name, '/', n) == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0 && mc_utf8_valid(name, n);
}

/* A checkpoint name is joined to the agent's checkpoint directory: a '/' or ".." from a
 * confused or hostile peer would make an agent read or export a path outside it. */
/* Fixed-size byte fields (keys, secrets): exactly n bytes, no length prefix. */
static void put_bytes(struct writer *w, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_u8(w, b[i]);
}

static void get_bytes(struct reader *r, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = get_u8(r);
}

static void put_ckpt_name(struct writer *w, const char *name)
{
    if (!rdzv_ckpt_name_ok(name)) {
        w->err = -EINVAL;
        return;
    }
    put_str(w, name, RDZV_CKPT_NAME_MAX);
}

static void get_ckpt_name(struct reader *r, char *dst)
{
    get_str(r, dst, RDZV_CKPT_NAME_MAX);
    if (!r->err && !rdzv_ckpt_name_ok(dst))
        r->err = -EPROTO;
}

/* Byte strings with a u32 length (KV values, STATUS JSON): checked against `max`. */
static void put_blob(struct writer *w, const uint8_t *b, uint32_t n, size_t max)
{
    if (n > max) {
        w->err = -EINVAL;
        return;
    }
    put_u32(w, n);
    /* one copy, not put_u8 per byte: a 60 KiB replica chunk byte by byte was 16 % of the
     * server's time relaying a checkpoint */
    if (w->pos <= w->cap && w->cap - w->pos >= n && n > 0)
        memcpy(w->buf + w->pos, b, n);
    w->pos += n;
}

static uint32_t get_blob(struct reader *r, uint8_t *dst, size_t max)
{
    uint32_t n = get_u32(r);

    if (r->err)
        return 0;
    if (n > max || !need(r, n)) {
        r->err = -EPROTO;
        return 0;
    }
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return n;
}

/* --- payloads: one description per struct, fields in PROTOCOL.md order -----------------------
 * The same function encodes and decodes: a struct io holds a writer (encoding) or a reader
 * (decoding), never both, and each IO_* field step puts the field or gets it. Encoding never
 * assigns to the message (rdzv_msg_encode's const is cast away for the shared code only). */
struct io {
    struct writer *w;
    struct reader *r;
};

#define IO_INT(c, bits, f)                                                                         \
    do {                                                                                           \
        if ((c)->w != NULL)                                                                        \
            put_##bits((c)->w, f);                                                                 \
        else                                                                                       \
            (f) = get_##bits((c)->r);                                                              \
    } while (0)
#define IO_U8(c, f) IO_INT(c, u8, f)
#define IO_U32(c, f) IO_INT(c, u32, f)
#define IO_U64(c, f) IO_INT(c, u64, f)
#define IO_I32(c, f) IO_INT(c, i32, f)
#define IO_I64(c, f) IO_INT(c, i64, f)

static void io_str(struct io *c, char *s, size_t max)
{
    if (c->w != NULL)
        put_str(c->w, s, max);
    else
        get_str(c->r, s, max);
}

static void io_text(struct io *c, char *s, size_t max)
{
    if (c->w != NULL)
        put_text(c->w, s, max);
    else
        get_text(c->r, s, max);
}

static void io_raw_str(struct io *c, char *s, size_t max)
{
    if (c->w != NULL)
        put_raw_str(c->w, s, max);
    else
        get_raw_str(c->r, s, max);
}

static void io_bytes(struct io *c, uint8_t *b, size_t n)
{
    if (c->w != NULL)
        put_bytes(c->w, b, n);
    else
        get_bytes(c->r, b, n);
}

static void io_ckpt_name(struct io *c, char *name)
{
    if (c->w != NULL)
        put_ckpt_name(c->w, name);
    else
        get_ckpt_name(c->r, name);
}

static void io_blob(struct io *c, uint8_t *b, uint32_t *n, size_t max)
{
    if (c->w != NULL)
        put_blob(c->w, b, *n, max);
    else
        *n = get_blob(c->r, b, max);
}

static void io_ckpt(struct io *c, struct rdzv_ckpt *k)
{
    io_ckpt_name(c, k->name);
    IO_I64(c, k->step);
    IO_U64(c, k->size);
    IO_U64(c, k->checksum);
    IO_U64(c, k->time_ms);
    IO_U8(c, k->verified_bad);
    io_text(c, k->reason, RDZV_TEXT_MAX);
    /* the optional tail: the holder (only a replica's record has one), then the part (only a
     * sharded checkpoint's); each written only when it or the part after it is set */
    if ((c->w != NULL && k->holder[0] == '\0' && k->part == 0) ||
        (c->r != NULL && c->r->pos == c->r->len))
        return;
    io_str(c, k->holder, RDZV_HOST_MAX);
    if ((c->w != NULL && k->part == 0) || (c->r != NULL && c->r->pos == c->r->len)) {
        if (c->r != NULL && !c->r->err && k->holder[0] == '\0')
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, k->part);
    IO_U32(c, k->parts);
    IO_U32(c, k->part_flags);
    if (k->part == 0 || k->part > k->parts || k->parts > RDZV_PARTS_MAX ||
        (k->part_flags & ~RDZV_CKPT_PART_EMPTY) != 0) {
        if (c->w != NULL)
            c->w->err = -EINVAL;
        else if (!c->r->err)
            c->r->err = -EPROTO;
    }
}

static void io_ckpt_part(struct io *c, struct rdzv_ckpt_part *k)
{
    io_ckpt_name(c, k->name);
    IO_I64(c, k->step);
    IO_U64(c, k->checksum);
    IO_U32(c, k->round);
    IO_U32(c, k->part);
    IO_U32(c, k->parts);
    if (k->name[0] == '\0' || k->part == 0 || k->part > k->parts || k->parts > RDZV_PARTS_MAX) {
        if (c->w != NULL)
            c->w->err = -EINVAL;
        else if (!c->r->err)
            c->r->err = -EPROTO;
    }
}

/* The fourth part of REPL_BEGIN's tail: the part of a sharded checkpoint, written only when not
 * 0; a mode of 0 before it is canonical only when it follows. */
static void io_repl_begin_part(struct io *c, struct rdzv_repl_begin *b)
{
    if ((c->w != NULL && b->part == 0) || (c->r != NULL && c->r->pos == c->r->len)) {
        if (c->r != NULL && !c->r->err && b->mode == 0)
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, b->part);
    IO_U32(c, b->parts);
    if (b->part == 0 || b->part > b->parts || b->parts > RDZV_PARTS_MAX) {
        if (c->w != NULL)
            c->w->err = -EINVAL;
        else if (!c->r->err)
            c->r->err = -EPROTO;
    }
}

/* The third part of REPL_BEGIN's tail: the original's mode, written only when it or the part
 * is not 0; flags of 0 before it are canonical only when it follows. */
static void io_repl_begin_mode(struct io *c, struct rdzv_repl_begin *b)
{
    if ((c->w != NULL && b->mode == 0 && b->part == 0) ||
        (c->r != NULL && c->r->pos == c->r->len)) {
        if (c->r != NULL && !c->r->err && b->flags == 0)
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, b->mode);
    if (c->w != NULL && (b->mode & ~RDZV_REPL_MODE_BITS) != 0)
        c->w->err = -EINVAL;
    if (c->r != NULL && !c->r->err && (b->mode & ~RDZV_REPL_MODE_BITS) != 0)
        c->r->err = -EPROTO;
    io_repl_begin_part(c, b);
}

static void io_repl_begin(struct io *c, struct rdzv_repl_begin *b)
{
    IO_U32(c, b->xfer);
    IO_U32(c, b->round);
    IO_U32(c, b->rank);
    io_ckpt_name(c, b->name);
    IO_I64(c, b->step);
    IO_U64(c, b->size);
    IO_U64(c, b->checksum);
    if (b->name[0] == '\0' && c->r != NULL) /* a copy needs a file name */
        c->r->err = -EPROTO;
    else if (b->name[0] == '\0')
        c->w->err = -EINVAL;
    /* the optional tail, canonical: the direct link (port 0: none), flags, then the mode, each
     * written only when it or a later part is set; a tail whose parts are all zero is sent as
     * no tail */
    if ((c->w != NULL && b->port == 0 && b->flags == 0 && b->mode == 0 && b->part == 0) ||
        (c->r != NULL && c->r->pos == c->r->len))
        return;
    IO_U32(c, b->port);
    IO_U32(c, b->link);
    io_bytes(c, b->key, sizeof(b->key));
    io_str(c, b->host, RDZV_HOST_MAX);
    if (c->w != NULL && b->port > 65535)
        c->w->err = -EINVAL;
    if (c->r != NULL && !c->r->err && b->port > 65535)
        c->r->err = -EPROTO;
    if ((c->w != NULL && b->flags == 0 && b->mode == 0 && b->part == 0) ||
        (c->r != NULL && c->r->pos == c->r->len)) {
        if (c->r != NULL && !c->r->err && b->port == 0)
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, b->flags);
    if (c->r != NULL && !c->r->err && (b->flags & ~RDZV_REPL_BEGIN_DIR) != 0)
        c->r->err = -EPROTO;
    io_repl_begin_mode(c, b);
}

/* The chunk is a u32-length blob of at most RDZV_REPL_CHUNK_MAX bytes; the offset and the
 * length are checked against the transfer by the server and the receiver. */
static void io_repl_data(struct io *c, struct rdzv_repl_data *d)
{
    IO_U32(c, d->xfer);
    IO_U64(c, d->offset);
    io_blob(c, d->data, &d->len, RDZV_REPL_CHUNK_MAX);
}

static void io_repl_ack(struct io *c, struct rdzv_repl_ack *a)
{
    IO_U32(c, a->xfer);
    IO_U64(c, a->offset);
    IO_U8(c, a->status);
    io_text(c, a->text, RDZV_TEXT_MAX);
    if (c->r != NULL && !c->r->err && a->status > RDZV_REPL_BULK)
        c->r->err = -EPROTO;
    if (a->status != RDZV_REPL_BULK)
        return;
    /* the bulk offer's tail: its port, streams and salt (agent/replica_bulk.h) */
    IO_U32(c, a->bulk_port);
    IO_U32(c, a->bulk_streams);
    io_bytes(c, a->bulk_salt, sizeof(a->bulk_salt));
    if (c->w != NULL && (a->bulk_port == 0 || a->bulk_port > 65535 || a->bulk_streams == 0 ||
                         a->bulk_streams > RDZV_REPL_BULK_STREAMS_MAX))
        c->w->err = -EINVAL;
    if (c->r != NULL && !c->r->err &&
        (a->bulk_port == 0 || a->bulk_port > 65535 || a->bulk_streams == 0 ||
         a->bulk_streams > RDZV_REPL_BULK_STREAMS_MAX))
        c->r->err = -EPROTO;
}

static void io_goodput(struct io *c, struct rdzv_goodput *g)
{
    IO_U32(c, g->round);
    IO_U32(c, g->restarts);
    IO_U64(c, g->wall_ms);
    for (int i = 0; i < RDZV_GP_NPHASES; i++)
        IO_U64(c, g->phase_ms[i]);
    IO_U64(c, g->lost_ms);
}

/* Text longer than RDZV_TEXT_MAX (stacks): must be valid UTF-8 when sent; made so when read. */
static void io_long_text(struct io *c, char *s, size_t max)
{
    if (c->w != NULL)
        put_str(c->w, s, max);
    else
        get_text(c->r, s, max);
}

static void io_evidence(struct io *c, struct rdzv_evidence *e)
{
    IO_U32(c, e->round);
    IO_U32(c, e->req);
    IO_U32(c, e->timeout_ms);
    IO_I32(c, e->rank);
    IO_I32(c, e->local_rank);
    IO_I32(c, e->pid);
    IO_U32(c, e->flags);
    IO_I32(c, e->exit_code);
    IO_I32(c, e->signal);
    IO_U64(c, e->silent_ms);
    IO_I64(c, e->fr_enqueued);
    IO_I64(c, e->fr_started);
    IO_I64(c, e->fr_completed);
    io_str(c, e->host, RDZV_HOST_MAX);
    io_text(c, e->op, RDZV_EV_OP_MAX);
    io_text(c, e->fr_op, RDZV_EV_OP_MAX);
    io_text(c, e->where, RDZV_EV_WHERE_MAX);
    io_text(c, e->innermost, RDZV_EV_WHERE_MAX);
    io_text(c, e->native, RDZV_EV_WHERE_MAX);
    io_long_text(c, e->frames, RDZV_EV_FRAMES_MAX);
    if (c->r != NULL && !c->r->err && (e->flags & ~RDZV_EV_FLAGS_ALL) != 0)
        c->r->err = -EPROTO;
}

static void io_failure(struct io *c, struct rdzv_failure *f)
{
    IO_U32(c, f->round);
    IO_I32(c, f->rank);
    IO_I32(c, f->local_rank);
    IO_I32(c, f->exit_code);
    IO_I32(c, f->signal);
    IO_U64(c, f->time_ms);
    io_str(c, f->host, RDZV_HOST_MAX);
    io_text(c, f->text, RDZV_TEXT_MAX);
    IO_U32(c, f->flags);
}

/* The signature, the optional tail of FAILED, LEAVE and JOB_FAILED: written only with a class
 * and a text, read only when present; a class of 0 or an empty text on the wire is refused
 * (canonical), an over-long text too (get_raw_str), a class this build does not know is kept
 * (the server never limits it: rdzv_sig_retry_limited). */
static void io_failure_sig(struct io *c, struct rdzv_failure *f)
{
    if (c->w != NULL && (f->sig_class == RDZV_SIG_NONE || f->sig[0] == '\0'))
        return;
    if (c->r != NULL) {
        f->sig_class = RDZV_SIG_NONE;
        f->sig[0] = '\0';
        if (c->r->pos == c->r->len)
            return;
    }
    IO_U8(c, f->sig_class);
    io_text(c, f->sig, RDZV_SIG_MAX);
    if (c->r != NULL && !c->r->err && (f->sig_class == RDZV_SIG_NONE || f->sig[0] == '\0'))
        c->r->err = -EPROTO;
}

static const char *const sig_names[RDZV_SIG_CLASS_MAX_] = {
    [RDZV_SIG_NONE] = "none",       [RDZV_SIG_SCRIPT] = "script", [RDZV_SIG_OOM] = "oom",
    [RDZV_SIG_NETWORK] = "network", [RDZV_SIG_SIGNAL] = "signal", [RDZV_SIG_LOST] = "lost",
    [RDZV_SIG_HANG] = "hang",       [RDZV_SIG_OTHER] = "other",
};

const char *rdzv_sig_class_name(unsigned cls)
{
    return cls < RDZV_SIG_CLASS_MAX_ ? sig_names[cls] : "none";
}

int rdzv_sig_retry_limited(unsigned cls)
{
    /* a bare exit code is not enough: a launcher script's `exit 3` may mean "try again" */
    return cls == RDZV_SIG_SCRIPT || cls == RDZV_SIG_OOM;
}

static uint32_t join_tail_first(const struct rdzv_join *j)
{
    return j->backoff_min_ms | j->backoff_max_ms | j->exclude_after | j->exclude_window_ms;
}

/* JOIN's optional tail: written only when a field is set and read only when present,
 * so a JOIN that does not use it keeps the layout that servers built before it accept. Four
 * parts: the backoff and exclusion fields, then `flags` (hot spares), then `same_failure`
 * (--max-same-failure), then `stragglers` (--exclude-stragglers), each written only when it or a
 * later part is non-zero (an earlier part may then be zeros). Canonical: a part of zeros at the end
 * is sent as no part, so one is never accepted. Also the end of REJOIN (its copy of JOIN). */
static int tail_end(struct io *c, int more)
{
    return c->w != NULL ? !more : c->r->pos == c->r->len;
}

static void io_join_tail(struct io *c, struct rdzv_join *j)
{
    int later = j->stragglers != 0;

    if (tail_end(c, join_tail_first(j) != 0 || j->flags != 0 || j->same_failure != 0 || later))
        return;
    IO_U32(c, j->backoff_min_ms);
    IO_U32(c, j->backoff_max_ms);
    IO_U32(c, j->exclude_after);
    IO_U32(c, j->exclude_window_ms);
    if (tail_end(c, j->flags != 0 || j->same_failure != 0 || later)) {
        if (c->r != NULL && join_tail_first(j) == 0)
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, j->flags);
    if (tail_end(c, j->same_failure != 0 || later)) {
        if (c->r != NULL && j->flags == 0)
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, j->same_failure); /* 0 (the default) only when a later part follows */
    if (c->r != NULL && j->same_failure > RDZV_SAME_FAILURE_MAX + 1)
        c->r->err = -EPROTO;
    if (tail_end(c, later)) {
        if (c->r != NULL && j->same_failure == 0)
            c->r->err = -EPROTO;
        return;
    }
    IO_U32(c, j->stragglers);
    if (c->r != NULL && (j->stragglers == 0 || j->stragglers > RDZV_STRAGGLERS_MAX))
        c->r->err = -EPROTO;
}

/* RESTART's optional tail: the server's backoff delay; absent = 0. */
static void io_restart_tail(struct io *c, struct rdzv_restart *r)
{
    if ((c->w != NULL && r->delay_ms == 0) || (c->r != NULL && c->r->pos == c->r->len))
        return;
    IO_U32(c, r->delay_ms);
    if (c->r != NULL && r->delay_ms == 0) /* canonical: 0 is sent as no tail */
        c->r->err = -EPROTO;
}

static void io_join(struct io *c, struct rdzv_join *j)
{
    io_str(c, j->job_id, RDZV_ID_MAX);
    IO_U32(c, j->min_nodes);
    IO_U32(c, j->max_nodes);
    IO_U32(c, j->nproc);
    io_str(c, j->host, RDZV_HOST_MAX);
    io_str(c, j->addr, RDZV_HOST_MAX);
    IO_U32(c, j->master_port);
    IO_U32(c, j->max_restarts);
    IO_U32(c, j->last_call_ms);
    IO_U32(c, j->join_timeout_ms);
    IO_U64(c, j->node_id);
    IO_U32(c, j->keep_alive_ms);
    IO_U32(c, j->heartbeat_timeout_ms);
    IO_U32(c, j->reconnect_grace_ms);
    io_ckpt_name(c, j->resume);
    IO_I64(c, j->resume_step);
    io_bytes(c, j->node_secret, sizeof(j->node_secret));
    IO_U32(c, j->want_rank);
}

static void io_assign(struct io *c, struct rdzv_assign *a)
{
    IO_U32(c, a->round);
    IO_U32(c, a->group_rank);
    IO_U32(c, a->group_world_size);
    IO_U32(c, a->rank_offset);
    IO_U32(c, a->world_size);
    IO_U32(c, a->restart_count);
    io_str(c, a->master_addr, RDZV_HOST_MAX);
    IO_U32(c, a->master_port);
    io_ckpt_name(c, a->resume);
    IO_I64(c, a->resume_step);
    io_bytes(c, a->worker_key, sizeof(a->worker_key));
}

static void io_waiting(struct io *c, struct rdzv_waiting *v)
{
    IO_U32(c, v->joined);
    IO_U32(c, v->min_nodes);
    IO_U32(c, v->max_nodes);
    IO_I32(c, v->last_call_ms_left);
    IO_I32(c, v->join_ms_left);
}

static void io_rejoin(struct io *c, struct rdzv_rejoin *j)
{
    io_join(c, &j->join);
    IO_U8(c, j->running);
    IO_U8(c, j->done);
    io_assign(c, &j->assign);
    /* the JOIN's tail comes last, so a server rebuilt from REJOINs keeps --restart-backoff and
     * --exclude-after, and a waiting spare stays one */
    io_join_tail(c, &j->join);
}

static void io_kv(struct io *c, struct rdzv_kv *kv)
{
    IO_U32(c, kv->req_id);
    IO_U32(c, kv->wait_ms);
    IO_U32(c, kv->count);
    IO_U8(c, kv->status);
    io_raw_str(c, kv->key, RDZV_KEY_MAX);
    io_blob(c, kv->value, &kv->value_len, RDZV_VALUE_MAX);
}

/* The JSON is NUL-terminated in the struct; a NUL on the wire would hide the rest of it. */
static void io_status(struct io *c, struct rdzv_status *st)
{
    io_blob(c, (uint8_t *)st->json, &st->len, RDZV_STATUS_MAX);
    if (c->r == NULL)
        return;
    st->json[st->len] = '\0';
    if (!c->r->err && memchr(st->json, '\0', st->len) != NULL)
        c->r->err = -EPROTO;
}

/* A level (enum rdzv_pf_level) beyond FAILURE is refused both ways. */
static void io_pf_level(struct io *c, uint8_t *level)
{
    IO_U8(c, *level);
    if (*level <= RDZV_PF_FAILURE)
        return;
    if (c->w != NULL)
        c->w->err = -EINVAL;
    else
        c->r->err = -EPROTO;
}

static void io_pf_gpu(struct io *c, struct rdzv_pf_gpu *g)
{
    IO_U32(c, g->index);
    io_text(c, g->uuid, RDZV_PF_UUID_MAX);
    io_text(c, g->model, RDZV_PF_MODEL_MAX);
    IO_U32(c, g->gemm_gflops);
    IO_U32(c, g->hbm_mbps);
    io_pf_level(c, &g->level);
    io_text(c, g->note, RDZV_PF_NOTE_MAX);
}

/* The GPU count is checked before any GPU is read: at most RDZV_PF_GPUS_MAX. */
static void io_preflight(struct io *c, struct rdzv_preflight *pf)
{
    IO_U32(c, pf->round);
    IO_U8(c, pf->ok);
    IO_U8(c, pf->joined);
    IO_U32(c, pf->p2p_pairs);
    IO_U32(c, pf->p2p_min_mbps);
    IO_U32(c, pf->p2p_median_mbps);
    io_pf_level(c, &pf->p2p_level);
    io_text(c, pf->p2p_note, RDZV_PF_NOTE_MAX);
    IO_U32(c, pf->count);
    if (pf->count > RDZV_PF_GPUS_MAX) {
        if (c->w != NULL)
            c->w->err = -EINVAL;
        else
            c->r->err = -EPROTO;
        pf->count = 0;
        return;
    }
    for (uint32_t i = 0; i < pf->count; i++)
        io_pf_gpu(c, &pf->gpus[i]);
}

/* TELEMETRY: t_ms, ngpus (u8), per GPU its fields in struct order and nprocs (u8) with
 * pid, rank, mem each, then nwarn (u8) and the warnings (text). Counts over the maxima are
 * refused both ways. */
static int tel_bad(struct io *c, uint32_t n, uint32_t max)
{
    if (n <= max)
        return 0;
    if (c->w != NULL)
        c->w->err = -EINVAL;
    else
        c->r->err = -EPROTO;
    return 1;
}

static void io_telemetry(struct io *c, struct rdzv_telemetry *t)
{
    uint8_t n = (uint8_t)t->ngpus;

    IO_U64(c, t->t_ms);
    if (tel_bad(c, t->ngpus, RDZV_TEL_GPUS_MAX))
        return;
    IO_U8(c, n);
    if (c->r != NULL)
        t->ngpus = n;
    if (tel_bad(c, t->ngpus, RDZV_TEL_GPUS_MAX))
        return;
    for (uint32_t i = 0; i < t->ngpus; i++) {
        struct rdzv_tel_gpu *g = &t->gpus[i];
        uint8_t np = (uint8_t)g->nprocs;

        IO_U32(c, g->gpu);
        IO_I32(c, g->util);
        IO_U64(c, g->mem_used);
        IO_U64(c, g->mem_total);
        IO_I32(c, g->sm_clock);
        IO_I32(c, g->mem_clock);
        IO_I32(c, g->temp);
        IO_I32(c, g->power_mw);
        IO_U64(c, g->throttle);
        IO_U32(c, g->xid);
        IO_U64(c, g->ecc);
        if (tel_bad(c, g->nprocs, RDZV_TEL_PROCS_MAX))
            return;
        IO_U8(c, np);
        if (c->r != NULL)
            g->nprocs = np;
        if (tel_bad(c, g->nprocs, RDZV_TEL_PROCS_MAX))
            return;
        for (uint32_t k = 0; k < g->nprocs; k++) {
            IO_U32(c, g->procs[k].pid);
            IO_I32(c, g->procs[k].rank);
            IO_U64(c, g->procs[k].mem);
        }
    }
    n = (uint8_t)t->nwarn;
    if (tel_bad(c, t->nwarn, RDZV_TEL_WARN_MAX))
        return;
    IO_U8(c, n);
    if (c->r != NULL)
        t->nwarn = n;
    if (tel_bad(c, t->nwarn, RDZV_TEL_WARN_MAX))
        return;
    for (uint32_t i = 0; i < t->nwarn; i++)
        io_text(c, t->warn[i], RDZV_TEL_WARN_LEN);
}

/* The messages added after the first protocol version; returns 0 when `m` is none of them. */
/* LOG and LOGS: dropped, next, state, count (u16), then per line rank (i32), stream (u8),
 * time_ms (u64), [LOGS: seq (u64)], len (u16) and the bytes (no NUL). */
static void io_log(struct io *c, struct rdzv_log *l, int logs)
{
    uint16_t count = (uint16_t)l->count;

    IO_U64(c, l->dropped);
    IO_U64(c, l->next);
    IO_U8(c, l->state);
    if (c->w != NULL && (l->count > RDZV_LOG_LINES_MAX || l->bytes > RDZV_LOG_BYTES_MAX)) {
        c->w->err = -EINVAL;
        return;
    }
    IO_INT(c, u16, count);
    if (c->r != NULL) {
        if (c->r->err)
            return;
        if (count > RDZV_LOG_LINES_MAX || (!logs && l->state != 0) ||
            (l->state & ~(RDZV_LOGS_ENDED | RDZV_LOGS_MORE | RDZV_LOGS_GAP | RDZV_LOGS_NONE)) !=
                0) {
            c->r->err = -EPROTO;
            return;
        }
        l->count = count;
        l->bytes = 0;
    }
    for (uint32_t i = 0; i < l->count; i++) {
        struct rdzv_log_line *ln = &l->lines[i];
        uint16_t len = (uint16_t)ln->len;

        IO_I32(c, ln->rank);
        IO_U8(c, ln->stream);
        IO_U64(c, ln->time_ms);
        if (logs)
            IO_U64(c, ln->seq);
        else if (c->r != NULL)
            ln->seq = 0;
        if (c->w != NULL) {
            if (ln->len > RDZV_LOG_LINE_MAX || ln->off > l->bytes || l->bytes - ln->off < ln->len ||
                ln->stream > 1 || memchr(l->text + ln->off, '\0', ln->len) != NULL) {
                c->w->err = -EINVAL;
                return;
            }
            put_u16(c->w, len);
            if (c->w->pos <= c->w->cap && c->w->cap - c->w->pos >= len && len > 0)
                memcpy(c->w->buf + c->w->pos, l->text + ln->off, len);
            c->w->pos += len;
            continue;
        }
        len = get_u16(c->r);
        if (c->r->err || len > RDZV_LOG_LINE_MAX || ln->stream > 1 || ln->rank < 0 ||
            RDZV_LOG_BYTES_MAX - l->bytes < len || !need(c->r, len) ||
            memchr(c->r->p + c->r->pos, '\0', len) != NULL) {
            c->r->err = -EPROTO;
            return;
        }
        ln->off = l->bytes;
        ln->len = len;
        memcpy(l->text + l->bytes, c->r->p + c->r->pos, len);
        c->r->pos += len;
        l->bytes += len;
    }
}

static int io_payload3(struct io *c, struct rdzv_msg *m)
{
    switch (m->type) {
    case RDZV_MSG_HEARTBEAT:
        IO_U32(c, m->u.heartbeat.round);
        IO_U64(c, m->u.heartbeat.seq);
        return 1;
    case RDZV_MSG_REJOIN:
        io_rejoin(c, &m->u.rejoin);
        return 1;
    case RDZV_MSG_REJOIN_OK:
        IO_U32(c, m->u.rejoin_ok.round);
        return 1;
    case RDZV_MSG_ATTACH:
        io_str(c, m->u.attach.job_id, RDZV_ID_MAX);
        IO_U32(c, m->u.attach.round);
        IO_I32(c, m->u.attach.rank);
        return 1;
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        io_kv(c, &m->u.kv);
        return 1;
    case RDZV_MSG_STATUS_REQ:
        io_str(c, m->u.status_req.job_id, RDZV_ID_MAX);
        return 1;
    case RDZV_MSG_STATUS:
        io_status(c, &m->u.status);
        return 1;
    case RDZV_MSG_CKPT:
        io_ckpt(c, &m->u.ckpt);
        return 1;
    case RDZV_MSG_PREFLIGHT:
        io_preflight(c, &m->u.preflight);
        return 1;
    case RDZV_MSG_REPL_BEGIN:
        io_repl_begin(c, &m->u.repl_begin);
        return 1;
    case RDZV_MSG_REPL_DATA:
        io_repl_data(c, &m->u.repl_data);
        return 1;
    case RDZV_MSG_REPL_ACK:
        io_repl_ack(c, &m->u.repl_ack);
        return 1;
    case RDZV_MSG_GOODPUT:
        io_goodput(c, &m->u.goodput);
        return 1;
    case RDZV_MSG_COLLECT:
        IO_U32(c, m->u.collect.round);
        IO_U32(c, m->u.collect.req);
        IO_U32(c, m->u.collect.timeout_ms);
        io_text(c, m->u.collect.why, RDZV_EV_WHY_MAX);
        return 1;
    case RDZV_MSG_EVIDENCE:
        io_evidence(c, &m->u.evidence);
        return 1;
    case RDZV_MSG_DEBUG_REQ:
        io_str(c, m->u.debug_req.job_id, RDZV_ID_MAX);
        IO_I32(c, m->u.debug_req.rank);
        return 1;
    case RDZV_MSG_TELEMETRY:
        io_telemetry(c, &m->u.telemetry);
        return 1;
    case RDZV_MSG_NOTICE:
        io_text(c, m->u.notice.text, RDZV_TEL_WARN_LEN);
        return 1;
    case RDZV_MSG_CKPT_PART:
        io_ckpt_part(c, &m->u.ckpt_part);
        return 1;
    case RDZV_MSG_LOG:
    case RDZV_MSG_LOGS:
        io_log(c, &m->u.log, m->type == RDZV_MSG_LOGS);
        return 1;
    case RDZV_MSG_LOGS_REQ:
        io_str(c, m->u.logs_req.job_id, RDZV_ID_MAX);
        IO_I32(c, m->u.logs_req.rank);
        IO_U64(c, m->u.logs_req.after);
        IO_U64(c, m->u.logs_req.since_ms);
        IO_U8(c, m->u.logs_req.flags);
        if (c->r != NULL && !c->r->err && (m->u.logs_req.flags & ~RDZV_LOGS_REQ_FOLLOW) != 0)
            c->r->err = -EPROTO;
        return 1;
    default: /* ATTACH_OK carries no payload */
        return 0;
    }
}

static void io_payload(struct io *c, struct rdzv_msg *m)
{
    if (io_payload3(c, m))
        return;
    switch (m->type) {
    case RDZV_MSG_HELLO:
        IO_U32(c, m->u.hello.version);
        IO_U8(c, m->u.hello.role);
        io_raw_str(c, m->u.hello.token, RDZV_TOKEN_MAX);
        break;
    case RDZV_MSG_ERROR:
        IO_U32(c, m->u.error.code);
        io_text(c, m->u.error.text, RDZV_TEXT_MAX);
        break;
    case RDZV_MSG_JOIN:
        io_join(c, &m->u.join);
        io_join_tail(c, &m->u.join);
        break;
    case RDZV_MSG_WAITING:
        io_waiting(c, &m->u.waiting);
        break;
    case RDZV_MSG_ASSIGN:
        io_assign(c, &m->u.assign);
        /* its tail, ASSIGN only (REJOIN carries io_assign's fields in the middle) */
        if ((c->w != NULL && m->u.assign.resume_parts == 0) ||
            (c->r != NULL && c->r->pos == c->r->len))
            break;
        IO_U32(c, m->u.assign.resume_parts);
        if (m->u.assign.resume_parts == 0 || m->u.assign.resume_parts > RDZV_PARTS_MAX ||
            m->u.assign.resume[0] == '\0') {
            if (c->w != NULL)
                c->w->err = -EINVAL;
            else if (!c->r->err)
                c->r->err = -EPROTO;
        }
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        io_failure(c, &m->u.failed);
        io_failure_sig(c, &m->u.failed);
        break;
    case RDZV_MSG_RESTART:
        IO_U32(c, m->u.restart.restart_count);
        io_failure(c, &m->u.restart.cause);
        io_restart_tail(c, &m->u.restart);
        break;
    case RDZV_MSG_DONE:
        IO_U32(c, m->u.done.round);
        break;
    case RDZV_MSG_JOB_FAILED:
        IO_U32(c, m->u.job_failed.restarts);
        io_failure(c, &m->u.job_failed.cause);
        io_failure_sig(c, &m->u.job_failed.cause);
        break;
    default: /* WELCOME and JOB_DONE carry no payload */
        break;
    }
}

/* A number without a name is reserved. */
static int type_known(unsigned type)
{
    return type > 0 && type < RDZV_MSG_TYPE_MAX_ && msg_names[type] != NULL;
}

int rdzv_msg_encode(const struct rdzv_msg *msg, uint8_t *buf, size_t cap, size_t *len)
{
    struct writer w = {.buf = buf, .cap = cap};
    size_t payload;

    if (!type_known(msg->type))
        return -EINVAL;
    w.pos = RDZV_HEADER_SIZE; /* payload first: the header needs its length */
    io_payload(&(struct io){.w = &w}, (struct rdzv_msg *)msg);
    if (w.err)
        return w.err;
    payload = w.pos - RDZV_HEADER_SIZE;
    if (payload > RDZV_MAX_PAYLOAD)
        return -EINVAL;
    if (w.pos > cap)
        return -ENOBUFS;
    w.pos = 0;
    put_u32(&w, RDZV_MAGIC);
    put_u8(&w, RDZV_PROTO_VERSION);
    put_u8(&w, msg->type);
    put_u16(&w, 0); /* flags: reserved */
    put_u32(&w, (uint32_t)payload);
    *len = RDZV_HEADER_SIZE + payload;
    return 0;
}

int rdzv_header_decode(const uint8_t *hdr, uint8_t *type, uint32_t *payload_len)
{
    struct reader r = {.p = hdr, .len = RDZV_HEADER_SIZE};
    uint32_t magic = get_u32(&r);
    uint8_t version = get_u8(&r);
    uint8_t t = get_u8(&r);
    uint32_t len;

    (void)get_u16(&r); /* flags: senders write 0, receivers ignore (reserved for later) */
    len = get_u32(&r);
    if (magic != RDZV_MAGIC)
        return -EPROTO;
    if (version != RDZV_PROTO_VERSION)
        return -EPROTONOSUPPORT;
    if (len > RDZV_MAX_PAYLOAD)
        return -EMSGSIZE;
    *type = t;
    *payload_len = len;
    return 0;
}

size_t rdzv_msg_body_size(unsigned type)
{
    const struct rdzv_msg *m = NULL;

    switch (type) {
    case RDZV_MSG_HELLO:
        return sizeof(m->u.hello);
    case RDZV_MSG_ERROR:
        return sizeof(m->u.error);
    case RDZV_MSG_JOIN:
        return sizeof(m->u.join);
    case RDZV_MSG_WAITING:
        return sizeof(m->u.waiting);
    case RDZV_MSG_ASSIGN:
        return sizeof(m->u.assign);
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        return sizeof(m->u.failed);
    case RDZV_MSG_RESTART:
        return sizeof(m->u.restart);
    case RDZV_MSG_DONE:
        return sizeof(m->u.done);
    case RDZV_MSG_JOB_FAILED:
        return sizeof(m->u.job_failed);
    case RDZV_MSG_HEARTBEAT:
        return sizeof(m->u.heartbeat);
    case RDZV_MSG_REJOIN:
        return sizeof(m->u.rejoin);
    case RDZV_MSG_REJOIN_OK:
        return sizeof(m->u.rejoin_ok);
    case RDZV_MSG_ATTACH:
        return sizeof(m->u.attach);
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        return sizeof(m->u.kv);
    case RDZV_MSG_STATUS_REQ:
        return sizeof(m->u.status_req);
    case RDZV_MSG_STATUS:
        return sizeof(m->u.status);
    case RDZV_MSG_CKPT:
        return sizeof(m->u.ckpt);
    case RDZV_MSG_PREFLIGHT:
        return sizeof(m->u.preflight);
    case RDZV_MSG_REPL_BEGIN:
        return sizeof(m->u.repl_begin);
    case RDZV_MSG_REPL_DATA:
        return sizeof(m->u.repl_data);
    case RDZV_MSG_REPL_ACK:
        return sizeof(m->u.repl_ack);
    case RDZV_MSG_GOODPUT:
        return sizeof(m->u.goodput);
    case RDZV_MSG_COLLECT:
        return sizeof(m->u.collect);
    case RDZV_MSG_EVIDENCE:
        return sizeof(m->u.evidence);
    case RDZV_MSG_DEBUG_REQ:
        return sizeof(m->u.debug_req);
    case RDZV_MSG_TELEMETRY:
        return sizeof(m->u.telemetry);
    case RDZV_MSG_NOTICE:
        return sizeof(m->u.notice);
    case RDZV_MSG_CKPT_PART:
        return sizeof(m->u.ckpt_part);
    case RDZV_MSG_LOG:
    case RDZV_MSG_LOGS:
        return sizeof(m->u.log);
    case RDZV_MSG_LOGS_REQ:
        return sizeof(m->u.logs_req);
    default: /* WELCOME, JOB_DONE, ATTACH_OK: no body */
        return 0;
    }
}

/* All of a body but the large byte buffer at the end of the types that have one. Their readers go
 * only as far as the length beside it, which the decoder and every sender set, and the buffer is
 * most of the body (60 KiB of a KV value, 64 KiB of STATUS text). Zeroing it was the cost of a
 * message: a KV_GET and its KV_REPLY memset 120 KiB, and a job's worker flooding the server with
 * 200,000 GETs kept its loop in memset for ~2 s, long enough for another job's heartbeats to arrive
 * late (integration.srv_kv_hold_flood). */
size_t rdzv_msg_clear_size(unsigned type)
{
    switch (type) {
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        return offsetof(struct rdzv_kv, value);
    case RDZV_MSG_STATUS:
        return offsetof(struct rdzv_status, json) + 1; /* "" until written */
    case RDZV_MSG_REPL_DATA:
        return offsetof(struct rdzv_repl_data, data);
    case RDZV_MSG_LOG:
    case RDZV_MSG_LOGS:
        return offsetof(struct rdzv_log, lines);
    default:
        return rdzv_msg_body_size(type);
    }
}

void rdzv_msg_init(struct rdzv_msg *msg, unsigned type)
{
    memset(msg, 0, offsetof(struct rdzv_msg, u) + rdzv_msg_clear_size(type));
    msg->type = (uint8_t)type;
}

int rdzv_msg_decode(uint8_t type, const uint8_t *payload, size_t len, struct rdzv_msg *msg)
{
    struct reader r = {.p = payload, .len = len};

    if (!type_known(type))
        return -ENOTSUP;
    rdzv_msg_init(msg, type);
    io_payload(&(struct io){.r = &r}, msg);
    if (r.err)
        return r.err;
    if (r.pos != r.len) /* trailing bytes: the peer speaks a layout we do not know */
        return -EPROTO;
    return 0;
}
