/* The per-user token: with no --token-file, no MUSTER_TOKEN and no certificates, a multi-node
 * job (and `muster status`) uses ~/.muster/token, made on first use with mode 0600 in a 0700
 * directory, like an ssh key or a munge key. On a cluster whose home directories are shared,
 * every node of a user then agrees on it with no flag at all (torchrun's recipes run as
 * written); where homes are not shared, the nodes' tokens differ and the rendezvous says so. */
#ifndef MUSTER_LAUNCHER_USERTOKEN_H
#define MUSTER_LAUNCHER_USERTOKEN_H

#include <limits.h>
#include <stddef.h>

struct launcher_usertoken {
    char path[PATH_MAX]; /* $HOME/.muster/token */
    int created;         /* this call made it (so no other node had made it in this home) */
};

/* Reads the per-user token into token (len bytes; give LAUNCHER_TOKEN_FILE_MAX + 1), creating
 * it when missing: written under a temporary name and linked into place, so that nodes sharing
 * the home and starting at once all end up with the one that was linked first. The file and its
 * directories must pass launcher_read_token_file()'s checks. Returns 0, or a negative errno with
 * a one-line reason in err (-ENOENT: no home directory). */
int launcher_usertoken_get(struct launcher_usertoken *u, char *token, size_t len, char *err,
                           size_t errlen);

/* One line for a node whose token the rendezvous refused (hosting 0), or for the log of the
 * node hosting the rendezvous when it refused a node's (hosting 1), naming the fix; a refused
 * node that made its token just now says that its home directory is not shared. */
void launcher_usertoken_hint(const struct launcher_usertoken *u, int hosting, char *buf,
                             size_t len);

#endif
