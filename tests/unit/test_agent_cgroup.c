/* agent/cgroup.c: finding this process's cgroup v2 directory from /proc/self/mountinfo and
 * /proc/self/cgroup text (fixtures from real nodes: pure v2, hybrid, v1 only, a container). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "cgroup.h"

/* Debian 12 with systemd's unified layout */
static const char mi_unified[] =
    "22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "25 28 0:23 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=4027880k\n"
    "28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "30 21 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

/* hybrid (this repository's CI machine): v1 controllers, cgroup2 at .../unified */
static const char mi_hybrid[] =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

/* v1 only: no cgroup2 line at all ("cgroup" alone must not match "cgroup2") */
static const char mi_v1[] =
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "32 30 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";

/* a bind mount of a subtree, with an escaped space in the mount point, and optional fields */
static const char mi_sub[] =
    "50 40 0:37 /kubepods/pod1 /mnt/my\\040cg ro,relatime shared:9 master:3 - cgroup2 none rw\n";

static void parse_mount_unified(void **state)
{
    char mnt[256], root[256];
    (void)state;
    assert_int_equal(agent_cgroup_parse_mount(mi_unified, mnt, sizeof(mnt), root, sizeof(root)), 0);
    assert_string_equal(mnt, "/sys/fs/cgroup");
    assert_string_equal(root, "/");
}

static void parse_mount_hybrid(void **state)
{
    char mnt[256], root[256];
    (void)state;
    assert_int_equal(agent_cgroup_parse_mount(mi_hybrid, mnt, sizeof(mnt), root, sizeof(root)), 0);
    assert_string_equal(mnt, "/sys/fs/cgroup/unified");
}

static void parse_mount_none(void **state)
{
    char mnt[256], root[256];
    (void)state;
    assert_int_equal(agent_cgroup_parse_mount(mi_v1, mnt, sizeof(mnt), root, sizeof(root)),
                     -ENOENT);
    assert_int_equal(agent_cgroup_parse_mount("", mnt, sizeof(mnt), root, sizeof(root)), -ENOENT);
    assert_int_equal(agent_cgroup_parse_mount("garbage without fields - cgroup2\n", mnt,
                                              sizeof(mnt), root, sizeof(root)),
                     -ENOENT);
}

static void parse_mount_escaped_subtree(void **state)
{
    char mnt[256], root[256], small[8];
    (void)state;
    assert_int_equal(agent_cgroup_parse_mount(mi_sub, mnt, sizeof(mnt), root, sizeof(root)), 0);
    assert_string_equal(mnt, "/mnt/my cg");
    assert_string_equal(root, "/kubepods/pod1");
    assert_int_equal(agent_cgroup_parse_mount(mi_sub, small, sizeof(small), root, sizeof(root)),
                     -ENAMETOOLONG);
}

static void parse_self(void **state)
{
    char path[256];
    (void)state;
    assert_int_equal(agent_cgroup_parse_self("0::/user.slice/user-0.slice/session-3.scope\n", path,
                                             sizeof(path)),
                     0);
    assert_string_equal(path, "/user.slice/user-0.slice/session-3.scope");
    /* hybrid: v1 lines first; the v2 line may come last and lack a newline */
    assert_int_equal(agent_cgroup_parse_self("9:name=systemd:/\n4:memory:/x/y\n1:cpu:/\n0::/", path,
                                             sizeof(path)),
                     0);
    assert_string_equal(path, "/");
    assert_int_equal(agent_cgroup_parse_self("4:memory:/x\n1:cpu:/\n", path, sizeof(path)),
                     -ENOENT);
    assert_int_equal(agent_cgroup_parse_self("0::/abcdefghijklmnop\n", path, 8), -ENAMETOOLONG);
}

static void join_path(void **state)
{
    char out[256];
    (void)state;
    assert_int_equal(
        agent_cgroup_join_path("/sys/fs/cgroup", "/", "/system.slice/x.service", out, sizeof(out)),
        0);
    assert_string_equal(out, "/sys/fs/cgroup/system.slice/x.service");
    assert_int_equal(agent_cgroup_join_path("/sys/fs/cgroup/unified", "/", "/", out, sizeof(out)),
                     0);
    assert_string_equal(out, "/sys/fs/cgroup/unified");
    /* a subtree mount: our path is shown relative to its root */
    assert_int_equal(
        agent_cgroup_join_path("/mnt/cg", "/kubepods/pod1", "/kubepods/pod1/c1", out, sizeof(out)),
        0);
    assert_string_equal(out, "/mnt/cg/c1");
    assert_int_equal(
        agent_cgroup_join_path("/mnt/cg", "/kubepods/pod1", "/kubepods/pod1", out, sizeof(out)), 0);
    assert_string_equal(out, "/mnt/cg");
    /* outside that subtree, or a mere name prefix of it: not reachable through this mount */
    assert_int_equal(
        agent_cgroup_join_path("/mnt/cg", "/kubepods/pod1", "/kubepods/pod12", out, sizeof(out)),
        -ENOENT);
    assert_int_equal(
        agent_cgroup_join_path("/mnt/cg", "/kubepods/pod1", "/system.slice", out, sizeof(out)),
        -ENOENT);
    assert_int_equal(agent_cgroup_join_path("/sys/fs/cgroup", "/", "/a", out, 8), -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_mount_unified), cmocka_unit_test(parse_mount_hybrid),
        cmocka_unit_test(parse_mount_none),    cmocka_unit_test(parse_mount_escaped_subtree),
        cmocka_unit_test(parse_self),          cmocka_unit_test(join_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
