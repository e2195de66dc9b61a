/* agent/port.c: the reserved MASTER_PORT is bound and stays taken for everyone else, while a
 * listener that sets SO_REUSEADDR (rank 0's TCPStore) can still bind and serve it. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "port.h"

static int bind4(unsigned port, int reuse)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, rc;

    assert_true(s >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (reuse)
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    rc = bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : -errno;
    if (rc == 0 && reuse)
        rc = listen(s, 1) == 0 ? 0 : -errno;
    close(s);
    return rc;
}

static void test_reserve(void **state)
{
    int fd = -1, fd2 = -1;
    unsigned port = 0, port2 = 0;

    assert_int_equal(agent_port_reserve(&fd, &port), 0);
    assert_true(fd >= 0);
    assert_true(port > 0 && port < 65536);
    assert_int_equal(agent_port_reserve(&fd2, &port2), 0);
    assert_int_not_equal(port, port2);             /* each reservation its own port */
    assert_int_equal(bind4(port, 0), -EADDRINUSE); /* another program's bind fails */
    assert_int_equal(bind4(port, 1), 0);           /* the TCPStore's (SO_REUSEADDR) works */
    close(fd);
    close(fd2);
    assert_int_equal(bind4(port, 0), 0); /* released */
}

/* From here on this process has no IPv6: socket(AF_INET6, ...) fails with EAFNOSUPPORT, as on
 * a host booted with ipv6.disable=1 (a seccomp filter; irreversible, so the last test). */
static int no_ipv6(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -errno;
    return 0;
}

/* No IPv6 on the host: the port is reserved on the IPv4 wildcard instead. */
static void test_reserve_ipv4_only(void **state)
{
    int fd = -1;
    unsigned port = 0;

    if (no_ipv6() != 0)
        skip();
    assert_true(socket(AF_INET6, SOCK_STREAM, 0) < 0);
    assert_int_equal(agent_port_reserve(&fd, &port), 0);
    assert_true(port > 0);
    assert_int_equal(bind4(port, 0), -EADDRINUSE);
    assert_int_equal(bind4(port, 1), 0);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reserve),
                                       cmocka_unit_test(test_reserve_ipv4_only)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
