/* Files and directories that muster creates on the node, safe against other local users.
 *
 * muster often runs as root, and --log-dir, --checkpoint-dir and $TMPDIR may be shared
 * directories. Another user could plant a symlink or a directory where muster is about to write
 * and make it overwrite any file on the node. The rules (OpenSSH StrictModes, with /tmp's sticky
 * exception):
 *
 *   - Every directory from / down to a directory muster writes into, and every directory muster
 *     creates, must be owned by the effective user or by root, and must not be writable by group
 *     or others unless it has the sticky bit (like /tmp: others cannot remove or rename what is
 *     ours there). Workers get paths, not file descriptors, so the whole chain matters: a
 *     writable parent would let someone swap a directory for a symlink behind the workers' backs.
 *   - Directories are walked with O_NOFOLLOW from a realpath() of what exists of the given path
 *     (symlinks the operator typed, like /scratch -> /lustre/scratch, are resolved once and the
 *     result is checked); what is missing is created with mkdirat and checked the same way.
 *   - Files are opened with openat(O_NOFOLLOW) relative to their directory: a symlink, a FIFO, a
 *     device, a file of someone else or a hard link (nlink > 1) at the name is removed and a new
 *     file created with O_EXCL; a regular file of ours is reused (re-runs with the same
 *     --log-dir).
 *   - Files that are replaced as a whole go through a temporary name with a random suffix
 *     (O_EXCL), fsync, renameat over the name (which replaces a link, never follows it).
 *
 * Error lines look like "refusing --log-dir /x: owned by uid 1000, not by you (uid 0)" or
 * "refusing --log-dir /x/y: /x is writable by others (mode 0777)". */
#ifndef MUSTER_COMMON_SAFEFILE_H
#define MUSTER_COMMON_SAFEFILE_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* mc_file_open flags */
#define MC_FILE_TRUNC 1u  /* an existing file of ours is truncated */
#define MC_FILE_APPEND 2u /* O_APPEND */
#define MC_FILE_EXCL 4u   /* the name must not exist at all (-EEXIST) */

#include "tmpdir.h" /* mc_tmpdir(): $TMPDIR is where temporary directories are checked */

/* Whether the directory described by st may hold muster's files (see above). Returns 0 or -EPERM
 * with why, e.g. "owned by uid 1000, not by you (uid 0)", "writable by others (mode 0777)",
 * "writable by group (mode 0775)", "not a directory". why may be NULL. */
int mc_dir_trusted(const struct stat *st, char *why, size_t whylen);

/* Opens the directory path for writing into, creating what is missing (each new directory with
 * create_mode exactly, umask notwithstanding; create_mode 0: create nothing, -ENOENT), and checks
 * every directory from / down to it. what names it in the error line ("--log-dir"). On success
 * *dfd is an O_DIRECTORY|O_CLOEXEC descriptor the caller closes (dfd may be NULL: closed here),
 * and resolved (PATH_MAX bytes, may be NULL) the absolute path without symlinks, which is the one
 * to hand on. Returns 0, or a negative errno with one line in err: -EPERM (untrusted), -ELOOP
 * (a symlink appeared during the walk), -EINVAL (".." after a missing directory), -ENAMETOOLONG,
 * or what mkdir/open returned. */
int mc_dir_open(const char *path, mode_t create_mode, const char *what, int *dfd, char *resolved,
                char *err, size_t errlen);

/* Opens name (one path component) in the directory dfd for writing, as described above; flags
 * MC_FILE_*. mode is the new file's mode (exactly, umask notwithstanding). The directory must be
 * one mc_dir_open accepted. *fd gets an O_WRONLY|O_CLOEXEC descriptor of a regular file owned by
 * the effective user. Returns 0 or a negative errno (-EEXIST with MC_FILE_EXCL, -EISDIR for a
 * directory at the name, -EINVAL for a name with '/'). */
int mc_file_openat(int dfd, const char *name, unsigned flags, mode_t mode, int *fd);

/* mc_file_openat for a path: its directory is opened with O_DIRECTORY (not re-checked: it must
 * be one mc_dir_open accepted, or below one). */
int mc_file_open(const char *path, unsigned flags, mode_t mode, int *fd);

/* Replaces name in dfd with len bytes of data, atomically and durably: a temporary
 * ".NAME.XXXXXXXXXXXX" created with O_EXCL|O_NOFOLLOW, written, fsync'd, renamed over name, then
 * the directory fsync'd; a crash leaves the old file or the new one. mode as above. Returns 0 or
 * a negative errno (the temporary file is removed). */
int mc_file_replace_at(int dfd, const char *name, const void *data, size_t len, mode_t mode);

/* mc_file_replace_at for a path (its directory as for mc_file_open). */
int mc_file_replace(const char *path, const void *data, size_t len, mode_t mode);

/* The one writer of secrets (tokens, credentials): creates path, which must not exist
 * (O_EXCL|O_NOFOLLOW: never through a planted link), mode 0600 exactly, writes text and a
 * newline, fsyncs. Returns 0, what open returned (-EEXIST...), or -EIO when writing failed
 * (the file is then removed). */
int mc_secret_write_new(const char *path, const char *text);

/* A random token: nbytes from getentropy as 2 * nbytes lowercase hex digits in out (len bytes,
 * at least 2 * nbytes + 1). Returns 0 or -EIO. */
int mc_random_hex(char *out, size_t len, size_t nbytes);

#endif
