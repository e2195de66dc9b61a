/* Wire codec for the rendezvous protocol. The byte layout is documented in PROTOCOL.md; keep the
 * two in step. Every field is written and read one byte at a time so that host endianness,
 * struct padding and alignment never reach the wire. */
#include "message.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

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
};

const char *rdzv_msg_name(unsigned type)
{
    if (type >= RDZV_MSG_TYPE_MAX_ || msg_names[type] == NULL)
        return "UNKNOWN";
    return msg_names[type];
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
static void put_str(struct writer *w, const char *s, size_t max)
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
static void get_str(struct reader *r, char *dst, size_t max)
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

int rdzv_ckpt_name_ok(const char *name)
{
    size_t n = strnlen(name, RDZV_CKPT_NAME_MAX + 1);

    return n <= RDZV_CKPT_NAME_MAX && memchr(name, '/', n) == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
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

static void put_ckpt(struct writer *w, const struct rdzv_ckpt *c)
{
    put_ckpt_name(w, c->name);
    put_i64(w, c->step);
    put_u64(w, c->size);
    put_u64(w, c->checksum);
    put_u64(w, c->time_ms);
    put_u8(w, c->verified_bad);
    put_str(w, c->reason, RDZV_TEXT_MAX);
}

static void get_ckpt(struct reader *r, struct rdzv_ckpt *c)
{
    get_ckpt_name(r, c->name);
    c->step = get_i64(r);
    c->size = get_u64(r);
    c->checksum = get_u64(r);
    c->time_ms = get_u64(r);
    c->verified_bad = get_u8(r);
    get_str(r, c->reason, RDZV_TEXT_MAX);
}

/* --- payloads: one encoder and one decoder per struct, fields in PROTOCOL.md order --------- */
static void put_failure(struct writer *w, const struct rdzv_failure *f)
{
    put_u32(w, f->round);
    put_i32(w, f->rank);
    put_i32(w, f->local_rank);
    put_i32(w, f->exit_code);
    put_i32(w, f->signal);
    put_u64(w, f->time_ms);
    put_str(w, f->host, RDZV_HOST_MAX);
    put_str(w, f->text, RDZV_TEXT_MAX);
    put_u32(w, f->flags);
}

static void get_failure(struct reader *r, struct rdzv_failure *f)
{
    f->round = get_u32(r);
    f->rank = get_i32(r);
    f->local_rank = get_i32(r);
    f->exit_code = get_i32(r);
    f->signal = get_i32(r);
    f->time_ms = get_u64(r);
    get_str(r, f->host, RDZV_HOST_MAX);
    get_str(r, f->text, RDZV_TEXT_MAX);
    f->flags = get_u32(r);
}

static void put_join(struct writer *w, const struct rdzv_join *j)
{
    put_str(w, j->job_id, RDZV_ID_MAX);
    put_u32(w, j->min_nodes);
    put_u32(w, j->max_nodes);
    put_u32(w, j->nproc);
    put_str(w, j->host, RDZV_HOST_MAX);
    put_str(w, j->addr, RDZV_HOST_MAX);
    put_u32(w, j->master_port);
    put_u32(w, j->max_restarts);
    put_u32(w, j->last_call_ms);
    put_u32(w, j->join_timeout_ms);
    put_u64(w, j->node_id);
    put_u32(w, j->keep_alive_ms);
    put_u32(w, j->heartbeat_timeout_ms);
    put_u32(w, j->reconnect_grace_ms);
    put_ckpt_name(w, j->resume);
    put_i64(w, j->resume_step);
    put_bytes(w, j->node_secret, sizeof(j->node_secret));
    put_u32(w, j->want_rank);
}

static void get_join(struct reader *r, struct rdzv_join *j)
{
    get_str(r, j->job_id, RDZV_ID_MAX);
    j->min_nodes = get_u32(r);
    j->max_nodes = get_u32(r);
    j->nproc = get_u32(r);
    get_str(r, j->host, RDZV_HOST_MAX);
    get_str(r, j->addr, RDZV_HOST_MAX);
    j->master_port = get_u32(r);
    j->max_restarts = get_u32(r);
    j->last_call_ms = get_u32(r);
    j->join_timeout_ms = get_u32(r);
    j->node_id = get_u64(r);
    j->keep_alive_ms = get_u32(r);
    j->heartbeat_timeout_ms = get_u32(r);
    j->reconnect_grace_ms = get_u32(r);
    get_ckpt_name(r, j->resume);
    j->resume_step = get_i64(r);
    get_bytes(r, j->node_secret, sizeof(j->node_secret));
    j->want_rank = get_u32(r);
}

/* JOIN's optional tail (issue 16): absent when every field is 0, so a JOIN that does not use
 * it keeps the layout that servers built before it accept. */
static void put_join_tail(struct writer *w, const struct rdzv_join *j)
{
    if ((j->backoff_min_ms | j->backoff_max_ms | j->exclude_after | j->exclude_window_ms) == 0)
        return;
    put_u32(w, j->backoff_min_ms);
    put_u32(w, j->backoff_max_ms);
    put_u32(w, j->exclude_after);
    put_u32(w, j->exclude_window_ms);
}

static void get_join_tail(struct reader *r, struct rdzv_join *j)
{
    if (r->pos == r->len)
        return;
    j->backoff_min_ms = get_u32(r);
    j->backoff_max_ms = get_u32(r);
    j->exclude_after = get_u32(r);
    j->exclude_window_ms = get_u32(r);
}

static void put_assign(struct writer *w, const struct rdzv_assign *a)
{
    put_u32(w, a->round);
    put_u32(w, a->group_rank);
    put_u32(w, a->group_world_size);
    put_u32(w, a->rank_offset);
    put_u32(w, a->world_size);
    put_u32(w, a->restart_count);
    put_str(w, a->master_addr, RDZV_HOST_MAX);
    put_u32(w, a->master_port);
    put_ckpt_name(w, a->resume);
    put_i64(w, a->resume_step);
    put_bytes(w, a->worker_key, sizeof(a->worker_key));
}

static void get_assign(struct reader *r, struct rdzv_assign *a)
{
    a->round = get_u32(r);
    a->group_rank = get_u32(r);
    a->group_world_size = get_u32(r);
    a->rank_offset = get_u32(r);
    a->world_size = get_u32(r);
    a->restart_count = get_u32(r);
    get_str(r, a->master_addr, RDZV_HOST_MAX);
    a->master_port = get_u32(r);
    get_ckpt_name(r, a->resume);
    a->resume_step = get_i64(r);
    get_bytes(r, a->worker_key, sizeof(a->worker_key));
}

static void put_waiting(struct writer *w, const struct rdzv_waiting *v)
{
    put_u32(w, v->joined);
    put_u32(w, v->min_nodes);
    put_u32(w, v->max_nodes);
    put_i32(w, v->last_call_ms_left);
    put_i32(w, v->join_ms_left);
}

static void get_waiting(struct reader *r, struct rdzv_waiting *v)
{
    v->joined = get_u32(r);
    v->min_nodes = get_u32(r);
    v->max_nodes = get_u32(r);
    v->last_call_ms_left = get_i32(r);
    v->join_ms_left = get_i32(r);
}

/* Byte strings with a u32 length (KV values, STATUS JSON): checked against `max`. */
static void put_blob(struct writer *w, const uint8_t *b, uint32_t n, size_t max)
{
    if (n > max) {
        w->err = -EINVAL;
        return;
    }
    put_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        put_u8(w, b[i]);
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

static void put_rejoin(struct writer *w, const struct rdzv_rejoin *j)
{
    put_join(w, &j->join);
    put_u8(w, j->running);
    put_u8(w, j->done);
    put_assign(w, &j->assign);
}

static void get_rejoin(struct reader *r, struct rdzv_rejoin *j)
{
    get_join(r, &j->join);
    j->running = get_u8(r);
    j->done = get_u8(r);
    get_assign(r, &j->assign);
}

static void put_kv(struct writer *w, const struct rdzv_kv *kv)
{
    put_u32(w, kv->req_id);
    put_u32(w, kv->wait_ms);
    put_u32(w, kv->count);
    put_u8(w, kv->status);
    put_str(w, kv->key, RDZV_KEY_MAX);
    put_blob(w, kv->value, kv->value_len, RDZV_VALUE_MAX);
}

static void get_kv(struct reader *r, struct rdzv_kv *kv)
{
    kv->req_id = get_u32(r);
    kv->wait_ms = get_u32(r);
    kv->count = get_u32(r);
    kv->status = get_u8(r);
    get_str(r, kv->key, RDZV_KEY_MAX);
    kv->value_len = get_blob(r, kv->value, RDZV_VALUE_MAX);
}

/* The JSON is NUL-terminated in the struct; a NUL on the wire would hide the rest of it. */
static void get_status(struct reader *r, struct rdzv_status *st)
{
    st->len = get_blob(r, (uint8_t *)st->json, RDZV_STATUS_MAX);
    st->json[st->len] = '\0';
    if (!r->err && memchr(st->json, '\0', st->len) != NULL)
        r->err = -EPROTO;
}

/* The issue-3 and issue-5 messages; returns 0 when `m` is none of them. */
static int put_payload3(struct writer *w, const struct rdzv_msg *m)
{
    switch (m->type) {
    case RDZV_MSG_HEARTBEAT:
        put_u32(w, m->u.heartbeat.round);
        put_u64(w, m->u.heartbeat.seq);
        return 1;
    case RDZV_MSG_REJOIN:
        put_rejoin(w, &m->u.rejoin);
        return 1;
    case RDZV_MSG_REJOIN_OK:
        put_u32(w, m->u.rejoin_ok.round);
        return 1;
    case RDZV_MSG_ATTACH:
        put_str(w, m->u.attach.job_id, RDZV_ID_MAX);
        put_u32(w, m->u.attach.round);
        put_i32(w, m->u.attach.rank);
        return 1;
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        put_kv(w, &m->u.kv);
        return 1;
    case RDZV_MSG_STATUS_REQ:
        put_str(w, m->u.status_req.job_id, RDZV_ID_MAX);
        return 1;
    case RDZV_MSG_STATUS:
        put_blob(w, (const uint8_t *)m->u.status.json, m->u.status.len, RDZV_STATUS_MAX);
        return 1;
    case RDZV_MSG_CKPT:
        put_ckpt(w, &m->u.ckpt);
        return 1;
    default: /* ATTACH_OK carries no payload */
        return 0;
    }
}

static int get_payload3(struct reader *r, struct rdzv_msg *m)
{
    switch (m->type) {
    case RDZV_MSG_HEARTBEAT:
        m->u.heartbeat.round = get_u32(r);
        m->u.heartbeat.seq = get_u64(r);
        return 1;
    case RDZV_MSG_REJOIN:
        get_rejoin(r, &m->u.rejoin);
        return 1;
    case RDZV_MSG_REJOIN_OK:
        m->u.rejoin_ok.round = get_u32(r);
        return 1;
    case RDZV_MSG_ATTACH:
        get_str(r, m->u.attach.job_id, RDZV_ID_MAX);
        m->u.attach.round = get_u32(r);
        m->u.attach.rank = get_i32(r);
        return 1;
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        get_kv(r, &m->u.kv);
        return 1;
    case RDZV_MSG_STATUS_REQ:
        get_str(r, m->u.status_req.job_id, RDZV_ID_MAX);
        return 1;
    case RDZV_MSG_STATUS:
        get_status(r, &m->u.status);
        return 1;
    case RDZV_MSG_CKPT:
        get_ckpt(r, &m->u.ckpt);
        return 1;
    default:
        return 0;
    }
}

static void put_payload(struct writer *w, const struct rdzv_msg *m)
{
    if (put_payload3(w, m))
        return;
    switch (m->type) {
    case RDZV_MSG_HELLO:
        put_u32(w, m->u.hello.version);
        put_u8(w, m->u.hello.role);
        put_str(w, m->u.hello.token, RDZV_TOKEN_MAX);
        break;
    case RDZV_MSG_ERROR:
        put_u32(w, m->u.error.code);
        put_str(w, m->u.error.text, RDZV_TEXT_MAX);
        break;
    case RDZV_MSG_JOIN:
        put_join(w, &m->u.join);
        put_join_tail(w, &m->u.join);
        break;
    case RDZV_MSG_WAITING:
        put_waiting(w, &m->u.waiting);
        break;
    case RDZV_MSG_ASSIGN:
        put_assign(w, &m->u.assign);
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        put_failure(w, &m->u.failed);
        break;
    case RDZV_MSG_RESTART:
        put_u32(w, m->u.restart.restart_count);
        put_failure(w, &m->u.restart.cause);
        if (m->u.restart.delay_ms != 0) /* optional tail: absent = 0 (issue 16) */
            put_u32(w, m->u.restart.delay_ms);
        break;
    case RDZV_MSG_DONE:
        put_u32(w, m->u.done.round);
        break;
    case RDZV_MSG_JOB_FAILED:
        put_u32(w, m->u.job_failed.restarts);
        put_failure(w, &m->u.job_failed.cause);
        break;
    default: /* WELCOME and JOB_DONE carry no payload */
        break;
    }
}

static void get_payload(struct reader *r, struct rdzv_msg *m)
{
    if (get_payload3(r, m))
        return;
    switch (m->type) {
    case RDZV_MSG_HELLO:
        m->u.hello.version = get_u32(r);
        m->u.hello.role = get_u8(r);
        get_str(r, m->u.hello.token, RDZV_TOKEN_MAX);
        break;
    case RDZV_MSG_ERROR:
        m->u.error.code = get_u32(r);
        get_str(r, m->u.error.text, RDZV_TEXT_MAX);
        break;
    case RDZV_MSG_JOIN:
        get_join(r, &m->u.join);
        get_join_tail(r, &m->u.join);
        break;
    case RDZV_MSG_WAITING:
        get_waiting(r, &m->u.waiting);
        break;
    case RDZV_MSG_ASSIGN:
        get_assign(r, &m->u.assign);
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        get_failure(r, &m->u.failed);
        break;
    case RDZV_MSG_RESTART:
        m->u.restart.restart_count = get_u32(r);
        get_failure(r, &m->u.restart.cause);
        if (r->pos < r->len)
            m->u.restart.delay_ms = get_u32(r);
        break;
    case RDZV_MSG_DONE:
        m->u.done.round = get_u32(r);
        break;
    case RDZV_MSG_JOB_FAILED:
        m->u.job_failed.restarts = get_u32(r);
        get_failure(r, &m->u.job_failed.cause);
        break;
    default:
        break;
    }
}

static int type_known(unsigned type)
{
    return type > 0 && type < RDZV_MSG_TYPE_MAX_;
}

int rdzv_msg_encode(const struct rdzv_msg *msg, uint8_t *buf, size_t cap, size_t *len)
{
    struct writer w = {.buf = buf, .cap = cap};
    size_t payload;

    if (!type_known(msg->type))
        return -EINVAL;
    w.pos = RDZV_HEADER_SIZE; /* payload first: the header needs its length */
    put_payload(&w, msg);
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
    default: /* WELCOME, JOB_DONE, ATTACH_OK: no body */
        return 0;
    }
}

void rdzv_msg_init(struct rdzv_msg *msg, unsigned type)
{
    memset(msg, 0, offsetof(struct rdzv_msg, u) + rdzv_msg_body_size(type));
    msg->type = (uint8_t)type;
}

int rdzv_msg_decode(uint8_t type, const uint8_t *payload, size_t len, struct rdzv_msg *msg)
{
    struct reader r = {.p = payload, .len = len};

    if (!type_known(type))
        return -ENOTSUP;
    rdzv_msg_init(msg, type);
    get_payload(&r, msg);
    if (r.err)
        return r.err;
    if (r.pos != r.len) /* trailing bytes: the peer speaks a layout we do not know */
        return -EPROTO;
    return 0;
}
