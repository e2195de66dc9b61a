/* The per-user token: see usertoken.h. */
#include "usertoken.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefile.h"
#include "token.h"

static const char *home_dir(void)
{
    const char *h = getenv("HOME");
    struct passwd *pw;

    if (h != NULL && h[0] == '/')
        return h;
    pw = getpwuid(geteuid());
    return pw != NULL && pw->pw_dir != NULL && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
}

/* A new random token under a unique temporary name, then link()ed to the final name: link
 * fails with EEXIST when another node (same home) was first, and never replaces a token. */
static int create(const char *dir, const char *path)
{
    char tmp[PATH_MAX + 64], host[64] = "node", text[64];
    int rc;

    gethostname(host, sizeof(host) - 1);
    if (snprintf(tmp, sizeof(tmp), "%s/.token.%s.%ld", dir, host, (long)getpid()) >=
        (int)sizeof(tmp))
        return -EIO;
    rc = mc_random_hex(text, sizeof(text), 24);
    if (rc == 0)
        rc = mc_secret_write_new(tmp, text);
    explicit_bzero(text, sizeof(text));
    if (rc != 0)
        return rc;
    if (link(tmp, path) != 0)
        rc = -errno;
    unlink(tmp);
    return rc;
}

int launcher_usertoken_get(struct launcher_usertoken *u, char *token, size_t len, char *err,
                           size_t errlen)
{
    const char *home = home_dir();
    char dir[PATH_MAX];
    int rc;

    memset(u, 0, sizeof(*u));
    if (home == NULL) {
        snprintf(err, errlen,
                 "no home directory for the per-user token ~/.muster/token: give "
                 "--token-file FILE or MUSTER_TOKEN");
        return -ENOENT;
    }
    if (snprintf(dir, sizeof(dir), "%s/.muster", home) >= (int)sizeof(dir) ||
        snprintf(u->path, sizeof(u->path), "%s/token", dir) >= (int)sizeof(u->path)) {
        snprintf(err, errlen, "home directory path too long");
        return -ENAMETOOLONG;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        rc = -errno;
        snprintf(err, errlen, "cannot create %s for the per-user token: %s", dir, strerror(errno));
        return rc;
    }
    rc = create(dir, u->path);
    if (rc == 0)
        u->created = 1;
    else if (rc != -EEXIST) {
        snprintf(err, errlen, "cannot write the per-user token %s: %s", u->path, strerror(-rc));
        return rc;
    }
    return launcher_read_token_file(u->path, token, len, err, errlen);
}

void launcher_usertoken_hint(const struct launcher_usertoken *u, int hosting, char *buf, size_t len)
{
    if (hosting)
        snprintf(buf, len,
                 "the nodes' tokens differ (this node uses %s): share the home "
                 "directory, or give every node --token-file FILE or MUSTER_TOKEN; the refused "
                 "node has stopped, this one waits for nodes until the join timeout "
                 "(--rdzv-conf join_timeout; Ctrl-C stops it)",
                 u->path);
    else
        snprintf(buf, len,
                 "the nodes' tokens differ: this node uses %s%s; give every node the same token "
                 "(home directories shared by all nodes, --token-file FILE, or MUSTER_TOKEN)",
                 u->path,
                 u->created ? ", which it created just now, so its home directory is not "
                              "shared with the node that hosts the rendezvous"
                            : "");
}
