/* Directory checkpoints (torch.distributed.checkpoint and the like) as one byte stream for
 * checkpoint replicas (replica.h): the stream the registry's checksum reads (ckpt_hash.h), so
 * the receiver's XXH3 of the stream is the checksum the sender recorded. For each member, in
 * byte order of the relative paths: the path, NUL, the size (8 bytes big-endian), the content.
 *
 * Only regular files are copied: a directory holding a symlink is not replicated (in the
 * stream a link's target would read like a file's content, so the copy would verify and still
 * differ). The receiver trusts nothing in the stream: every path must be relative, without
 * "." / ".." / empty components, no deeper than AGENT_CKPT_MAX_DEPTH, strictly after the one
 * before (sorted, no duplicates), at most AGENT_CKPT_MAX_FILES members; files are created
 * below a fresh temporary directory with O_EXCL|O_NOFOLLOW, so nothing is written outside it. */
#ifndef MUSTER_AGENT_REPLICA_DIR_H
#define MUSTER_AGENT_REPLICA_DIR_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct agent_replica_src_file {
    char *rel;
    uint64_t size;
    uint64_t start; /* stream offset of its header */
    unsigned hdr;   /* header bytes: strlen(rel) + 1 + 8 */
};

struct agent_replica_src { /* the sender's side */
    int dirfd;             /* the checkpoint directory, -1 when closed */
    struct agent_replica_src_file *files;
    size_t n;
    uint64_t total;   /* stream bytes */
    uint64_t content; /* the members' bytes: the registry's size of the checkpoint */
    size_t open_idx;  /* member whose file is open in open_fd */
    int open_fd;
};

/* Lists dir/name (a directory checkpoint) into s. Returns 0, or a negative errno with a one-line
 * reason in why (a symlink inside: -ELOOP; a member that is not a regular file: -EINVAL).
 * Walks and stats every member: replica.c calls it in libuv's pool, not on the loop. */
int agent_replica_src_open(struct agent_replica_src *s, const char *dir, const char *name,
                           char *why, size_t whylen);

/* Copies len stream bytes from offset off into buf. Returns 0, or -ESTALE when a member changed
 * size or vanished meanwhile, or another negative errno. */
int agent_replica_src_read(struct agent_replica_src *s, uint8_t *buf, size_t len, uint64_t off);

/* A copy of src that reads on its own (its descriptors and list): for another thread. Returns 0
 * or a negative errno (dst is then closed). */
int agent_replica_src_clone(struct agent_replica_src *dst, const struct agent_replica_src *src);

/* Releases s; accepts a zeroed or closed one (dirfd must then be -1 or 0 never opened: use
 * agent_replica_src_init first). */
void agent_replica_src_init(struct agent_replica_src *s);
void agent_replica_src_close(struct agent_replica_src *s);

enum { SINK_PATH, SINK_SIZE, SINK_DATA };

struct agent_replica_sink { /* the receiver's side */
    int dirfd;              /* the temporary directory, -1 when none */
    char tmp[PATH_MAX];     /* its path */
    int state;              /* SINK_* */
    char path[PATH_MAX];    /* the member being read */
    size_t plen;
    uint8_t size[8];
    unsigned slen;
    uint64_t left; /* content bytes of the member still to come */
    int fd;        /* the member being written */
    char prev[PATH_MAX];
    uint64_t files, content;
    mode_t file_mode, dir_mode; /* members and subdirectories are created with these */
};

/* Creates the temporary directory tmp (a template ending in XXXXXX, mkdtemp: 0700); members
 * are created with file_mode, subdirectories with dir_mode (both narrowed by the umask).
 * Returns 0 or a negative errno. Blocking file-system calls, like the rest of the sink: for
 * the writer's thread (replica_store.h), not the loop. */
void agent_replica_sink_init(struct agent_replica_sink *k);
int agent_replica_sink_open(struct agent_replica_sink *k, const char *tmp, mode_t file_mode,
                            mode_t dir_mode);

/* Takes the next n stream bytes. Returns 0, or -EPROTO with why (a bad path, order, size) or
 * another negative errno (writing failed). */
int agent_replica_sink_write(struct agent_replica_sink *k, const uint8_t *p, size_t n, char *why,
                             size_t whylen);

/* The stream is complete: it must end at a member's end; every member is fsynced. Returns 0 or
 * -EPROTO/a negative errno with why. */
int agent_replica_sink_finish(struct agent_replica_sink *k, char *why, size_t whylen);

/* Removes the temporary directory and everything below it; accepts a closed sink. */
void agent_replica_sink_abort(struct agent_replica_sink *k);

#endif
