/* A test client's frames held back until its connection is up: a TLS client starts TLS only
 * once connected, and a test may queue its HELLO/JOIN before that. Header-only (static inline),
 * with the scratch message those clients fill, for the rendezvous tests that drive raw clients
 * (test_rdzv_handler, test_rdzv_limits). */
#ifndef MUSTER_TEST_SENDQ_H
#define MUSTER_TEST_SENDQ_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conn.h"
#include "message.h"

#define SENDQ_MAX 8

struct sendq {
    struct rdzv_msg *msg[SENDQ_MAX];
    int n;
};

/* A zeroed message of type in one static buffer, which the next call reuses: send or copy it
 * first. */
static inline struct rdzv_msg *sendq_msg(uint8_t type)
{
    static struct rdzv_msg m;

    memset(&m, 0, sizeof(m));
    m.type = type;
    return &m;
}

/* Sends m on conn now when connected, else keeps a copy for sendq_flush(). */
static inline void sendq_send(struct sendq *q, struct rdzv_conn *conn, int connected,
                              const struct rdzv_msg *m)
{
    if (connected) {
        assert_int_equal(rdzv_conn_send(conn, m), 0);
        return;
    }
    assert_true(q->n < SENDQ_MAX);
    q->msg[q->n] = malloc(sizeof(*m));
    assert_non_null(q->msg[q->n]);
    *q->msg[q->n++] = *m;
}

/* Frees what is queued, unsent. */
static inline void sendq_drop(struct sendq *q)
{
    for (int i = 0; i < q->n; i++)
        free(q->msg[i]);
    q->n = 0;
}

/* Sends what is queued on conn, now up, in order. */
static inline void sendq_flush(struct sendq *q, struct rdzv_conn *conn)
{
    for (int i = 0; i < q->n; i++)
        assert_int_equal(rdzv_conn_send(conn, q->msg[i]), 0);
    sendq_drop(q);
}

#endif
