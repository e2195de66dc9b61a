/* The agent's TCPStore server (store.h).
 *
 * Wire format (PyTorch's c10d TCPStore, docs: /work/shared/reference/round3.md section 1): a
 * request is one query byte and its fields; a string or byte vector is a uint64 length and
 * the bytes; every integer is in the host's byte order (little-endian on x86-64 and arm64:
 * PyTorch swaps nothing). A key list is a uint64 count and that many strings.
 *
 *   query        1.13  2.2+  fields                     reply
 *   VALIDATE       -     0   u32 0x3C85F7CE              -
 *   SET            0     1   key, value                  -
 *   COMPARE_SET    1     2   key, expected, desired      vector: the value afterwards
 *   GET            2     3   key                         vector ("" when absent)
 *   ADD            3     4   key, i64 delta              i64 new value (stored as decimal)
 *   CHECK          4     5   key list                    u8 READY 0 / NOT_READY 1
 *   WAIT           5     6   key list                    u8 STOP_WAITING 0, once all exist
 *   GETNUMKEYS     6     7   -                           i64
 *   WATCH_KEY      7     -   key                         u8 3 (callback registered)
 *   DELETE_KEY     8     8   key                         i64 1 deleted / 0 absent
 *   APPEND         -     9   key, value                  -
 *   MULTI_GET      -    10   key list                    one vector per key
 *   MULTI_SET      -    11   i64 count, (key, value)...  -
 *   CANCEL_WAIT    -    12   -                           u8 WAIT_CANCELED 1
 *   PING           -    13   u32 nonce                   u32 the nonce
 *
 * A 2.x client's first bytes are VALIDATE (00 CE F7 85 3C); a 1.13 SET would need a key whose
 * length has those low bytes (about 1 GiB, over the key bound), so five bytes tell the
 * dialects apart. 2.8+'s queues and LIST_KEYS are refused like any unknown query.
 *
 * WATCH_KEY is acknowledged but no change is ever pushed: init_process_group never watches a
 * key (1.13 only opens the silent callback connection, which is kept). */
#include "store.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "store_kv.h"

#define VALIDATE_MAGIC 0x3C85F7CEu
#define READ_CHUNK (64u << 10)
#define LISTEN_BACKLOG 4096 /* a whole job's workers connect at once; the kernel clamps it */

enum op {
    OP_UNKNOWN,
    OP_VALIDATE,
    OP_SET,
    OP_COMPARE_SET,
    OP_GET,
    OP_ADD,
    OP_CHECK,
    OP_WAIT,
    OP_GETNUMKEYS,
    OP_WATCH_KEY,
    OP_DELETE_KEY,
    OP_APPEND,
    OP_MULTI_GET,
    OP_MULTI_SET,
    OP_CANCEL_WAIT,
    OP_PING,
};

static const unsigned char ops_v1[] = {OP_SET,        OP_COMPARE_SET, OP_GET,
                                       OP_ADD,        OP_CHECK,       OP_WAIT,
                                       OP_GETNUMKEYS, OP_WATCH_KEY,   OP_DELETE_KEY};
static const unsigned char ops_v2[] = {OP_VALIDATE,    OP_SET,    OP_COMPARE_SET, OP_GET,
                                       OP_ADD,         OP_CHECK,  OP_WAIT,        OP_GETNUMKEYS,
                                       OP_DELETE_KEY,  OP_APPEND, OP_MULTI_GET,   OP_MULTI_SET,
                                       OP_CANCEL_WAIT, OP_PING};

enum dialect { DIALECT_NONE, DIALECT_V1, DIALECT_V2 };
enum { STOP_WAITING = 0, WAIT_CANCELED = 1, READY = 0, NOT_READY = 1, WATCH_REGISTERED = 3 };

/* Why a connection was closed; R_NONE (the client left) is not counted. */
enum reason {
    R_NONE,
    R_UNKNOWN_QUERY,
    R_BAD_MAGIC,
    R_BAD_ADD,
    R_KEY,
    R_VALUE,
    R_KEYS,
    R_REQUEST,
    R_TOTAL,
    R_WAITS,
    R_UNSENT,
    R_CONNS,
    R_NOMEM,
    R_COUNT
};

static const char *const reason_text[R_COUNT] = {
    [R_UNKNOWN_QUERY] = "an unknown query",
    [R_BAD_MAGIC] = "a VALIDATE with a wrong magic",
    [R_BAD_ADD] = "an ADD to a value that is not a number",
    [R_KEY] = "a key over the key bound",
    [R_VALUE] = "a value over the value bound",
    [R_KEYS] = "a key list over the keys-per-request bound",
    [R_REQUEST] = "a request over the request bound",
    [R_TOTAL] = "the store's total bytes bound",
    [R_WAITS] = "too many held WAITs on one connection",
    [R_UNSENT] = "replies it does not read (unsent bytes bound)",
    [R_CONNS] = "too many connections",
    [R_NOMEM] = "out of memory",
};

struct conn;

/* A WAIT held until its keys exist; keys is the request's key list as it came. */
struct waiter {
    struct waiter *prev, *next;
    struct conn *c;
    uint64_t n;
    size_t len;
    unsigned char keys[];
};

struct conn {
    uv_tcp_t tcp;
    struct agent_store *s;
    struct conn *prev, *next;
    unsigned char *buf;
    size_t len, cap;
    size_t unsent;
    unsigned waits;
    enum dialect dialect;
    int closing;
    char peer[64];
};

struct agent_store {
    uv_loop_t *loop;
    uv_tcp_t listener;
    struct agent_store_limits lim;
    struct agent_store_stats st;
    unsigned port;
    struct store_kv kv;
    struct conn *conns;
    struct waiter *waiters;
    unsigned pending; /* handles not yet closed */
    unsigned said;    /* reasons logged already: one line each */
    uint64_t why[R_COUNT];
    int closing;
    void (*done)(void *data);
    void *done_data;
};

struct wreq {
    uv_write_t req;
    struct conn *c;
    size_t len;
    unsigned char data[];
};

void agent_store_limits_default(struct agent_store_limits *l)
{
    *l = (struct agent_store_limits){.key_max = AGENT_STORE_KEY_MAX,
                                     .value_max = AGENT_STORE_VALUE_MAX,
                                     .keys_max = AGENT_STORE_KEYS_MAX,
                                     .request_max = AGENT_STORE_REQUEST_MAX,
                                     .total_max = AGENT_STORE_TOTAL_MAX,
                                     .unsent_max = AGENT_STORE_UNSENT_MAX,
                                     .conns_max = AGENT_STORE_CONNS_MAX,
                                     .waits_max = AGENT_STORE_WAITS_MAX};
}

/* store_kv_put, its error as the reason the connection closes */
static int kv_put(struct agent_store *s, const void *k, size_t kn, const void *v, size_t vn,
                  int append)
{
    int rc = store_kv_put(&s->kv, k, kn, v, vn, append);
    return rc == 0 ? 0 : rc == -EFBIG ? -R_VALUE : rc == -ENOSPC ? -R_TOTAL : -R_NOMEM;
}

/* ---- reading requests ------------------------------------------------------------------ */

/* A cursor over the bytes received: each rd_ returns 1 when the field is complete, 0 when
 * more bytes are needed (nothing is acted on before a whole request is in). */
struct rd {
    const unsigned char *p;
    size_t len, off;
};

static int rd_raw(struct rd *r, void *out, size_t n)
{
    if (r->len - r->off < n)
        return 0;
    memcpy(out, r->p + r->off, n);
    r->off += n;
    return 1;
}

/* A string of at most max bytes: 1, 0, or -bound when its length is over max. */
static int rd_str(struct rd *r, size_t max, int bound, const unsigned char **p, size_t *n)
{
    uint64_t len;
    size_t at = r->off;

    if (!rd_raw(r, &len, sizeof(len)))
        return 0;
    if (len > max)
        return -bound;
    if (r->len - r->off < len) {
        r->off = at;
        return 0;
    }
    *p = r->p + r->off;
    *n = (size_t)len;
    r->off += (size_t)len;
    return 1;
}

#define RD_KEY(s, r, p, n) rd_str(r, (s)->lim.key_max, R_KEY, p, n)
#define RD_VALUE(s, r, p, n) rd_str(r, (s)->lim.value_max, R_VALUE, p, n)

/* A key list; *first is where its first key starts, to walk it again with key_at. */
static int rd_keys(struct agent_store *s, struct rd *r, uint64_t *n, size_t *first)
{
    const unsigned char *p;
    size_t len;
    int rc;

    if (!rd_raw(r, n, sizeof(*n)))
        return 0;
    if (*n > s->lim.keys_max)
        return -R_KEYS;
    *first = r->off;
    for (uint64_t i = 0; i < *n; i++)
        if ((rc = RD_KEY(s, r, &p, &len)) != 1)
            return rc;
    return 1;
}

/* The next key of a list already checked by rd_keys. */
static void key_at(const unsigned char *base, size_t *off, const unsigned char **p, size_t *n)
{
    uint64_t len;
    memcpy(&len, base + *off, sizeof(len));
    *p = base + *off + sizeof(len);
    *n = (size_t)len;
    *off += sizeof(len) + (size_t)len;
}

static int all_exist(struct agent_store *s, const unsigned char *base, size_t off, uint64_t n)
{
    const unsigned char *k;
    size_t kn;
    for (uint64_t i = 0; i < n; i++) {
        key_at(base, &off, &k, &kn);
        if (store_kv_get(&s->kv, k, kn) == NULL)
            return 0;
    }
    return 1;
}

/* ---- connections ----------------------------------------------------------------------- */

static void store_finish(struct agent_store *s)
{
    void (*done)(void *) = s->done;
    void *data = s->done_data;

    store_kv_clear(&s->kv);
    free(s);
    if (done != NULL)
        done(data);
}

static void on_conn_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    struct agent_store *s = c->s;

    free(c->buf);
    free(c);
    if (--s->pending == 0 && s->closing)
        store_finish(s);
}

static void waiter_unlink(struct agent_store *s, struct waiter *w)
{
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        s->waiters = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    w->c->waits--;
    s->st.waits--;
}

static void drop_waits(struct conn *c)
{
    struct agent_store *s = c->s;
    for (struct waiter *w = s->waiters, *next; w != NULL && c->waits > 0; w = next) {
        next = w->next;
        if (w->c == c) {
            waiter_unlink(s, w);
            free(w);
        }
    }
}

static void say(struct agent_store *s, struct conn *c, enum reason why)
{
    s->why[why]++;
    if (why == R_CONNS)
        s->st.refused++;
    else if (why >= R_KEY)
        s->st.over_limit++;
    else
        s->st.bad++;
    if (!(s->said & (1u << why)) && !s->closing) {
        s->said |= 1u << why;
        mc_warn("agent store on port %u: closed a connection from %s: %s (said once; the "
                "count is logged when the store closes)",
                s->port, c->peer, reason_text[why]);
    }
}

/* Closes c; why (not R_NONE) is counted and said. c is freed in the close callback, so a
 * caller may still read c->closing afterwards. */
static void drop(struct conn *c, enum reason why)
{
    struct agent_store *s = c->s;

    if (c->closing)
        return;
    c->closing = 1;
    if (why != R_NONE)
        say(s, c, why);
    drop_waits(c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    s->st.conns--;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void on_written(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct conn *c = w->c;

    c->unsent -= w->len;
    if (status != 0)
        drop(c, R_NONE); /* the client left; ECANCELED when we closed it */
    free(w);
}

static struct wreq *wreq_new(struct conn *c, size_t len)
{
    struct wreq *w;

    if (c->unsent + len > c->s->lim.unsent_max) {
        drop(c, R_UNSENT);
        return NULL;
    }
    if ((w = malloc(sizeof(*w) + len)) == NULL) {
        drop(c, R_NOMEM);
        return NULL;
    }
    w->c = c;
    w->len = len;
    return w;
}

/* Sends w (filled), or closes c; libuv writes at once when nothing is queued before it. */
static void wreq_send(struct wreq *w)
{
    struct conn *c = w->c;
    uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)w->len);

    c->unsent += w->len;
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        c->unsent -= w->len;
        free(w);
        drop(c, R_NONE);
    }
}

static void reply(struct conn *c, const void *p, size_t n)
{
    struct wreq *w = wreq_new(c, n);
    if (w == NULL)
        return;
    memcpy(w->data, p, n);
    wreq_send(w);
}

static void reply_u8(struct conn *c, unsigned char v)
{
    reply(c, &v, 1);
}

static void reply_i64(struct conn *c, int64_t v)
{
    reply(c, &v, sizeof(v));
}

static void reply_vec(struct conn *c, const void *p, size_t n)
{
    uint64_t len = n;
    struct wreq *w = wreq_new(c, sizeof(len) + n);
    if (w == NULL)
        return;
    memcpy(w->data, &len, sizeof(len));
    if (n > 0)
        memcpy(w->data + sizeof(len), p, n);
    wreq_send(w);
}

/* Answers every WAIT whose keys all exist now that key k was written. The satisfied waiters
 * leave the list before any reply goes out: a reply may close its connection (unsent bound),
 * which unlinks that connection's other waiters under the walk. */
static void wake(struct agent_store *s, const void *k, size_t kn)
{
    struct waiter *ready = NULL;

    for (struct waiter *w = s->waiters, *next; w != NULL; w = next) {
        size_t off = 0;
        int mine = 0;
        next = w->next;
        for (uint64_t i = 0; i < w->n && !mine; i++) {
            const unsigned char *p;
            size_t n;
            key_at(w->keys, &off, &p, &n);
            mine = n == kn && memcmp(p, k, n) == 0;
        }
        if (mine && all_exist(s, w->keys, 0, w->n)) {
            waiter_unlink(s, w);
            w->next = ready;
            ready = w;
        }
    }
    while (ready != NULL) {
        struct waiter *w = ready;
        ready = w->next;
        if (!w->c->closing)
            reply_u8(w->c, STOP_WAITING);
        free(w);
    }
}

/* ---- one handler per query: parse the whole request (0: more bytes), then act ---------- */

static int h_set(struct conn *c, struct rd *r, int append)
{
    struct agent_store *s = c->s;
    const unsigned char *k, *v;
    size_t kn, vn;
    int rc;

    if ((rc = RD_KEY(s, r, &k, &kn)) != 1 || (rc = RD_VALUE(s, r, &v, &vn)) != 1)
        return rc;
    if ((rc = kv_put(s, k, kn, v, vn, append)) != 0)
        return rc;
    wake(s, k, kn);
    return 1;
}

static int h_compare_set(struct conn *c, struct rd *r)
{
    struct agent_store *s = c->s;
    const unsigned char *k, *x, *d;
    size_t kn, xn, dn;
    struct store_entry *e;
    int rc;

    if ((rc = RD_KEY(s, r, &k, &kn)) != 1 || (rc = RD_VALUE(s, r, &x, &xn)) != 1 ||
        (rc = RD_VALUE(s, r, &d, &dn)) != 1)
        return rc;
    e = store_kv_get(&s->kv, k, kn);
    if (e == NULL && xn > 0) {
        reply_vec(c, x, xn); /* absent and something expected: nothing stored */
        return 1;
    }
    if (e != NULL && !(e->vlen == xn && memcmp(e->val, x, xn) == 0)) {
        reply_vec(c, e->val, e->vlen);
        return 1;
    }
    if ((rc = kv_put(s, k, kn, d, dn, 0)) != 0)
        return rc;
    reply_vec(c, d, dn);
    wake(s, k, kn);
    return 1;
}

static int h_get(struct conn *c, struct rd *r)
{
    const unsigned char *k;
    size_t kn;
    struct store_entry *e;
    int rc = RD_KEY(c->s, r, &k, &kn);

    if (rc != 1)
        return rc;
    e = store_kv_get(&c->s->kv, k, kn);
    reply_vec(c, e ? e->val : NULL, e ? e->vlen : 0);
    return 1;
}

/* The value as PyTorch's std::stoll reads it: blanks, a sign, digits; -1 when not a number. */
static int parse_i64(const struct store_entry *e, int64_t *v)
{
    char buf[32], *end;

    if (e->vlen == 0 || e->vlen >= sizeof(buf))
        return -1;
    memcpy(buf, e->val, e->vlen);
    buf[e->vlen] = '\0';
    errno = 0;
    *v = strtoll(buf, &end, 10);
    return errno != 0 || end == buf ? -1 : 0;
}

static int h_add(struct conn *c, struct rd *r)
{
    struct agent_store *s = c->s;
    const unsigned char *k;
    size_t kn;
    int64_t delta, v = 0;
    struct store_entry *e;
    char text[32];
    int rc;

    if ((rc = RD_KEY(s, r, &k, &kn)) != 1 || !rd_raw(r, &delta, sizeof(delta)))
        return rc == 1 ? 0 : rc;
    if ((e = store_kv_get(&s->kv, k, kn)) != NULL && parse_i64(e, &v) != 0)
        return -R_BAD_ADD;
    v = (int64_t)((uint64_t)v + (uint64_t)delta); /* wraps as the client's int64 would */
    snprintf(text, sizeof(text), "%lld", (long long)v);
    if ((rc = kv_put(s, k, kn, text, strlen(text), 0)) != 0)
        return rc;
    reply_i64(c, v);
    wake(s, k, kn);
    return 1;
}

static int h_check(struct conn *c, struct rd *r)
{
    uint64_t n;
    size_t first;
    int rc = rd_keys(c->s, r, &n, &first);

    if (rc != 1)
        return rc;
    reply_u8(c, all_exist(c->s, r->p, first, n) ? READY : NOT_READY);
    return 1;
}

static int h_wait(struct conn *c, struct rd *r)
{
    struct agent_store *s = c->s;
    uint64_t n;
    size_t first;
    struct waiter *w;
    int rc = rd_keys(s, r, &n, &first);

    if (rc != 1)
        return rc;
    if (all_exist(s, r->p, first, n)) {
        reply_u8(c, STOP_WAITING);
        return 1;
    }
    if (c->waits >= s->lim.waits_max)
        return -R_WAITS;
    if ((w = malloc(sizeof(*w) + (r->off - first))) == NULL)
        return -R_NOMEM;
    *w = (struct waiter){.c = c, .n = n, .len = r->off - first, .next = s->waiters};
    memcpy(w->keys, r->p + first, w->len);
    if (s->waiters != NULL)
        s->waiters->prev = w;
    s->waiters = w;
    c->waits++;
    s->st.waits++;
    return 1;
}

static int h_delete(struct conn *c, struct rd *r)
{
    const unsigned char *k;
    size_t kn;
    int rc = RD_KEY(c->s, r, &k, &kn);

    if (rc != 1)
        return rc;
    reply_i64(c, store_kv_del(&c->s->kv, k, kn));
    return 1;
}

static int h_multi_get(struct conn *c, struct rd *r)
{
    struct agent_store *s = c->s;
    uint64_t n;
    size_t first, off, total = 0, at = 0;
    struct wreq *w = NULL;
    int rc = rd_keys(s, r, &n, &first);

    if (rc != 1)
        return rc;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then the copy */
        off = first;
        for (uint64_t i = 0; i < n; i++) {
            const unsigned char *k;
            size_t kn;
            key_at(r->p, &off, &k, &kn);
            struct store_entry *e = store_kv_get(&s->kv, k, kn);
            uint64_t len = e ? e->vlen : 0;
            if (pass == 0) {
                total += sizeof(len) + len;
                continue;
            }
            memcpy(w->data + at, &len, sizeof(len));
            if (len)
                memcpy(w->data + at + sizeof(len), e->val, len);
            at += sizeof(len) + len;
        }
        if (pass == 0 && (w = wreq_new(c, total)) == NULL)
            return 1; /* c is closed */
    }
    wreq_send(w);
    return 1;
}

static int h_multi_set(struct conn *c, struct rd *r)
{
    struct agent_store *s = c->s;
    const unsigned char *k, *v;
    size_t kn, vn, first;
    int64_t n;
    int rc;

    if (!rd_raw(r, &n, sizeof(n)))
        return 0;
    if (n < 0 || (uint64_t)n > s->lim.keys_max)
        return -R_KEYS;
    first = r->off;
    for (int64_t i = 0; i < n; i++)
        if ((rc = RD_KEY(s, r, &k, &kn)) != 1 || (rc = RD_VALUE(s, r, &v, &vn)) != 1)
            return rc;
    r->off = first;
    for (int64_t i = 0; i < n; i++) {
        RD_KEY(s, r, &k, &kn);
        RD_VALUE(s, r, &v, &vn);
        if ((rc = kv_put(s, k, kn, v, vn, 0)) != 0)
            return rc;
        wake(s, k, kn);
    }
    return 1;
}

static int h_u32(struct conn *c, struct rd *r, enum op op)
{
    uint32_t v;

    if (!rd_raw(r, &v, sizeof(v)))
        return 0;
    if (op == OP_PING)
        reply(c, &v, sizeof(v));
    else if (v != VALIDATE_MAGIC)
        return -R_BAD_MAGIC;
    return 1;
}

static int h_simple(struct conn *c, struct rd *r, enum op op)
{
    const unsigned char *k;
    size_t kn;
    int rc;

    switch (op) {
    case OP_GETNUMKEYS:
        reply_i64(c, (int64_t)c->s->kv.keys);
        return 1;
    case OP_CANCEL_WAIT:
        drop_waits(c);
        reply_u8(c, WAIT_CANCELED);
        return 1;
    case OP_WATCH_KEY:
        if ((rc = RD_KEY(c->s, r, &k, &kn)) != 1)
            return rc;
        reply_u8(c, WATCH_REGISTERED);
        return 1;
    default:
        return -R_UNKNOWN_QUERY;
    }
}

static enum op op_of(const struct conn *c, unsigned byte)
{
    if (c->dialect == DIALECT_V1)
        return byte < sizeof(ops_v1) ? ops_v1[byte] : OP_UNKNOWN;
    return byte < sizeof(ops_v2) ? ops_v2[byte] : OP_UNKNOWN;
}

/* One request at r: 1 done (r->off past it), 0 incomplete, -reason. */
static int one_request(struct conn *c, struct rd *r)
{
    unsigned char byte;
    enum op op;

    if (!rd_raw(r, &byte, 1))
        return 0;
    switch ((op = op_of(c, byte))) {
    case OP_SET:
    case OP_APPEND:
        return h_set(c, r, op == OP_APPEND);
    case OP_COMPARE_SET:
        return h_compare_set(c, r);
    case OP_GET:
        return h_get(c, r);
    case OP_ADD:
        return h_add(c, r);
    case OP_CHECK:
        return h_check(c, r);
    case OP_WAIT:
        return h_wait(c, r);
    case OP_DELETE_KEY:
        return h_delete(c, r);
    case OP_MULTI_GET:
        return h_multi_get(c, r);
    case OP_MULTI_SET:
        return h_multi_set(c, r);
    case OP_PING:
    case OP_VALIDATE:
        return h_u32(c, r, op);
    default:
        return h_simple(c, r, op);
    }
}

/* The dialect from the first bytes: VALIDATE and its magic is 2.x, anything else 1.13. */
static int detect(struct conn *c, struct rd *r)
{
    uint32_t magic;

    if (r->len < 1)
        return 0;
    if (r->p[0] != 0) {
        c->dialect = DIALECT_V1;
        c->s->st.dialect_seen |= 1;
        return 1;
    }
    if (r->len < 1 + sizeof(magic))
        return 0;
    memcpy(&magic, r->p + 1, sizeof(magic));
    c->dialect = magic == VALIDATE_MAGIC ? DIALECT_V2 : DIALECT_V1;
    c->s->st.dialect_seen |= c->dialect == DIALECT_V2 ? 2 : 1;
    r->off = c->dialect == DIALECT_V2 ? 1 + sizeof(magic) : 0;
    return 1;
}

/* Serves every whole request received, keeps the incomplete rest at the buffer's start. */
static void process(struct conn *c)
{
    size_t off = 0;

    while (!c->closing && off < c->len) {
        struct rd r = {.p = c->buf + off, .len = c->len - off};
        int first = c->dialect == DIALECT_NONE;
        int rc = first ? detect(c, &r) : one_request(c, &r);
        if (rc == 0)
            break;
        if (rc < 0) {
            drop(c, (enum reason) - rc);
            return;
        }
        c->s->st.requests += !first;
        off += r.off;
    }
    if (c->closing)
        return;
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
    if (c->len >= c->s->lim.request_max)
        drop(c, R_REQUEST);
    else if (c->len == 0 && c->cap > READ_CHUNK) { /* a big value went by: give it back */
        free(c->buf);
        c->buf = NULL;
        c->cap = 0;
    }
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b)
{
    struct conn *c = h->data;
    (void)hint;

    if (c->cap - c->len < READ_CHUNK) {
        size_t cap = c->cap * 2 > c->len + READ_CHUNK ? c->cap * 2 : c->len + READ_CHUNK;
        unsigned char *p = realloc(c->buf, cap);
        if (p == NULL) {
            *b = uv_buf_init(NULL, 0); /* the read callback gets UV_ENOBUFS */
            return;
        }
        c->buf = p;
        c->cap = cap;
    }
    *b = uv_buf_init((char *)c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    struct conn *c = st->data;
    (void)b;

    if (nread < 0) {
        drop(c, nread == UV_ENOBUFS ? R_NOMEM : R_NONE);
        return;
    }
    c->len += (size_t)nread;
    process(c);
}

static void peer_name(struct conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char host[48] = "?";
    unsigned port = 0;

    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof(host));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof(host));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    snprintf(c->peer, sizeof(c->peer), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

static void on_connection(uv_stream_t *l, int status)
{
    struct agent_store *s = l->data;
    struct conn *c;

    if (status != 0 || s->closing || (c = calloc(1, sizeof(*c))) == NULL)
        return; /* out of memory: the connection waits in the backlog */
    c->s = s;
    c->tcp.data = c;
    uv_tcp_init(s->loop, &c->tcp);
    s->pending++;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    s->st.accepted++;
    s->st.conns++;
    c->next = s->conns;
    if (s->conns != NULL)
        s->conns->prev = c;
    s->conns = c;
    peer_name(c);
    if (s->st.conns > s->lim.conns_max) {
        drop(c, R_CONNS);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1); /* every reply is small and someone waits for it */
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0)
        drop(c, R_NONE);
}

/* ---- the store --------------------------------------------------------------------------- */

/* Whether addr is one of this machine's (a bind to port 0 succeeds): MASTER_ADDR may be an
 * address a NAT forwards, which the store cannot bind. */
static int is_local(const struct sockaddr *addr, socklen_t len)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;
    struct sockaddr_storage ss;

    if (fd < 0)
        return 0;
    memcpy(&ss, addr, len);
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    ok = bind(fd, (struct sockaddr *)&ss, len) == 0;
    close(fd);
    return ok;
}

/* MASTER_ADDR when it is a numeric address of this machine, else the dual-stack wildcard. */
static void pick_addr(const char *host, unsigned port, struct sockaddr_storage *ss)
{
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (host != NULL && uv_ip4_addr(host, (int)port, a4) == 0 &&
        is_local((struct sockaddr *)a4, sizeof(*a4)))
        return;
    if (host != NULL && uv_ip6_addr(host, (int)port, a6) == 0 &&
        is_local((struct sockaddr *)a6, sizeof(*a6)))
        return;
    if (host != NULL && host[0] != '\0')
        mc_info("agent store: MASTER_ADDR %s is not a numeric address of this machine; "
                "listening on every address",
                host);
    uv_ip6_addr("::", (int)port, a6);
}

static int listen_on(struct agent_store *s, const char *host, unsigned port)
{
    struct sockaddr_storage ss;
    struct sockaddr_in6 any4;
    int len = sizeof(ss), rc;

    pick_addr(host, port, &ss);
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == UV_EAFNOSUPPORT && ss.ss_family == AF_INET6) { /* no IPv6 on this host */
        uv_ip4_addr("0.0.0.0", (int)port, (struct sockaddr_in *)&any4);
        rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&any4, 0);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, LISTEN_BACKLOG, on_connection);
    if (rc == 0)
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rc == 0)
        s->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return rc;
}

static void on_listener_closed(uv_handle_t *h)
{
    struct agent_store *s = h->data;
    if (--s->pending == 0 && s->closing)
        store_finish(s);
}

int agent_store_new(uv_loop_t *loop, const char *host, unsigned port,
                    const struct agent_store_limits *lim, struct agent_store **out)
{
    struct agent_store *s = calloc(1, sizeof(*s));
    int rc;

    *out = NULL;
    if (s == NULL)
        return UV_ENOMEM;
    s->loop = loop;
    if (lim != NULL)
        s->lim = *lim;
    else
        agent_store_limits_default(&s->lim);
    if (store_kv_init(&s->kv, s->lim.value_max, s->lim.total_max) != 0) {
        free(s);
        return UV_ENOMEM;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->pending = 1;
    if ((rc = listen_on(s, host, port)) != 0) {
        s->closing = 1; /* freed by the close callback, quietly */
        uv_close((uv_handle_t *)&s->listener, on_listener_closed);
        return rc;
    }
    *out = s;
    return 0;
}

unsigned agent_store_port(const struct agent_store *s)
{
    return s->port;
}

const struct agent_store_stats *agent_store_stats(struct agent_store *s)
{
    s->st.keys = s->kv.keys;
    s->st.bytes = s->kv.bytes;
    return &s->st;
}

static void say_counts(const struct agent_store *s)
{
    char line[512];
    size_t at = 0;

    for (int r = R_NONE + 1; r < R_COUNT && at < sizeof(line); r++)
        if (s->why[r] > 0)
            at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%llu for %s", at ? ", " : "",
                                   (unsigned long long)s->why[r], reason_text[r]);
    if (at > 0)
        mc_warn("agent store on port %u closed connections: %s", s->port, line);
}

void agent_store_close(struct agent_store *s, void (*done)(void *data), void *data)
{
    if (s == NULL)
        return;
    say_counts(s);
    s->closing = 1;
    s->done = done;
    s->done_data = data;
    while (s->conns != NULL)
        drop(s->conns, R_NONE);
    store_kv_clear(&s->kv);
    uv_close((uv_handle_t *)&s->listener, on_listener_closed); /* the fd is closed now */
}
