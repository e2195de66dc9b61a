/* silent_conns: a hostile client for the flood tests. Opens PER silent TCP connections
 * (not one byte sent) from each of ADDRS source addresses to HOST:PORT and holds them open; with
 * -r MS, a connection the server closes is opened again MS later (an attacker keeping up the
 * pressure). Source address k is FIRST plus k in the third octet (127.100.0.2, 127.100.1.2...):
 * one /24 each, which Linux routes to lo for any 127/8 address.
 *
 *   silent_conns [-r MS] [-t SECONDS] HOST PORT ADDRS PER FIRST
 *
 * Prints "connected N" once every connection was answered (connected or failed), then a line
 * "open N closed N failed N" a second; stops on SIGTERM/SIGINT or after -t seconds (default
 * 120). Raises RLIMIT_NOFILE to its hard limit; exits 77 when that is not enough (the reason on
 * stderr), 2 on a usage error. */
#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

struct sc {
    uv_tcp_t tcp;
    uv_connect_t connect;
    uv_timer_t again;
    struct sockaddr_in src;
    int open; /* tcp handle initialised and not closed */
};

static struct sc *conns;
static unsigned n_conns, n_open, n_answered, n_closed, n_failed, reconnect_ms;
static struct sockaddr_in dst;
static uv_loop_t *loop;
static uv_timer_t tick, stop_timer;
static uv_signal_t sigs[2];
static int announced;
static char rbuf[4096];

static void start(struct sc *c);

static void again_cb(uv_timer_t *t)
{
    start(t->data);
}

static void closed_cb(uv_handle_t *h)
{
    struct sc *c = h->data;

    c->open = 0;
    if (reconnect_ms > 0 && !uv_is_closing((uv_handle_t *)&stop_timer))
        uv_timer_start(&c->again, again_cb, reconnect_ms, 0);
}

static void hang_up(struct sc *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, closed_cb);
}

static void alloc_cb(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)h;
    (void)s;
    *b = uv_buf_init(rbuf, sizeof(rbuf));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct sc *c = s->data;

    (void)b;
    if (n < 0) { /* the server closed it (evicted, timed out) */
        n_open--;
        n_closed++;
        hang_up(c);
    }
}

static void answered(void)
{
    if (++n_answered == n_conns && !announced) {
        announced = 1;
        printf("connected %u\n", n_open);
        fflush(stdout);
    }
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct sc *c = req->data;

    if (status < 0 || uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) < 0) {
        n_failed++;
        answered();
        if (status != UV_ECANCELED)
            hang_up(c);
        return;
    }
    n_open++;
    answered();
}

static void start(struct sc *c)
{
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    c->connect.data = c;
    c->open = 1;
    if (uv_tcp_bind(&c->tcp, (struct sockaddr *)&c->src, 0) < 0 ||
        uv_tcp_connect(&c->connect, &c->tcp, (struct sockaddr *)&dst, connect_cb) < 0) {
        n_failed++;
        answered();
        hang_up(c);
    }
}

static void tick_cb(uv_timer_t *t)
{
    (void)t;
    printf("open %u closed %u failed %u\n", n_open, n_closed, n_failed);
    fflush(stdout);
}

static void stop_cb(uv_timer_t *t)
{
    (void)t;
    uv_stop(loop);
}

static void signal_cb(uv_signal_t *s, int sig)
{
    (void)s;
    (void)sig;
    uv_stop(loop);
}

/* RLIMIT_NOFILE up to the hard limit; 0 when need descriptors fit. */
static int raise_nofile(unsigned need)
{
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return -1;
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
    (void)getrlimit(RLIMIT_NOFILE, &r);
    if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < need) {
        fprintf(stderr, "silent_conns: %u connections need %u descriptors, RLIMIT_NOFILE is %lu\n",
                need - 64, need, (unsigned long)r.rlim_cur);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    unsigned addrs, per, seconds = 120;
    struct in_addr first;
    int o;

    while ((o = getopt(argc, argv, "r:t:")) != -1) {
        if (o == 'r')
            reconnect_ms = (unsigned)atoi(optarg);
        else if (o == 't')
            seconds = (unsigned)atoi(optarg);
        else
            return 2;
    }
    if (argc - optind != 5 || uv_ip4_addr(argv[optind], atoi(argv[optind + 1]), &dst) != 0 ||
        inet_pton(AF_INET, argv[optind + 4], &first) != 1) {
        fprintf(stderr, "usage: silent_conns [-r MS] [-t S] HOST PORT ADDRS PER FIRST\n");
        return 2;
    }
    addrs = (unsigned)atoi(argv[optind + 2]);
    per = (unsigned)atoi(argv[optind + 3]);
    n_conns = addrs * per;
    if (n_conns == 0 || raise_nofile(n_conns + 64) != 0)
        return n_conns == 0 ? 2 : 77;
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    conns = calloc(n_conns, sizeof(*conns));
    if (conns == NULL)
        return 1;
    for (unsigned i = 0; i < n_conns; i++) {
        struct sc *c = &conns[i];
        uint32_t a = ntohl(first.s_addr) + (i / per) * 256u;

        c->src.sin_family = AF_INET;
        c->src.sin_addr.s_addr = htonl(a);
        uv_timer_init(loop, &c->again);
        c->again.data = c;
        start(c);
    }
    uv_timer_init(loop, &tick);
    uv_timer_start(&tick, tick_cb, 1000, 1000);
    uv_timer_init(loop, &stop_timer);
    uv_timer_start(&stop_timer, stop_cb, seconds * 1000ull, 0);
    for (int i = 0; i < 2; i++) {
        uv_signal_init(loop, &sigs[i]);
        uv_signal_start(&sigs[i], signal_cb, i ? SIGTERM : SIGINT);
    }
    uv_run(loop, UV_RUN_DEFAULT);
    tick_cb(&tick);
    return 0; /* the process exit closes every socket */
}
