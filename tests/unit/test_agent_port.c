/* agent/port.c: the reserved MASTER_PORT is bound and stays taken for everyone else, while a
 * listener that sets SO_REUSEADDR (rank 0's TCPStore) can still bind and serve it. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reserve)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
