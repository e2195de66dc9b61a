/* Idle-connection and slowloris pressure on a rendezvous server.
 *
 *   slowloris -e HOST:PORT [-n IDLE] [-t SECONDS] [-r]
 *
 * Opens IDLE TCP connections (default 1000) that never send a byte, plus one that trickles one
 * byte per second (the bytes of a frame header, then payload bytes, forever), and holds them
 * for SECONDS (default 30; 0 = until SIGINT/SIGTERM). With -r, a connection the server closes
 * is opened again at once, so the pressure stays at IDLE + 1 even though the server cuts
 * connections at its handshake timeout. Prints one line every second and a summary:
 *
 *   slowloris open=N opened=N cut=N trickled=N refused=N
 *
 * (open: connections open now; cut: closed by the server; refused: connect() failures.)
 * One thread, epoll; raise `ulimit -n` above IDLE + 16. Exit 0, or 2 on bad arguments.
 * Built by CMake as build/tests/peers/slowloris (tests/peers/CMakeLists.txt). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in srv;
static int ep, *fds, n_idle = 1000, reopen;
static long opened, cut, trickled, refused, open_now;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Slot i: a non-blocking connect; -1 when even socket() failed (counted as refused). */
static void open_slot(int i)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    fds[i] = -1;
    if (fd < 0) {
        refused++;
        return;
    }
    if (connect(fd, (struct sockaddr *)&srv, sizeof(srv)) < 0 && errno != EINPROGRESS) {
        close(fd);
        refused++;
        return;
    }
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    fds[i] = fd;
    opened++;
    open_now++;
}

static void close_slot(int i)
{
    if (fds[i] < 0)
        return;
    epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], NULL);
    close(fds[i]);
    fds[i] = -1;
    open_now--;
}

/* Readable or hung up: the server answered (ERROR) or closed; either way it is done with us. */
static void on_event(int i)
{
    char buf[512];
    ssize_t n = read(fds[i], buf, sizeof(buf));

    if (n > 0)
        return; /* an ERROR frame; the close follows */
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    close_slot(i);
    cut++;
    if (reopen && !stop)
        open_slot(i);
}

/* The slot n_idle trickles: the start of a TLS ClientHello record announcing 16 KiB, one byte a
 * second (then zeros), so it never completes within any handshake timeout. */
static void trickle(void)
{
    static const unsigned char frame[9] = {0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3F, 0xFC};
    static long pos;
    unsigned char b = pos < 9 ? frame[pos] : 0;

    if (fds[n_idle] < 0) {
        open_slot(n_idle);
        pos = 0;
        return;
    }
    if (write(fds[n_idle], &b, 1) == 1) {
        pos++;
        trickled++;
    }
}

static int parse(int argc, char **argv, double *secs)
{
    char host[256];
    const char *colon;
    int opt;

    while ((opt = getopt(argc, argv, "e:n:t:r")) != -1) {
        switch (opt) {
        case 'e':
            colon = strrchr(optarg, ':');
            if (colon == NULL || (size_t)(colon - optarg) >= sizeof(host))
                return -1;
            snprintf(host, sizeof(host), "%.*s", (int)(colon - optarg), optarg);
            srv.sin_family = AF_INET;
            srv.sin_port = htons((uint16_t)atoi(colon + 1));
            if (inet_pton(AF_INET, host, &srv.sin_addr) != 1)
                return -1;
            break;
        case 'n':
            n_idle = atoi(optarg);
            break;
        case 't':
            *secs = atof(optarg);
            break;
        case 'r':
            reopen = 1;
            break;
        default:
            return -1;
        }
    }
    return srv.sin_family == AF_INET && n_idle >= 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct rlimit rl;
    struct epoll_event evs[256];
    double secs = 30, t0, next_tick;

    if (parse(argc, argv, &secs) < 0) {
        fprintf(stderr, "usage: slowloris -e IPV4:PORT [-n IDLE] [-t SECONDS] [-r]\n");
        return 2;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n_idle + 16) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)n_idle + 16 ? rl.rlim_max : (rlim_t)n_idle + 16;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    ep = epoll_create1(EPOLL_CLOEXEC);
    fds = calloc((size_t)n_idle + 1, sizeof(*fds));
    if (ep < 0 || fds == NULL)
        return 1;
    for (int i = 0; i <= n_idle; i++)
        open_slot(i);
    t0 = now_s();
    next_tick = t0 + 1;
    while (!stop && (secs <= 0 || now_s() - t0 < secs)) {
        int n = epoll_wait(ep, evs, 256, 100);

        for (int k = 0; k < n; k++)
            on_event((int)evs[k].data.u32);
        if (now_s() >= next_tick) {
            next_tick += 1;
            trickle();
            printf("slowloris t=%.0f open=%ld opened=%ld cut=%ld trickled=%ld refused=%ld\n",
                   now_s() - t0, open_now, opened, cut, trickled, refused);
            fflush(stdout);
        }
    }
    printf("slowloris open=%ld opened=%ld cut=%ld trickled=%ld refused=%ld\n", open_now, opened,
           cut, trickled, refused);
    for (int i = 0; i <= n_idle; i++)
        close_slot(i);
    free(fds);
    close(ep);
    return 0;
}
