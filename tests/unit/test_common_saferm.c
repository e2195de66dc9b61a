/* common/saferm.c: removal that never follows a link, never leaves the file system, removes
 * only the effective user's entries and walks deep trees without recursion. A swap of a
 * directory between the look and the descent is made deterministic by wrapping openat
 * (-Wl,--wrap=openat: saferm.c's calls come here first). Parts that need another owner (chown)
 * or a mount run only as root and are skipped otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "saferm.h"

/* paths here are short fixture paths; a truncation would fail the comparison anyway */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define OTHER_UID 65534 /* nobody */

struct fx {
    char tmp[PATH_MAX];     /* the fixture's own directory (0700, ours) */
    char work[PATH_MAX];    /* tmp/work: where entries are removed from */
    char victim[PATH_MAX];  /* tmp/victim: a file that must never change */
    char vdir[PATH_MAX];    /* tmp/vdir: a directory whose file must stay */
    char mounted[PATH_MAX]; /* a tmpfs mounted by the test, unmounted in teardown */
    int fd;                 /* of work */
};

/* --- openat wrapped: the swap between fstatat and the descent --------------------------- */

int __real_openat(int dfd, const char *path, int flags, ...);
int __wrap_openat(int dfd, const char *path, int flags, ...);

static struct {
    char name[NAME_MAX + 1]; /* when saferm opens a directory of this name, first ... */
    char real[PATH_MAX];     /* ... this path is renamed to ... */
    char aside[PATH_MAX];    /* ... this one, and ... */
    char link_to[PATH_MAX];  /* ... a symlink to this is put at real, or ... */
    char move_in[PATH_MAX];  /* ... (link_to "") this directory is renamed to real */
    int armed, done;
} swap;

int __wrap_openat(int dfd, const char *path, int flags, ...)
{
    mode_t mode = 0;
    va_list ap;

    va_start(ap, flags);
    if (flags & O_CREAT)
        mode = (mode_t)va_arg(ap, int);
    va_end(ap);
    if (swap.armed && (flags & O_DIRECTORY) && strcmp(path, swap.name) == 0) {
        swap.armed = 0;
        swap.done = rename(swap.real, swap.aside) == 0 &&
                    (swap.link_to[0] != '\0' ? symlink(swap.link_to, swap.real) == 0
                                             : rename(swap.move_in, swap.real) == 0);
    }
    return __real_openat(dfd, path, flags, mode);
}

/* --- fixture ------------------------------------------------------------------------------ */

static void pathf(char *out, const struct fx *fx, const char *rel)
{
    snprintf(out, PATH_MAX, "%s/%s", fx->work, rel);
}

static void put(const struct fx *fx, const char *rel, const char *text)
{
    char p[PATH_MAX];

    pathf(p, fx, rel);
    harness_write_file(p, text);
}

static void mkd(const struct fx *fx, const char *rel)
{
    char p[PATH_MAX];

    pathf(p, fx, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static int exists(const struct fx *fx, const char *rel)
{
    struct stat st;
    char p[PATH_MAX];

    pathf(p, fx, rel);
    return lstat(p, &st) == 0;
}

static void victims_intact(const struct fx *fx)
{
    char buf[64], p[PATH_MAX];

    assert_int_equal(harness_read_file(fx->victim, buf, sizeof(buf)), 9);
    assert_string_equal(buf, "precious\n");
    snprintf(p, sizeof(p), "%s/keep", fx->vdir);
    assert_int_equal(harness_read_file(p, buf, sizeof(buf)), 5);
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    char p[PATH_MAX];

    if (fx == NULL)
        return -1;
    harness_mkdtemp(fx->tmp, sizeof(fx->tmp), "saferm");
    snprintf(fx->work, sizeof(fx->work), "%s/work", fx->tmp);
    snprintf(fx->victim, sizeof(fx->victim), "%s/victim", fx->tmp);
    snprintf(fx->vdir, sizeof(fx->vdir), "%s/vdir", fx->tmp);
    assert_int_equal(mkdir(fx->work, 0755), 0);
    assert_int_equal(mkdir(fx->vdir, 0755), 0);
    harness_write_file(fx->victim, "precious\n");
    snprintf(p, sizeof(p), "%s/keep", fx->vdir);
    harness_write_file(p, "keep\n");
    fx->fd = open(fx->work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fx->fd >= 0);
    memset(&swap, 0, sizeof(swap));
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;

    if (fx->mounted[0] != '\0')
        umount2(fx->mounted, MNT_DETACH);
    close(fx->fd);
    harness_rmtree(fx->tmp);
    free(fx);
    return 0;
}

/* --- cases -------------------------------------------------------------------------------- */

/* A file, an empty directory, a tree with files, subdirectories and links: all gone. */
static void test_remove(void **state)
{
    struct fx *fx = *state;
    char why[256];

    put(fx, "file", "x");
    mkd(fx, "empty");
    mkd(fx, "tree");
    mkd(fx, "tree/a");
    mkd(fx, "tree/a/b");
    put(fx, "tree/f", "1");
    put(fx, "tree/a/b/g", "2");
    assert_int_equal(mc_rm_at(fx->fd, "file", 0, why, sizeof(why)), 0);
    assert_int_equal(mc_rm_at(fx->fd, "empty", 0, why, sizeof(why)), 0);
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, NULL, 0), 0);
    assert_false(exists(fx, "file") || exists(fx, "empty") || exists(fx, "tree"));
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, why, sizeof(why)), -ENOENT);
    assert_string_equal(why, "tree: No such file or directory");
    assert_int_equal(mc_rm_at(fx->fd, "a/b", 0, why, sizeof(why)), -EINVAL);
    assert_int_equal(mc_rm_at(fx->fd, "..", 0, why, sizeof(why)), -EINVAL);
    assert_int_equal(mc_rm_at(fx->fd, "", 0, why, sizeof(why)), -EINVAL);
}

/* MC_RM_CHILDREN empties a directory and keeps it; a file is not a directory to empty. */
static void test_children(void **state)
{
    struct fx *fx = *state;

    mkd(fx, "d");
    mkd(fx, "d/sub");
    put(fx, "d/sub/f", "1");
    put(fx, "d/g", "2");
    put(fx, "file", "x");
    assert_int_equal(mc_rm_at(fx->fd, "d", MC_RM_CHILDREN, NULL, 0), 0);
    assert_true(exists(fx, "d"));
    assert_false(exists(fx, "d/sub") || exists(fx, "d/g"));
    assert_int_equal(mc_rm_at(fx->fd, "file", MC_RM_CHILDREN, NULL, 0), -ENOTDIR);
    assert_true(exists(fx, "file"));
}

/* A symlink to a file outside, at the top and inside a tree: the link goes, the file stays. */
static void test_link_to_file(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX];

    pathf(p, fx, "link");
    assert_int_equal(symlink(fx->victim, p), 0);
    mkd(fx, "tree");
    pathf(p, fx, "tree/ckpt.pt");
    assert_int_equal(symlink(fx->victim, p), 0);
    assert_int_equal(mc_rm_at(fx->fd, "link", 0, NULL, 0), 0);
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, NULL, 0), 0);
    assert_false(exists(fx, "link") || exists(fx, "tree"));
    victims_intact(fx);
}

/* A symlink to a directory outside, at the top, inside a tree and with a trailing slash
 * through mc_rm_parent_open: never entered, only the link goes. */
static void test_link_to_dir(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX], name[NAME_MAX + 1];
    int dfd;

    pathf(p, fx, "link");
    assert_int_equal(symlink(fx->vdir, p), 0);
    mkd(fx, "tree");
    mkd(fx, "tree/a");
    pathf(p, fx, "tree/a/sub");
    assert_int_equal(symlink(fx->vdir, p), 0);
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, NULL, 0), 0);
    pathf(p, fx, "link/");
    assert_int_equal(mc_rm_parent_open(p, &dfd, name, sizeof(name)), 0);
    assert_string_equal(name, "link");
    assert_int_equal(mc_rm_at(dfd, name, 0, NULL, 0), 0);
    close(dfd);
    assert_false(exists(fx, "link") || exists(fx, "tree"));
    victims_intact(fx);
}

/* A directory of the tree is swapped for a symlink to a directory outside after saferm looked
 * at it and before it descends: O_NOFOLLOW refuses the link, which stays, and so does what it
 * points to. The directory moved aside (a name saferm never listed) is untouched. */
static void test_swapped_for_link(void **state)
{
    struct fx *fx = *state;
    char why[256];

    mkd(fx, "tree");
    mkd(fx, "tree/sub");
    put(fx, "tree/sub/f", "1");
    put(fx, "tree/g", "2");
    snprintf(swap.name, sizeof(swap.name), "sub");
    pathf(swap.real, fx, "tree/sub");
    snprintf(swap.aside, sizeof(swap.aside), "%s/aside", fx->tmp);
    snprintf(swap.link_to, sizeof(swap.link_to), "%s", fx->vdir);
    swap.armed = 1;
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, why, sizeof(why)), -ESTALE);
    assert_true(swap.done);
    assert_string_equal(why, "tree/sub: replaced while it was removed");
    assert_true(exists(fx, "tree/sub")); /* the link, left in place with its directory */
    assert_false(exists(fx, "tree/g"));
    victims_intact(fx);
    assert_int_equal(access(swap.aside, F_OK), 0);
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, NULL, 0), 0); /* now just a link in it */
    victims_intact(fx);
}

/* ... swapped for another directory instead (renamed in): the identity check notices it. */
static void test_swapped_for_dir(void **state)
{
    struct fx *fx = *state;
    char other[PATH_MAX], p[PATH_MAX];

    mkd(fx, "tree");
    mkd(fx, "tree/sub");
    snprintf(other, sizeof(other), "%s/other", fx->tmp);
    assert_int_equal(mkdir(other, 0755), 0);
    snprintf(p, sizeof(p), "%s/keep", other);
    harness_write_file(p, "keep\n");
    snprintf(swap.name, sizeof(swap.name), "sub");
    pathf(swap.real, fx, "tree/sub");
    snprintf(swap.aside, sizeof(swap.aside), "%s/aside", fx->tmp);
    snprintf(swap.move_in, sizeof(swap.move_in), "%s", other);
    swap.armed = 1;
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, NULL, 0), -ESTALE);
    assert_true(swap.done);
    pathf(p, fx, "tree/sub/keep");
    assert_int_equal(access(p, F_OK), 0);
}

/* Entries of another user stay, with the directories above them, and are reported; the rest
 * goes. An entry of another user at the top is not touched at all. */
static void test_other_owner(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX], why[256], want[256];

    if (geteuid() != 0)
        skip(); /* needs chown */
    mkd(fx, "tree");
    mkd(fx, "tree/a");
    put(fx, "tree/a/theirs", "t");
    put(fx, "tree/a/mine", "m");
    put(fx, "tree/mine", "m");
    mkd(fx, "tree/b");
    pathf(p, fx, "tree/b/link");
    assert_int_equal(symlink(fx->victim, p), 0);
    assert_int_equal(lchown(p, OTHER_UID, OTHER_UID), 0);
    pathf(p, fx, "tree/a/theirs");
    assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, why, sizeof(why)), -EPERM);
    /* readdir order decides which of the two is named first */
    snprintf(want, sizeof(want), ": owned by uid %d, not by you (uid 0) (1 more entry left)",
             OTHER_UID);
    assert_non_null(strstr(why, want));
    assert_true(strncmp(why, "tree/a/theirs:", 14) == 0 || strncmp(why, "tree/b/link:", 12) == 0);
    assert_true(exists(fx, "tree/a/theirs") && exists(fx, "tree/b/link"));
    assert_false(exists(fx, "tree/a/mine") || exists(fx, "tree/mine"));
    victims_intact(fx);

    put(fx, "theirs", "t");
    pathf(p, fx, "theirs");
    assert_int_equal(chown(p, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(mc_rm_at(fx->fd, "theirs", 0, why, sizeof(why)), -EPERM);
    snprintf(want, sizeof(want), "theirs: owned by uid %d, not by you (uid 0)", OTHER_UID);
    assert_string_equal(why, want);
    assert_true(exists(fx, "theirs"));
}

/* mkdir depth levels of "d" below work/name, with a file at the bottom. */
static void deep_tree(const struct fx *fx, const char *name, int depth)
{
    int fd = openat(fx->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC), next;

    assert_true(fd >= 0);
    for (int i = 0; i < depth; i++) {
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(next >= 0);
        close(fd);
        fd = next;
    }
    next = openat(fd, "bottom", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(next >= 0);
    close(next);
    close(fd);
}

/* Depth 200 goes in full; deeper than MC_RM_MAX_DEPTH is removed down to there and reported. */
static void test_deep(void **state)
{
    struct fx *fx = *state;
    char why[4096], want[64];

    mkd(fx, "deep");
    deep_tree(fx, "deep", 200);
    assert_int_equal(mc_rm_at(fx->fd, "deep", 0, why, sizeof(why)), 0);
    assert_false(exists(fx, "deep"));
    mkd(fx, "deeper");
    deep_tree(fx, "deeper", MC_RM_MAX_DEPTH + 10);
    assert_int_equal(mc_rm_at(fx->fd, "deeper", 0, why, sizeof(why)), -ELOOP);
    snprintf(want, sizeof(want), "/d: more than %d directories deep", MC_RM_MAX_DEPTH);
    assert_non_null(strstr(why, want));
    assert_true(exists(fx, "deeper"));
}

/* A file system mounted inside the tree is neither entered nor removed (root, in a private
 * mount namespace of this test process; skipped where mounting is not allowed). */
static void test_mount_point(void **state)
{
    struct fx *fx = *state;
    char p[PATH_MAX], why[256];

    if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        skip();
    /* fx->fd was opened in the old namespace: lookups through it would not see the mount */
    close(fx->fd);
    fx->fd = open(fx->work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fx->fd >= 0);
    mkd(fx, "tree");
    mkd(fx, "tree/mnt");
    put(fx, "tree/f", "1");
    pathf(fx->mounted, fx, "tree/mnt");
    if (mount("tmpfs", fx->mounted, "tmpfs", 0, "size=1m") != 0) {
        fx->mounted[0] = '\0';
        skip();
    }
    put(fx, "tree/mnt/other-fs", "o");
    assert_int_equal(mc_rm_at(fx->fd, "tree", 0, why, sizeof(why)), -EXDEV);
    assert_string_equal(why, "tree/mnt: on another file system (a mount point)");
    assert_true(exists(fx, "tree/mnt/other-fs"));
    assert_false(exists(fx, "tree/f"));
    pathf(p, fx, "tree/mnt");
    assert_int_equal(umount2(p, 0), 0);
    fx->mounted[0] = '\0';
}

/* mc_rm_parent_open: the last component is split off, never followed; what cannot name one
 * entry is refused. */
static void test_parent_open(void **state)
{
    struct fx *fx = *state;
    char name[NAME_MAX + 1], p[PATH_MAX];
    struct stat a, b;
    int dfd;

    pathf(p, fx, "x//");
    assert_int_equal(mc_rm_parent_open(p, &dfd, name, sizeof(name)), 0);
    assert_string_equal(name, "x");
    assert_int_equal(fstat(dfd, &a), 0);
    assert_int_equal(fstat(fx->fd, &b), 0);
    assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    close(dfd);
    assert_int_equal(mc_rm_parent_open("x", &dfd, name, sizeof(name)), 0);
    close(dfd);
    assert_int_equal(mc_rm_parent_open("/", &dfd, name, sizeof(name)), -EINVAL);
    assert_int_equal(dfd, -1);
    assert_int_equal(mc_rm_parent_open("", &dfd, name, sizeof(name)), -EINVAL);
    assert_int_equal(mc_rm_parent_open("a/..", &dfd, name, sizeof(name)), -EINVAL);
    assert_int_equal(mc_rm_parent_open("/tmp/x", &dfd, name, 1), -ENAMETOOLONG);
    pathf(p, fx, "missing/x");
    assert_int_equal(mc_rm_parent_open(p, &dfd, name, sizeof(name)), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_children, setup, teardown),
        cmocka_unit_test_setup_teardown(test_link_to_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_link_to_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swapped_for_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_swapped_for_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_owner, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mount_point, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parent_open, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
