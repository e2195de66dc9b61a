/* cgroup v2 primitives for killing whole process trees: where this process's cgroup lies,
 * and the few file operations on one cgroup directory (make, kill, wait until empty, remove).
 *
 * Why cgroups: a worker's descendants that call setsid() or double-fork leave its process
 * group and its parentage, so kill(-pgid) misses them; a cgroup keeps every descendant, and
 * cgroup.kill (Linux >= 5.14) SIGKILLs all of them at once, including ones forking meanwhile.
 * The policy (which cgroups, when, the fallback) is proctree.c's; nothing here keeps state. */
#ifndef MUSTER_AGENT_CGROUP_H
#define MUSTER_AGENT_CGROUP_H

#include <stddef.h>

/* From the text of /proc/self/mountinfo, the first cgroup2 mount: its mount point and the
 * hierarchy path mounted there ("/" unless a bind mount or cgroup namespace shows a subtree).
 * Octal escapes (\040) are decoded. Returns 0, -ENOENT (no cgroup2 mount) or -ENAMETOOLONG. */
int agent_cgroup_parse_mount(const char *mountinfo, char *mnt, size_t mnt_len, char *root,
                             size_t root_len);

/* From the text of /proc/self/cgroup, the cgroup v2 path (the "0::" line). Returns 0, -ENOENT
 * (no v2 line: a v1-only node) or -ENAMETOOLONG. */
int agent_cgroup_parse_self(const char *proc_cgroup, char *path, size_t len);

/* The directory of the cgroup at hierarchy path `path` under a mount of hierarchy path `root`
 * at `mnt`. Returns 0, -ENOENT (path is not below root: not visible through that mount) or
 * -ENAMETOOLONG. */
int agent_cgroup_join_path(const char *mnt, const char *root, const char *path, char *out,
                           size_t len);

/* The directory of this process's own cgroup v2, from /proc/self/{mountinfo,cgroup}.
 * Returns 0 or a negative errno (-ENOENT: no cgroup2 mounted or not visible). */
int agent_cgroup_self_dir(char *out, size_t len);

/* Writes "1" to dir/cgroup.kill: SIGKILL to every process in dir and its descendants.
 * Returns 0 or a negative errno (-ENOENT: the kernel has no cgroup.kill, or no such cgroup). */
int agent_cgroup_kill(const char *dir);

/* Waits up to timeout_ms until dir/cgroup.events says "populated 0" (zombies do not count).
 * Returns 0, -ETIMEDOUT or a negative errno. Blocks: callers keep timeout_ms short. */
int agent_cgroup_wait_empty(const char *dir, unsigned timeout_ms);

/* Removes dir's child cgroups (one level) and then dir. Returns 0 or the first negative errno
 * (-EBUSY while a process is left in one); -ENOENT counts as done. */
int agent_cgroup_remove(const char *dir);

#endif
