/* Removing files and directory trees in directories that other local users share.
 *
 * muster often runs as root and removes checkpoints (--keep-checkpoints) and the leftovers of
 * dead agents (.muster-replica-*) in a --checkpoint-dir that may be a sticky, world-writable
 * directory. A path-based walk (nftw + remove) resolves every path again from the top, so
 * another user who swaps a directory for a symlink between the walk's stat and its remove makes
 * root remove files anywhere on the node (it did: a root-owned file outside the directory). The
 * rules here (after systemd's rm_rf_children and coreutils' remove.c with FTS_PHYSICAL):
 *
 *   - Everything is relative to directory descriptors: fstatat(AT_SYMLINK_NOFOLLOW) to look,
 *     unlinkat to remove, openat(O_NOFOLLOW | O_DIRECTORY) to descend; a directory opened is
 *     checked to be the one looked at (st_dev, st_ino), so a swap in between is noticed and
 *     left alone. A symlink is removed itself, never followed.
 *   - Only what the effective user owns is removed. An entry of another user is left in place,
 *     with every directory above it (they cannot be emptied), and reported; the rest of the tree
 *     is still removed (like rm -rf going on past what it cannot remove).
 *   - Nothing on another file system is entered or removed (st_dev differs: a mount point).
 *   - The walk keeps an explicit stack of open directories, at most MC_RM_MAX_DEPTH deep (one
 *     descriptor each), so a deep tree can neither overflow the C stack nor use up descriptors;
 *     what lies deeper is left and reported.
 *
 * In a directory that others may write without the sticky bit, a swap between the check and the
 * unlink can still make it remove another user's name (unlink never follows, so never what a
 * link points to); muster refuses such directories anyway (safefile.h). */
#ifndef MUSTER_COMMON_SAFERM_H
#define MUSTER_COMMON_SAFERM_H

#include <stddef.h>

/* mc_rm_at flags */
#define MC_RM_CHILDREN 1u /* empty the directory name, but keep it (-ENOTDIR if it is none) */

/* Directories deeper than this below the entry removed are left in place (-ELOOP). */
#define MC_RM_MAX_DEPTH 256

/* Removes name (one path component, no '/') from the directory dfd (borrowed): a file, a
 * symlink itself, or a directory and everything below it, by the rules above; flags MC_RM_*.
 * Returns 0 when it is all gone; -ENOENT when name is not there; -EINVAL for an invalid name;
 * else the error of the first entry left in place: -EPERM (owned by another user), -EXDEV
 * (another file system), -ELOOP (too deep), -ESTALE (replaced while it was being removed) or
 * what a system call returned. Then why (whylen bytes, may be NULL) gets one line naming that
 * entry by its path below dfd and the reason, e.g. "ckpt_5/a: owned by uid 65534, not by you
 * (uid 0)", followed by " (3 more entries left)" when there are others. Names appear as found
 * on disk: escape them before showing them (escape.h). */
int mc_rm_at(int dfd, const char *name, unsigned flags, char *why, size_t whylen);

/* Opens the directory that holds path's last component, for mc_rm_at: *dfd gets an
 * O_DIRECTORY | O_CLOEXEC descriptor the caller closes, name (namelen bytes, NAME_MAX + 1 is
 * enough) the last component, trailing slashes dropped. The directory part is followed as given
 * (it must be one muster validated, e.g. --checkpoint-dir through mc_dir_open); the last
 * component is never touched here. Returns 0, -EINVAL for an empty path, "/" or a last
 * component "." or "..", -ENAMETOOLONG, or what open returned. */
int mc_rm_parent_open(const char *path, int *dfd, char *name, size_t namelen);

#endif
