#include "ckptexam.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "path.h"

/* A zip's end record is 22 bytes plus a comment of at most 65,535. */
#define ZIP_EOCD_MIN 22u
#define ZIP_TAIL_MAX (ZIP_EOCD_MIN + 65535u)
/* A safetensors header bigger than this is not one (the format caps it at 100 MB). */
#define ST_HEADER_MAX (100u << 20)
/* Bytes hashed between two looks at the cancel flag. */
#define HASH_STEP (8u << 20)

static int64_t ts_ns(struct timespec ts)
{
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void set_layout(struct agent_ckpt_layout *out, enum agent_ckpt_layout_state st,
                       const char *kind, const char *why)
{
    out->state = st;
    out->kind = kind;
    snprintf(out->why, sizeof(out->why), "%s", why != NULL ? why : "");
}

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        got += (size_t)n;
    }
    return 0;
}

static uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* torch.save writes the central directory and its end record last: a zip whose last bytes are
 * not an end record (with its comment) is still being written, or was cut. */
static void check_zip(int fd, uint64_t size, struct agent_ckpt_layout *out)
{
    size_t tail = size < ZIP_TAIL_MAX ? (size_t)size : ZIP_TAIL_MAX;
    unsigned char *buf = NULL;

    if (size < ZIP_EOCD_MIN || (buf = malloc(tail)) == NULL ||
        read_at(fd, buf, tail, size - tail) != 0) {
        free(buf);
        set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, "torch.save zip",
                   "a zip (torch.save) without its end record: cut, or still being written");
        return;
    }
    for (size_t p = tail - ZIP_EOCD_MIN + 1; p-- > 0;) {
        if (memcmp(buf + p, "PK\x05\x06", 4) == 0 &&
            p + ZIP_EOCD_MIN + le16(buf + p + 20) == tail) {
            free(buf);
            set_layout(out, AGENT_CKPT_LAYOUT_COMPLETE, "torch.save zip", NULL);
            return;
        }
    }
    free(buf);
    set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, "torch.save zip",
               "a zip (torch.save) without its end record: cut, or still being written");
}

/* The end of the last tensor's data, from a safetensors header; 0 when it names none. */
static uint64_t st_data_end(json_t *hdr)
{
    const char *key;
    json_t *v;
    uint64_t end = 0;

    json_object_foreach(hdr, key, v)
    {
        json_t *offs = json_object_get(v, "data_offsets");
        json_t *e = json_array_get(offs, 1);
        if (strcmp(key, "__metadata__") != 0 && json_is_integer(e) && json_integer_value(e) >= 0 &&
            (uint64_t)json_integer_value(e) > end)
            end = (uint64_t)json_integer_value(e);
    }
    return end;
}

static void check_safetensors(int fd, uint64_t size, uint64_t hlen, struct agent_ckpt_layout *out)
{
    const char *kind = "safetensors";
    char *text = NULL;
    json_t *hdr = NULL;

    if (8 + hlen > size) {
        set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, kind, "safetensors header cut");
        return;
    }
    if ((text = malloc(hlen + 1)) == NULL || read_at(fd, text, hlen, 8) != 0) {
        free(text);
        set_layout(out, AGENT_CKPT_LAYOUT_UNKNOWN, NULL, NULL);
        return;
    }
    text[hlen] = '\0';
    hdr = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
    free(text);
    if (!json_is_object(hdr))
        set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, kind, "safetensors header unreadable");
    else if (8 + hlen + st_data_end(hdr) > size)
        set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, kind,
                   "safetensors data shorter than its header says: cut, or still being written");
    else
        set_layout(out, AGENT_CKPT_LAYOUT_COMPLETE, kind, NULL);
    json_decref(hdr);
}

void agent_ckpt_layout_file(int fd, uint64_t size, struct agent_ckpt_layout *out)
{
    unsigned char head[9];
    uint64_t hlen = 0;

    set_layout(out, AGENT_CKPT_LAYOUT_UNKNOWN, NULL, NULL);
    if (size == 0) {
        set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, "empty file", "empty");
        return;
    }
    if (size < 4 || read_at(fd, head, size < sizeof(head) ? 4 : sizeof(head), 0) != 0)
        return;
    if (memcmp(head, "PK\x03\x04", 4) == 0) {
        check_zip(fd, size, out);
        return;
    }
    if (size < sizeof(head))
        return;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | head[i];
    if (head[8] == '{' && hlen >= 2 && hlen <= ST_HEADER_MAX)
        check_safetensors(fd, size, hlen, out);
}

/* Whether dir/name/member is a regular file (not followed when a link). */
static int has_file(const char *root, const char *member, uint64_t *size)
{
    char path[PATH_MAX];
    struct stat st;

    if (agent_path_fmt(path, sizeof(path), "%s/%s", root, member) != 0 || lstat(path, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return 0;
    if (size != NULL)
        *size = (uint64_t)st.st_size;
    return 1;
}

static int is_hf_name(const char *name)
{
    const char *p = name + strlen("checkpoint-");

    if (strncmp(name, "checkpoint-", strlen("checkpoint-")) != 0 || *p == '\0')
        return 0;
    for (; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* The first torch.save or safetensors file directly in root that its format says is cut. */
static int members_whole(const char *root, struct agent_ckpt_layout *out, int *dcp)
{
    DIR *d = opendir(root);
    struct dirent *de;
    int whole = 1;

    if (d == NULL)
        return 1;
    while (whole && (de = readdir(d)) != NULL) {
        char path[PATH_MAX];
        struct stat st;
        int fd;

        if (ends_with(de->d_name, ".distcp"))
            *dcp = 1;
        if (de->d_name[0] == '.' ||
            agent_path_fmt(path, sizeof(path), "%s/%s", root, de->d_name) != 0 ||
            (fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)) < 0)
            continue;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            struct agent_ckpt_layout m;
            agent_ckpt_layout_file(fd, (uint64_t)st.st_size, &m);
            if (m.state == AGENT_CKPT_LAYOUT_INCOMPLETE && st.st_size > 0) {
                whole = 0;
                set_layout(out, AGENT_CKPT_LAYOUT_INCOMPLETE, m.kind, "");
                snprintf(out->why, sizeof(out->why), "%.64s: %.120s", de->d_name, m.why);
            }
        }
        close(fd);
    }
    closedir(d);
    return whole;
}

static void check_dir(const char *root, const char *name, const char *marker,
                      struct agent_ckpt_layout *out)
{
    char why[192], path[PATH_MAX];
    uint64_t size = 0;
    int dcp = 0;
    json_t *state;

    set_layout(out, AGENT_CKPT_LAYOUT_UNKNOWN, NULL, NULL);
    if (!members_whole(root, out, &dcp))
        return;
    if (marker[0] != '\0') {
        snprintf(why, sizeof(why), "no %.100s in it yet (--checkpoint-marker)", marker);
        set_layout(out,
                   has_file(root, marker, NULL) ? AGENT_CKPT_LAYOUT_COMPLETE
                                                : AGENT_CKPT_LAYOUT_INCOMPLETE,
                   "--checkpoint-marker", why);
        return;
    }
    if (has_file(root, ".metadata", &size) || dcp) {
        set_layout(out, size > 0 ? AGENT_CKPT_LAYOUT_COMPLETE : AGENT_CKPT_LAYOUT_INCOMPLETE, "DCP",
                   "a torch.distributed.checkpoint directory without its .metadata yet");
        return;
    }
    if (!has_file(root, "trainer_state.json", NULL) && !is_hf_name(name))
        return;
    if (agent_path_fmt(path, sizeof(path), "%s/trainer_state.json", root) != 0)
        return;
    state = json_load_file(path, 0, NULL);
    set_layout(
        out, json_is_object(state) ? AGENT_CKPT_LAYOUT_COMPLETE : AGENT_CKPT_LAYOUT_INCOMPLETE,
        "HF Trainer checkpoint", "an HF Trainer checkpoint without a whole trainer_state.json yet");
    json_decref(state);
}

void agent_ckpt_layout_check(const char *dir, const char *name, const char *marker,
                             struct agent_ckpt_layout *out)
{
    char root[PATH_MAX];
    struct stat st;
    int fd;

    set_layout(out, AGENT_CKPT_LAYOUT_UNKNOWN, NULL, NULL);
    if (agent_path_fmt(root, sizeof(root), "%s/%s", dir, name) != 0 || lstat(root, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        check_dir(root, name, marker, out);
        return;
    }
    if (!S_ISREG(st.st_mode) ||
        (fd = open(root, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)) < 0)
        return;
    if (fstat(fd, &st) == 0)
        agent_ckpt_layout_file(fd, (uint64_t)st.st_size, out);
    close(fd);
}

/* nftw keeps no user pointer: the signature being summed is per thread. */
static _Thread_local struct agent_ckpt_sig *sig_acc;

static int sig_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path;
    (void)type;
    (void)ftw;
    if (ts_ns(st->st_mtim) > sig_acc->mtime_ns)
        sig_acc->mtime_ns = ts_ns(st->st_mtim);
    if (ts_ns(st->st_ctim) > sig_acc->ctime_ns)
        sig_acc->ctime_ns = ts_ns(st->st_ctim);
    if (ftw->level == 0)
        return FTW_CONTINUE;
    sig_acc->files++;
    if (S_ISREG(st->st_mode))
        sig_acc->size += (uint64_t)st->st_size;
    return FTW_CONTINUE;
}

int agent_ckpt_sig_of(const char *dir, const char *name, struct agent_ckpt_sig *sig)
{
    char root[PATH_MAX];
    struct stat st;
    int rc = agent_path_fmt(root, sizeof(root), "%s/%s", dir, name);

    memset(sig, 0, sizeof(*sig));
    if (rc != 0)
        return rc;
    if (lstat(root, &st) != 0)
        return -errno;
    sig->uid = (uint32_t)st.st_uid;
    sig->dev = (uint64_t)st.st_dev;
    sig->ino = (uint64_t)st.st_ino;
    sig->mtime_ns = ts_ns(st.st_mtim);
    sig->ctime_ns = ts_ns(st.st_ctim);
    if (S_ISREG(st.st_mode)) {
        sig->size = (uint64_t)st.st_size;
        sig->files = 1;
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return -EINVAL;
    sig->is_dir = 1;
    sig_acc = sig;
    rc = nftw(root, sig_one, 16, FTW_PHYS | FTW_ACTIONRETVAL);
    sig_acc = NULL;
    return rc == 0 ? 0 : errno != 0 ? -errno : -EIO;
}

int agent_ckpt_sig_equal(const struct agent_ckpt_sig *a, const struct agent_ckpt_sig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->files == b->files &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns && a->is_dir == b->is_dir;
}

/* Hashes dir/name in steps, looking at the cancel flag between them. */
static int hash_entry(struct agent_ckpt_exam *x)
{
    struct agent_ckpt_hash h;
    int finished = 0;
    int rc = agent_ckpt_hash_begin(&h, x->dir, x->name);
    uint64_t t0 = mc_mono_ns();

    while (rc == 0 && !finished) {
        if (x->cancel != NULL && atomic_load(x->cancel)) {
            agent_ckpt_hash_close(&h);
            return -ECANCELED;
        }
        rc = agent_ckpt_hash_step(&h, HASH_STEP, &finished);
    }
    if (rc != 0) {
        agent_ckpt_hash_close(&h);
        return rc;
    }
    rc = agent_ckpt_hash_end(&h, &x->entry);
    x->hash_ns = mc_mono_ns() - t0;
    return rc;
}

static void result(struct agent_ckpt_exam *x, enum agent_ckpt_exam_result r, const char *why)
{
    x->result = r;
    snprintf(x->why, sizeof(x->why), "%s", why != NULL ? why : "");
}

/* What a failure of the file system while looking says about the entry. */
static void errno_result(struct agent_ckpt_exam *x, int rc)
{
    if (rc == -ENOENT)
        result(x, AGENT_CKPT_EXAM_GONE, NULL);
    else if (rc == -ECANCELED)
        result(x, AGENT_CKPT_EXAM_CANCELLED, NULL);
    else if (rc == -EBUSY)
        result(x, AGENT_CKPT_EXAM_CHANGED, "changed while it was read");
    else
        result(x, AGENT_CKPT_EXAM_ERROR, strerror(-rc));
}

void agent_ckpt_examine(struct agent_ckpt_exam *x)
{
    struct agent_ckpt_sig after;
    int rc = agent_ckpt_sig_of(x->dir, x->name, &x->sig);

    if (rc != 0) {
        errno_result(x, rc);
        return;
    }
    /* in a shared (sticky) directory another local user may plant a "checkpoint": never ours to
     * resume from */
    if (x->sig.uid != (uint32_t)geteuid()) {
        char why[96];
        snprintf(why, sizeof(why), "owned by uid %u, not by this agent's user (uid %u)", x->sig.uid,
                 (unsigned)geteuid());
        result(x, AGENT_CKPT_EXAM_ERROR, why);
        return;
    }
    if (x->have_known && x->known.size == x->sig.size && x->known.mtime_ns == x->sig.mtime_ns) {
        result(x, AGENT_CKPT_EXAM_UNCHANGED, NULL);
        return;
    }
    if (x->have_known && x->distrust_known) {
        result(x, AGENT_CKPT_EXAM_ALTERED, NULL);
        return;
    }
    agent_ckpt_layout_check(x->dir, x->name, x->marker, &x->layout);
    if (x->mode == AGENT_CKPT_EXAM_PART && !x->sig.is_dir) {
        result(x, AGENT_CKPT_EXAM_WHOLE, "not a directory");
        return;
    }
    if (x->mode == AGENT_CKPT_EXAM_PART && x->layout.state == AGENT_CKPT_LAYOUT_COMPLETE) {
        result(x, AGENT_CKPT_EXAM_WHOLE, "whole (a directory shared with the node of rank 0?)");
        return;
    }
    /* a part lacks only what the coordinator writes; a member cut short is still a cut */
    if (x->mode == AGENT_CKPT_EXAM_PART && x->layout.state == AGENT_CKPT_LAYOUT_INCOMPLETE &&
        x->layout.kind != NULL &&
        (strcmp(x->layout.kind, "DCP") == 0 ||
         strcmp(x->layout.kind, "HF Trainer checkpoint") == 0 ||
         strcmp(x->layout.kind, "--checkpoint-marker") == 0))
        x->layout.state = AGENT_CKPT_LAYOUT_UNKNOWN;
    if (x->layout.state == AGENT_CKPT_LAYOUT_INCOMPLETE) {
        result(x, AGENT_CKPT_EXAM_INCOMPLETE, x->layout.why);
        return;
    }
    if (x->layout.state == AGENT_CKPT_LAYOUT_UNKNOWN && x->mode == AGENT_CKPT_EXAM_LAYOUT) {
        result(x, AGENT_CKPT_EXAM_WAIT, NULL);
        return;
    }
    if ((rc = hash_entry(x)) != 0) {
        errno_result(x, rc);
        return;
    }
    rc = agent_ckpt_sig_of(x->dir, x->name, &after);
    if (rc != 0 || !agent_ckpt_sig_equal(&x->sig, &after)) {
        result(x, rc == -ENOENT ? AGENT_CKPT_EXAM_GONE : AGENT_CKPT_EXAM_CHANGED,
               "changed while it was read");
        return;
    }
    result(x, AGENT_CKPT_EXAM_RECORD, NULL);
}
