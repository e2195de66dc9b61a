/* Per-source handshake limits: see hslimit.h. Linear probing over a power-of-two table kept at
 * most half full; entries are never deleted one by one: a rebuild (to grow, or when the table
 * holds max_sources) copies only the busy ones, which keeps probing simple. */
#include "hslimit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MILLI 1000u /* a token is 1000 milli-tokens: rate r/s refills r of them per ms */
#define MIN_SLOTS 64u

struct entry {
    uint8_t addr[16];
    uint8_t used;
    uint32_t in_flight;
    uint64_t tokens; /* milli-tokens at at_ms */
    uint64_t at_ms;
};

struct rdzv_hslimit {
    struct entry *slots;
    unsigned size, n; /* slots (a power of two), entries used */
    unsigned max_sources;
    unsigned max_in_flight, rate, burst;
};

static uint64_t hash(const uint8_t addr[16])
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */

    for (int i = 0; i < 16; i++)
        h = (h ^ addr[i]) * 1099511628211ULL;
    return h;
}

/* The slot holding addr, or the empty slot where it would go. */
static struct entry *slot(const struct rdzv_hslimit *l, const uint8_t addr[16])
{
    unsigned i = (unsigned)hash(addr) & (l->size - 1);

    while (l->slots[i].used && memcmp(l->slots[i].addr, addr, 16) != 0)
        i = (i + 1) & (l->size - 1);
    return &l->slots[i];
}

static uint64_t bucket_cap(const struct rdzv_hslimit *l)
{
    return (uint64_t)l->burst * MILLI;
}

static void refill(const struct rdzv_hslimit *l, struct entry *e, uint64_t now_ms)
{
    uint64_t cap = bucket_cap(l);

    if (l->rate == 0 || now_ms < e->at_ms) {
        e->tokens = l->rate == 0 ? cap : e->tokens;
        e->at_ms = now_ms;
        return;
    }
    e->tokens += (now_ms - e->at_ms) * l->rate;
    if (e->tokens > cap)
        e->tokens = cap;
    e->at_ms = now_ms;
}

/* Nothing in flight and a full bucket: the same as no entry. */
static int idle(const struct rdzv_hslimit *l, struct entry *e, uint64_t now_ms)
{
    refill(l, e, now_ms);
    return e->in_flight == 0 && e->tokens >= bucket_cap(l);
}

/* Rebuilds the table with size slots, dropping idle entries. Returns 0 or -ENOMEM (then the
 * table is unchanged). */
static int rebuild(struct rdzv_hslimit *l, unsigned size, uint64_t now_ms)
{
    struct rdzv_hslimit t = *l;

    t.slots = calloc(size, sizeof(*t.slots));
    if (t.slots == NULL)
        return -ENOMEM;
    t.size = size;
    t.n = 0;
    for (unsigned i = 0; i < l->size; i++) {
        struct entry *e = &l->slots[i];

        if (!e->used || idle(l, e, now_ms))
            continue;
        *slot(&t, e->addr) = *e;
        t.n++;
    }
    free(l->slots);
    *l = t;
    return 0;
}

int rdzv_hslimit_new(unsigned max_sources, struct rdzv_hslimit **out)
{
    struct rdzv_hslimit *l = calloc(1, sizeof(*l));

    *out = NULL;
    if (l == NULL)
        return -ENOMEM;
    l->max_sources = max_sources < 16 ? 16 : max_sources;
    l->size = MIN_SLOTS;
    l->burst = 1;
    l->slots = calloc(l->size, sizeof(*l->slots));
    if (l->slots == NULL) {
        free(l);
        return -ENOMEM;
    }
    *out = l;
    return 0;
}

void rdzv_hslimit_free(struct rdzv_hslimit *l)
{
    if (l == NULL)
        return;
    free(l->slots);
    free(l);
}

void rdzv_hslimit_configure(struct rdzv_hslimit *l, unsigned max_in_flight, unsigned rate,
                            unsigned burst)
{
    l->max_in_flight = max_in_flight;
    l->rate = rate;
    l->burst = burst < 1 ? 1 : burst;
}

/* Room for one more entry: grow while under max_sources, else drop the idle ones. Returns 0
 * or -ENOMEM. */
static int make_room(struct rdzv_hslimit *l, uint64_t now_ms)
{
    unsigned size = l->size;

    if (l->n + 1 <= l->size / 2 && l->n < l->max_sources)
        return 0;
    if (l->n + 1 > l->size / 2 && (uint64_t)l->size / 2 < l->max_sources)
        size = l->size * 2; /* grow: the table stays at most half full */
    if (rebuild(l, size, now_ms) < 0)
        return -ENOMEM;
    if (l->n >= l->max_sources || l->n + 1 > l->size / 2)
        return -ENOMEM; /* every source has handshakes in flight or a bucket refilling */
    return 0;
}

int rdzv_hslimit_begin(struct rdzv_hslimit *l, const uint8_t addr[16], uint64_t now_ms)
{
    struct entry *e = slot(l, addr);

    if (!e->used) {
        if (make_room(l, now_ms) < 0)
            return -ENOMEM;
        e = slot(l, addr); /* the rebuild moved the slots */
        memset(e, 0, sizeof(*e));
        memcpy(e->addr, addr, 16);
        e->used = 1;
        e->tokens = bucket_cap(l);
        e->at_ms = now_ms;
        l->n++;
    }
    refill(l, e, now_ms);
    if (l->max_in_flight != 0 && e->in_flight >= l->max_in_flight)
        return -EBUSY;
    if (l->rate != 0 && e->tokens < MILLI)
        return -EAGAIN;
    if (l->rate != 0)
        e->tokens -= MILLI;
    e->in_flight++;
    return 0;
}

void rdzv_hslimit_end(struct rdzv_hslimit *l, const uint8_t addr[16])
{
    struct entry *e = slot(l, addr);

    if (e->used && e->in_flight > 0)
        e->in_flight--;
}

unsigned rdzv_hslimit_sources(const struct rdzv_hslimit *l)
{
    return l->n;
}

unsigned rdzv_hslimit_in_flight(const struct rdzv_hslimit *l, const uint8_t addr[16])
{
    const struct entry *e = slot(l, addr);

    return e->used ? e->in_flight : 0;
}

void rdzv_hslimit_group(const uint8_t addr[16], uint8_t group[16])
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    int v4 = memcmp(addr, v4mapped, sizeof(v4mapped)) == 0;

    memmove(group, addr, 16);
    memset(group + (v4 ? 15 : 8), 0, v4 ? 1 : 8);
}

void rdzv_hslimit_refund(struct rdzv_hslimit *l, const uint8_t addr[16])
{
    struct entry *e = slot(l, addr);

    if (!e->used || l->rate == 0)
        return;
    e->tokens += MILLI;
    if (e->tokens > bucket_cap(l))
        e->tokens = bucket_cap(l);
}
