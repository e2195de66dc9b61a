/* The checkpoint registry: the checkpoints rank 0 wrote into MUSTER_CHECKPOINT_DIR, with their
 * checksums, so that a restart resumes from the newest one that is still intact and
 * --keep-checkpoints prunes only behind a good one (docs/ARCHITECTURE.md "Checkpoints").
 *
 * No libuv and no threads. The registry itself (add, remove, order) is cheap and the watcher
 * keeps it on its loop; what touches the disk (_verify, _pick, _prune, _save, _load of a big
 * file, agent_ckpt_remove_path) blocks, and the watcher runs it in libuv's pool (ckptwatch.h).
 * Entries come from agent_ckpt_scan_entry or the incremental hash (ckpt_hash.h). */
#ifndef MUSTER_AGENT_CKPT_H
#define MUSTER_AGENT_CKPT_H

#include <stddef.h>

#include "ckpt_hash.h"
#include "log.h"

/* The registry file format written by agent_ckpt_registry_save. */
#define AGENT_CKPT_REGISTRY_VERSION 1
/* A registry file larger than this is refused before it is parsed. */
#define AGENT_CKPT_REGISTRY_MAX_ENTRIES 100000

/* Entries newest first: by step (entries without one after all with one), then by record time;
 * on a tie the one added last comes first. */
struct agent_ckpt_registry {
    struct agent_ckpt_entry *entries;
    size_t n, cap;
};

/* One line without a newline, e.g. "checkpoint ckpt_120.pt skipped: missing", with its level
 * (common/log.h). */
typedef void (*agent_ckpt_log_cb)(void *arg, enum mc_log_level level, const char *line);

/* An empty registry. */
void agent_ckpt_registry_init(struct agent_ckpt_registry *reg);

/* Frees the entries; accepts NULL and an initialised or already closed registry (it is left
 * empty and usable). */
void agent_ckpt_registry_close(struct agent_ckpt_registry *reg);

/* Records a copy of entry in order. An entry with the same name is replaced (a writer that
 * reuses a name such as "latest.pt" wrote a new checkpoint). Returns 0, -EINVAL for an invalid
 * name (agent_ckpt_name_valid), -ENOMEM. */
int agent_ckpt_registry_add(struct agent_ckpt_registry *reg, const struct agent_ckpt_entry *entry);

/* The entry called name, or NULL. Valid until reg changes. */
const struct agent_ckpt_entry *agent_ckpt_registry_find(const struct agent_ckpt_registry *reg,
                                                        const char *name);

/* Forgets the entry called name (the files stay). Returns 0 or -ENOENT. */
int agent_ckpt_registry_remove(struct agent_ckpt_registry *reg, const char *name);

/* Checks one entry against dir: exists, same size, same checksum. Returns 0 when it verifies,
 * else a negative errno with a one-line reason in why ("missing", "size 1024 != recorded 4096
 * (truncated?)", "checksum ... != recorded ... (altered?)"). */
int agent_ckpt_entry_verify(const struct agent_ckpt_entry *e, const char *dir, char *why,
                            size_t whylen);

/* The newest entry that still verifies in dir, copied to chosen. Each newer entry that does not
 * is skipped with one line to log ("checkpoint NAME skipped: REASON") and stays registered.
 * log may be NULL. Returns 0, or -ENOENT when none verifies (a fresh start). */
int agent_ckpt_registry_pick(const struct agent_ckpt_registry *reg, const char *dir,
                             struct agent_ckpt_entry *chosen, agent_ckpt_log_cb log, void *log_arg);

/* --keep-checkpoints N: deletes, from disk and from the registry, the entries beyond the newest
 * keep (0 is taken as 1) that are also older than the newest entry verifying now (found as
 * _pick does, with its log lines). Nothing is deleted when none verifies, and the newest
 * verified entry never is, so a corrupt newer one cannot cost the last good checkpoint.
 * Directories are removed recursively without following symlinks. A deletion that fails is
 * logged and its entry kept. Returns the number of entries removed (≥ 0). */
/* Removes path: a file, or a directory and everything below it, through common/saferm.h
 * (relative to directory descriptors; symlinks are removed, not followed; nothing on another
 * file system). Only entries of the effective user are removed: another user's stay and the
 * first is logged as a warning. Returns 0 or a negative errno (-ENOENT when path is not there,
 * -EPERM when another user's entry stays). Prune uses it, and checkpoint replicas for their
 * temporary files and directories. */
int agent_ckpt_remove_path(const char *path);

int agent_ckpt_registry_prune(struct agent_ckpt_registry *reg, const char *dir, unsigned keep,
                              agent_ckpt_log_cb log, void *log_arg);

/* Writes the registry to path as JSON, atomically (.registry.json.RANDOM, fsync, rename, fsync of
 * the directory), so that a crash leaves the old file or the new one, newest first:
 * {"version":1,"entries":[{"name":"ckpt_5.pt","step":5,"size":4096,
 *   "checksum":"0123456789abcdef","mtime_ns":...,"recorded_ns":...}, ...]}
 * The checksum is a hex string because JSON integers are signed 64-bit in jansson.
 * Returns 0 or a negative errno. */
int agent_ckpt_registry_save(const struct agent_ckpt_registry *reg, const char *path);

/* Replaces reg's entries with those in path (written by _save); reg must be initialised and is
 * left unchanged on error. Returns 0, -ENOENT when there is no file (nothing remembered),
 * -EINVAL when it is not a registry of this version or an entry is invalid, -ENOMEM, or
 * another negative errno. */
int agent_ckpt_registry_load(struct agent_ckpt_registry *reg, const char *path);

#endif
