#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "safefile.h"
#include "saferm.h"

/* A registry file bigger than this is not one we wrote; refuse before parsing it. */
#define REGISTRY_FILE_MAX (64u << 20)

void agent_ckpt_registry_init(struct agent_ckpt_registry *reg)
{
    memset(reg, 0, sizeof(*reg));
}

void agent_ckpt_registry_close(struct agent_ckpt_registry *reg)
{
    if (reg == NULL)
        return;
    free(reg->entries);
    memset(reg, 0, sizeof(*reg));
}

/* Whether a is newer than b. Entries without a step (-1) sort after every entry with one. */
static int newer(const struct agent_ckpt_entry *a, const struct agent_ckpt_entry *b)
{
    if (a->step != b->step)
        return a->step > b->step;
    return a->recorded_ns > b->recorded_ns;
}

static void remove_at(struct agent_ckpt_registry *reg, size_t i)
{
    memmove(&reg->entries[i], &reg->entries[i + 1], (reg->n - i - 1) * sizeof(*reg->entries));
    reg->n--;
}

const struct agent_ckpt_entry *agent_ckpt_registry_find(const struct agent_ckpt_registry *reg,
                                                        const char *name)
{
    for (size_t i = 0; i < reg->n; i++)
        if (strcmp(reg->entries[i].name, name) == 0)
            return &reg->entries[i];
    return NULL;
}

int agent_ckpt_registry_remove(struct agent_ckpt_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n; i++) {
        if (strcmp(reg->entries[i].name, name) == 0) {
            remove_at(reg, i);
            return 0;
        }
    }
    return -ENOENT;
}

int agent_ckpt_registry_add(struct agent_ckpt_registry *reg, const struct agent_ckpt_entry *entry)
{
    size_t i = 0;

    if (!agent_ckpt_name_valid(entry->name))
        return -EINVAL;
    agent_ckpt_registry_remove(reg, entry->name);
    if (reg->n == reg->cap) {
        size_t cap = reg->cap ? reg->cap * 2 : 8;
        struct agent_ckpt_entry *v = realloc(reg->entries, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        reg->entries = v;
        reg->cap = cap;
    }
    /* Before the first entry that is not newer: on a tie the later record wins. */
    while (i < reg->n && newer(&reg->entries[i], entry))
        i++;
    memmove(&reg->entries[i + 1], &reg->entries[i], (reg->n - i) * sizeof(*reg->entries));
    reg->entries[i] = *entry;
    reg->n++;
    return 0;
}

static void logf_line(agent_ckpt_log_cb log, void *arg, enum mc_log_level level, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));

static void logf_line(agent_ckpt_log_cb log, void *arg, enum mc_log_level level, const char *fmt,
                      ...)
{
    char line[AGENT_CKPT_NAME_MAX + 256];
    va_list ap;

    if (log == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    log(arg, level, line);
}

static int size_mismatch(const struct agent_ckpt_entry *e, uint64_t now, char *why, size_t len)
{
    snprintf(why, len, "size %" PRIu64 " != recorded %" PRIu64 " (%s)", now, e->size,
             now < e->size ? "truncated?" : "grown: altered?");
    return -EIO;
}

int agent_ckpt_entry_verify(const struct agent_ckpt_entry *e, const char *dir, char *why,
                            size_t whylen)
{
    struct agent_ckpt_hash h;
    struct agent_ckpt_entry now;
    int finished = 0;
    int rc = agent_ckpt_hash_begin(&h, dir, e->name);

    if (rc == 0 && agent_ckpt_hash_listed_size(&h) != e->size) {
        rc = size_mismatch(e, agent_ckpt_hash_listed_size(&h), why, whylen);
        agent_ckpt_hash_close(&h);
        return rc;
    }
    if (rc == 0)
        rc = agent_ckpt_hash_step(&h, 0, &finished);
    if (rc == 0)
        rc = agent_ckpt_hash_end(&h, &now);
    agent_ckpt_hash_close(&h);
    if (rc == -ENOENT)
        snprintf(why, whylen, "missing");
    else if (rc == -EINVAL)
        snprintf(why, whylen, "no longer a regular file or directory");
    else if (rc == -EBUSY)
        snprintf(why, whylen, "changed while it was read (still being written?)");
    else if (rc != 0)
        snprintf(why, whylen, "cannot read it: %s", strerror(-rc));
    if (rc != 0 || now.checksum == e->checksum)
        return rc;
    snprintf(why, whylen, "checksum %016" PRIx64 " != recorded %016" PRIx64 " (altered?)",
             now.checksum, e->checksum);
    return -EIO;
}

/* Index of the newest entry verifying in dir, logging each newer one skipped; -ENOENT if none. */
static int newest_verified(const struct agent_ckpt_registry *reg, const char *dir,
                           agent_ckpt_log_cb log, void *log_arg, size_t *index)
{
    char why[256];

    for (size_t i = 0; i < reg->n; i++) {
        if (reg->entries[i].part != 0) /* one node's part: the server decides (ASSIGN) */
            continue;
        if (agent_ckpt_entry_verify(&reg->entries[i], dir, why, sizeof(why)) == 0) {
            *index = i;
            return 0;
        }
        logf_line(log, log_arg, MC_LOG_INFO, "checkpoint %s skipped: %s", reg->entries[i].name,
                  why);
    }
    return -ENOENT;
}

int agent_ckpt_registry_pick(const struct agent_ckpt_registry *reg, const char *dir,
                             struct agent_ckpt_entry *chosen, agent_ckpt_log_cb log, void *log_arg)
{
    size_t i;
    int rc = newest_verified(reg, dir, log, log_arg, &i);

    if (rc == 0)
        *chosen = reg->entries[i];
    return rc;
}

/* Through common/saferm.h: relative to directory descriptors, never following a link (a
 * shared --checkpoint-dir: another user could swap a directory for a symlink mid-walk, and
 * nftw then removed through it), and only what this agent's user owns. What stays is logged. */
int agent_ckpt_remove_path(const char *path)
{
    char name[NAME_MAX + 1], why[PATH_MAX];
    int dfd = -1, rc = mc_rm_parent_open(path, &dfd, name, sizeof(name));

    if (rc != 0)
        return rc;
    rc = mc_rm_at(dfd, name, 0, why, sizeof(why));
    close(dfd);
    if (rc != 0 && rc != -ENOENT) {
        /* names come from the shared directory: escaped, so they cannot forge a log line */
        mc_log_untrusted(MC_LOG_WARN, "cannot remove all of %s: %s", path, why);
    }
    return rc;
}

static int remove_tree(const char *dir, const char *name)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);

    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    return agent_ckpt_remove_path(path);
}

int agent_ckpt_registry_prune(struct agent_ckpt_registry *reg, const char *dir, unsigned keep,
                              agent_ckpt_log_cb log, void *log_arg)
{
    size_t good, first;
    int removed = 0;

    if (newest_verified(reg, dir, log, log_arg, &good) != 0)
        return 0; /* nothing verified: every entry may be the one a restart still needs */
    first = keep > good + 1 ? keep : good + 1;
    for (size_t i = reg->n; i-- > first;) {
        struct agent_ckpt_entry *e = &reg->entries[i];
        int rc;

        if (e->part != 0) /* parts of sharded checkpoints stay (docs/FAULT_TOLERANCE.md) */
            continue;
        rc = remove_tree(dir, e->name);
        if (rc != 0 && rc != -ENOENT) {
            logf_line(log, log_arg, MC_LOG_INFO, "checkpoint %s not pruned: %s", e->name,
                      strerror(-rc));
            continue;
        }
        logf_line(log, log_arg, MC_LOG_INFO,
                  "checkpoint %s pruned (keeping %u, newest verified %s)", e->name, keep ? keep : 1,
                  reg->entries[good].name);
        remove_at(reg, i);
        removed++;
    }
    return removed;
}

static json_t *entry_to_json(const struct agent_ckpt_entry *e)
{
    char sum[17];

    json_t *o;

    snprintf(sum, sizeof(sum), "%016" PRIx64, e->checksum);
    o = json_pack("{s:s, s:I, s:I, s:s, s:I, s:I}", "name", e->name, "step", (json_int_t)e->step,
                  "size", (json_int_t)e->size, "checksum", sum, "mtime_ns", (json_int_t)e->mtime_ns,
                  "recorded_ns", (json_int_t)e->recorded_ns);
    /* a part's two fields only when it is one: a registry without parts reads as before */
    if (o != NULL && e->part != 0 &&
        (json_object_set_new(o, "part", json_integer(e->part)) != 0 ||
         json_object_set_new(o, "parts", json_integer(e->parts)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *registry_to_json(const struct agent_ckpt_registry *reg)
{
    json_t *root = json_pack("{s:i, s:[]}", "version", AGENT_CKPT_REGISTRY_VERSION, "entries");
    json_t *list = root != NULL ? json_object_get(root, "entries") : NULL;

    for (size_t i = 0; list != NULL && i < reg->n; i++) {
        if (json_array_append_new(list, entry_to_json(&reg->entries[i])) != 0) {
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

/* Through mc_file_replace: a temporary name with a random suffix (O_EXCL), fsync, rename over
 * the registry (a symlink planted there is replaced, never followed), fsync of the directory. */
int agent_ckpt_registry_save(const struct agent_ckpt_registry *reg, const char *path)
{
    json_t *root = registry_to_json(reg);
    char *text = NULL;
    int rc = -ENOMEM;

    if (root == NULL)
        return -ENOMEM;
    text = json_dumps(root, JSON_INDENT(1));
    if (text != NULL) {
        size_t len = strlen(text);
        char *nl = realloc(text, len + 2);
        if (nl != NULL) {
            text = nl;
            memcpy(text + len, "\n", 2);
            rc = mc_file_replace(path, text, len + 1, 0644);
        }
    }
    free(text);
    json_decref(root);
    return rc;
}

static int entry_from_json(json_t *o, struct agent_ckpt_entry *e)
{
    const char *name, *sum;
    json_int_t step, size, mtime, recorded, part = 0, parts = 0;
    char *end;

    if (json_unpack(o, "{s:s, s:I, s:I, s:s, s:I, s:I, s?I, s?I}", "name", &name, "step", &step,
                    "size", &size, "checksum", &sum, "mtime_ns", &mtime, "recorded_ns", &recorded,
                    "part", &part, "parts", &parts) != 0)
        return -EINVAL;
    if (!agent_ckpt_name_valid(name) || step < -1 || size < 0 || strlen(sum) != 16)
        return -EINVAL;
    if (part < 0 || parts < 0 || part > parts || parts > AGENT_CKPT_PARTS_MAX ||
        (part == 0) != (parts == 0))
        return -EINVAL;
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    errno = 0;
    e->checksum = strtoull(sum, &end, 16);
    if (errno != 0 || *end != '\0')
        return -EINVAL;
    e->step = step;
    e->size = (uint64_t)size;
    e->mtime_ns = mtime;
    e->recorded_ns = recorded;
    e->part = (uint32_t)part;
    e->parts = (uint32_t)parts;
    return 0;
}

static int registry_from_json(json_t *root, struct agent_ckpt_registry *out)
{
    json_t *list = json_object_get(root, "entries");
    json_t *ver = json_object_get(root, "version");
    struct agent_ckpt_entry e;
    int rc = 0;

    if (!json_is_integer(ver) || json_integer_value(ver) != AGENT_CKPT_REGISTRY_VERSION ||
        !json_is_array(list) || json_array_size(list) > AGENT_CKPT_REGISTRY_MAX_ENTRIES)
        return -EINVAL;
    /* The file is newest first; adding from the oldest keeps ties in the same order. */
    for (size_t i = json_array_size(list); rc == 0 && i-- > 0;) {
        rc = entry_from_json(json_array_get(list, i), &e);
        if (rc == 0)
            rc = agent_ckpt_registry_add(out, &e);
    }
    return rc;
}

int agent_ckpt_registry_load(struct agent_ckpt_registry *reg, const char *path)
{
    struct agent_ckpt_registry fresh;
    json_error_t jerr;
    json_t *root = NULL;
    struct stat st;
    FILE *f = NULL;
    int fd, rc;

    agent_ckpt_registry_init(&fresh);
    /* O_NOFOLLOW: the registry is only ever a file muster renamed into place */
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    f = fdopen(fd, "r");
    if (f == NULL) {
        close(fd);
        return -ENOMEM;
    }
    if (fstat(fileno(f), &st) != 0) {
        rc = -errno;
        goto out;
    }
    if (st.st_size > (off_t)REGISTRY_FILE_MAX) {
        rc = -EINVAL;
        goto out;
    }
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    rc = root != NULL ? registry_from_json(root, &fresh) : -EINVAL;
    if (rc == 0) {
        agent_ckpt_registry_close(reg);
        *reg = fresh; /* takes the entries */
        agent_ckpt_registry_init(&fresh);
    }
out:
    agent_ckpt_registry_close(&fresh);
    json_decref(root);
    fclose(f);
    return rc;
}

#define PART_PREFIX ".muster-part-"

int agent_ckpt_part_name(char *out, size_t len, const char *name, uint32_t part, uint32_t parts)
{
    int n = snprintf(out, len, PART_PREFIX "%" PRIu32 "-of-%" PRIu32 ".%s", part, parts, name);

    return n < 0 || (size_t)n >= len || (size_t)n >= AGENT_CKPT_NAME_MAX ? -ENAMETOOLONG : 0;
}

const char *agent_ckpt_part_of(const char *local)
{
    const char *p = local;

    if (strncmp(p, PART_PREFIX, strlen(PART_PREFIX)) != 0)
        return local;
    p += strlen(PART_PREFIX);
    while (*p >= '0' && *p <= '9')
        p++;
    if (strncmp(p, "-of-", 4) != 0)
        return local;
    p += 4;
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == '.' && p[1] != '\0' ? p + 1 : local;
}
