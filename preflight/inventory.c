/* Pre-flight stage 1: compare the nodes' inventories and print the consistency table. */
#include "inventory.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_CELL_MAX 24 /* table cells keep the table near 100 columns */
#define MODEL_CELL_MAX 24
#define DRIVER_CELL_MAX 16
#define NAME_MAX_LEN 63 /* host names in problem lines, so a reason keeps its advice */
#define TEXT_LEN 128    /* sanitized free text (driver, model, error) */
#define CELL_LEN 64
#define LIST_MAX 3  /* nodes named in one problem line before "and N more" */
#define KINDS_MAX 4 /* distinct (model, memory) pairs listed for one node */
#define NCELLS 8

enum col { COL_MODEL, COL_MEMORY, COL_DRIVER, COL_CUDA_DRIVER, COL_CUDA_RUNTIME, COL_NCCL, NCOLS };

static const char *const col_key[NCOLS] = {"model",       "memory",       "driver",
                                           "cuda_driver", "cuda_runtime", "nccl"};
static const char *const col_title[NCOLS] = {
    "GPU model",           "GPU memory",           "NVIDIA driver",
    "CUDA driver version", "CUDA runtime version", "NCCL"};
static const char *const cell_title[NCELLS] = {"rank",   "host",   "GPUs", "model",
                                               "memory", "driver", "CUDA", "NCCL"};

struct node {
    size_t order;                           /* index in the caller's array: a stable sort */
    long long rank, need, ngpus;            /* -1: missing or wrongly typed */
    long long mem, cuda_drv, cuda_rt, nccl; /* -1: unknown, or the GPUs of the node differ */
    const json_t *gpus;                     /* borrowed from the record */
    int have_inv;                           /* inventory present, CUDA started, GPU list read */
    int mixed;                              /* the node's GPUs differ among themselves */
    int not_object;                         /* the record itself is not a JSON object */
    char host[NAME_MAX_LEN + 1];
    char error[TEXT_LEN];       /* why the inventory is unusable */
    char model[TEXT_LEN];       /* full name, "mixed", "-" (no GPU) or "?" */
    char disp[NCOLS][CELL_LEN]; /* table value */
    char key[NCOLS][TEXT_LEN];  /* compared value: exact bytes for memory */
    int differs[NCOLS];
};

struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

struct ctx {
    struct pf_inventory_verdict *v;
    int allow_mixed;
    int oom;
    struct sbuf notes; /* "! ..." / "~ ..." lines below the table */
    json_t *problems;
};

struct kinds {
    const char *name[KINDS_MAX];
    long long mem[KINDS_MAX];
    size_t count[KINDS_MAX];
    size_t n, other; /* other: GPUs of further kinds, not listed */
};

__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int len;

    if (b->oom)
        return;
    va_start(ap, fmt);
    len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || b->len + (size_t)len + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + (len < 0 ? 0 : (size_t)len);
        char *p = len < 0 ? NULL : realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)len;
}

/* Untrusted text reaches a terminal: keep printable ASCII, turn each control byte or UTF-8
 * sequence into one '?' (so the width stays countable), cut to maxw chars ending in '~'. */
static void sanitize(char *dst, size_t cap, const char *src, size_t maxw)
{
    size_t n = 0;

    if (maxw >= cap)
        maxw = cap - 1;
    if (src == NULL || *src == '\0')
        src = "?";
    for (const unsigned char *s = (const unsigned char *)src; *s != '\0'; s++) {
        if ((*s & 0xC0) == 0x80)
            continue;
        if (n == maxw) {
            dst[maxw - 1] = '~';
            break;
        }
        dst[n++] = (*s >= 0x20 && *s < 0x7f) ? (char)*s : '?';
    }
    dst[n] = '\0';
}

static long long get_uint(const json_t *obj, const char *k)
{
    const json_t *j = json_object_get(obj, k);

    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return -1;
    return (long long)json_integer_value(j);
}

static void fmt_gib(char *out, size_t cap, long long bytes)
{
    if (bytes < 0)
        snprintf(out, cap, "?");
    else
        snprintf(out, cap, "%.1f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

/* CUDA encodes 1000 * major + 10 * minor: 13000 is 13.0. */
static void fmt_cuda(char *out, size_t cap, long long v)
{
    if (v < 0)
        snprintf(out, cap, "?");
    else
        snprintf(out, cap, "%lld.%lld", v / 1000, v % 1000 / 10);
}

/* NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9, major * 1000 + ... before. */
static void fmt_nccl(char *out, size_t cap, long long v)
{
    if (v < 0)
        snprintf(out, cap, "?");
    else if (v >= 10000)
        snprintf(out, cap, "%lld.%lld.%lld", v / 10000, v % 10000 / 100, v % 100);
    else
        snprintf(out, cap, "%lld.%lld.%lld", v / 1000, v % 1000 / 100, v % 100);
}

static void fmt_int(char *out, size_t cap, long long v)
{
    if (v < 0)
        snprintf(out, cap, "?");
    else
        snprintf(out, cap, "%lld", v);
}

static void count_kinds(struct kinds *k, const json_t *gpus)
{
    memset(k, 0, sizeof(*k));
    for (size_t i = 0; i < json_array_size(gpus); i++) {
        const json_t *g = json_array_get(gpus, i);
        const char *name = json_string_value(json_object_get(g, "name"));
        long long mem = get_uint(g, "memory");
        size_t j = 0;

        if (name == NULL)
            name = "?";
        while (j < k->n && !(k->mem[j] == mem && strcmp(k->name[j], name) == 0))
            j++;
        if (j < k->n) {
            k->count[j]++;
        } else if (k->n < KINDS_MAX) {
            k->name[j] = name;
            k->mem[j] = mem;
            k->count[j] = 1;
            k->n++;
        } else {
            k->other++;
        }
    }
}

/* Fills the model and memory columns; a node whose GPUs differ compares by its list of kinds. */
static void scan_gpus(struct node *nd)
{
    struct kinds k;
    int same_name = 1, same_mem = 1;

    count_kinds(&k, nd->gpus);
    if (k.n == 0) {
        snprintf(nd->model, sizeof(nd->model), "%s", nd->ngpus < 0 ? "?" : "-");
        snprintf(nd->key[COL_MEMORY], TEXT_LEN, "%s", nd->model);
        return;
    }
    for (size_t j = 1; j < k.n; j++) {
        same_name = same_name && strcmp(k.name[j], k.name[0]) == 0;
        same_mem = same_mem && k.mem[j] == k.mem[0];
    }
    same_name = same_name && k.other == 0;
    same_mem = same_mem && k.other == 0;
    nd->mixed = k.n > 1 || k.other > 0;
    sanitize(nd->model, sizeof(nd->model), same_name ? k.name[0] : "mixed", TEXT_LEN - 1);
    nd->mem = same_mem ? k.mem[0] : -1;
    if (same_mem)
        fmt_int(nd->key[COL_MEMORY], TEXT_LEN, nd->mem);
    if (!nd->mixed)
        return;
    /* Two mixed nodes are alike only when they hold the same kinds. */
    char *mk = nd->key[COL_MODEL], *mm = nd->key[COL_MEMORY], name[MODEL_CELL_MAX + 8];
    if (!same_name)
        snprintf(mk, TEXT_LEN, "mixed");
    if (!same_mem)
        snprintf(mm, TEXT_LEN, "mixed");
    for (size_t j = 0; j < k.n; j++) {
        size_t lk = strlen(mk), lm = strlen(mm);
        sanitize(name, sizeof(name), k.name[j], MODEL_CELL_MAX);
        if (!same_name)
            snprintf(mk + lk, TEXT_LEN - lk, "|%zux%s", k.count[j], name);
        if (!same_mem)
            snprintf(mm + lm, TEXT_LEN - lm, "|%zux%lld", k.count[j], k.mem[j]);
    }
}

static const char *inventory_error(const json_t *rec, const json_t *inv)
{
    const json_t *e = json_object_get(rec, "error");

    if (e == NULL)
        e = json_object_get(inv, "error");
    if (e != NULL)
        return json_is_string(e) ? json_string_value(e) : "?";
    if (!json_is_object(inv))
        return "none reported";
    if (!json_is_array(json_object_get(inv, "gpus")))
        return "no readable GPU list";
    return NULL;
}

static void parse_node(struct node *nd, const json_t *rec, size_t order)
{
    const json_t *inv = json_object_get(rec, "inventory");
    const char *err = inventory_error(rec, inv);

    nd->order = order;
    nd->not_object = !json_is_object(rec);
    nd->rank = get_uint(rec, "group_rank");
    nd->need = get_uint(rec, "need_gpus");
    sanitize(nd->host, sizeof(nd->host), json_string_value(json_object_get(rec, "host")),
             NAME_MAX_LEN);
    nd->have_inv = err == NULL;
    if (err != NULL)
        sanitize(nd->error, sizeof(nd->error), err, TEXT_LEN - 1);
    nd->gpus = json_object_get(inv, "gpus");
    nd->ngpus = json_is_array(nd->gpus) ? (long long)json_array_size(nd->gpus) : -1;
    nd->cuda_drv = get_uint(inv, "cuda_driver");
    nd->cuda_rt = get_uint(inv, "cuda_runtime");
    nd->nccl = get_uint(inv, "nccl");
    nd->mem = -1;
    scan_gpus(nd);
    if (nd->key[COL_MODEL][0] == '\0')
        snprintf(nd->key[COL_MODEL], TEXT_LEN, "%s", nd->model);
    /* "NVIDIA " starts nearly every name: the table drops it to stay within 100 columns. */
    sanitize(nd->disp[COL_MODEL], CELL_LEN,
             nd->model + (strncmp(nd->model, "NVIDIA ", 7) == 0 && nd->model[7] ? 7 : 0),
             MODEL_CELL_MAX);
    if (nd->mixed && nd->mem < 0)
        snprintf(nd->disp[COL_MEMORY], CELL_LEN, "mixed");
    else if (nd->ngpus == 0)
        snprintf(nd->disp[COL_MEMORY], CELL_LEN, "-");
    else
        fmt_gib(nd->disp[COL_MEMORY], CELL_LEN, nd->mem);
    const char *drv = json_string_value(json_object_get(inv, "driver"));
    sanitize(nd->key[COL_DRIVER], TEXT_LEN, drv, TEXT_LEN - 1);
    sanitize(nd->disp[COL_DRIVER], CELL_LEN, drv, DRIVER_CELL_MAX);
    fmt_cuda(nd->disp[COL_CUDA_DRIVER], CELL_LEN, nd->cuda_drv);
    fmt_cuda(nd->disp[COL_CUDA_RUNTIME], CELL_LEN, nd->cuda_rt);
    fmt_nccl(nd->disp[COL_NCCL], CELL_LEN, nd->nccl);
    fmt_int(nd->key[COL_CUDA_DRIVER], TEXT_LEN, nd->cuda_drv);
    fmt_int(nd->key[COL_CUDA_RUNTIME], TEXT_LEN, nd->cuda_rt);
    fmt_int(nd->key[COL_NCCL], TEXT_LEN, nd->nccl);
}

/* Unknown group ranks sort last; equal ranks keep the caller's order. */
static int node_cmp(const void *a, const void *b)
{
    const struct node *x = a, *y = b;
    unsigned long long rx = (unsigned long long)x->rank, ry = (unsigned long long)y->rank;

    if (rx != ry)
        return rx < ry ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static const char *label(const struct node *nd, char *buf, size_t cap)
{
    char r[24];

    fmt_int(r, sizeof(r), nd->rank);
    snprintf(buf, cap, "%s (group rank %s)", nd->host, r);
    return buf;
}

__attribute__((format(printf, 3, 4))) static void add_problem(struct ctx *c, int fatal,
                                                              const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (fatal && !c->v->failed) {
        c->v->failed = 1;
        snprintf(c->v->reason, sizeof(c->v->reason), "%.*s", (int)sizeof(c->v->reason) - 1, msg);
    }
    if (!fatal)
        c->v->nwarnings++;
    sb_printf(&c->notes, "%c %s\n", fatal ? '!' : '~', msg);
    /* msg is plain ASCII (everything untrusted went through sanitize()), so valid UTF-8. */
    if (json_array_append_new(c->problems, json_string(msg)) != 0)
        c->oom = 1;
}

static void add_mixed(struct ctx *c, const char *msg)
{
    c->v->mixed = 1;
    if (c->allow_mixed)
        add_problem(c, 0, "%s", msg);
    else
        add_problem(c, 1, "%s; use --preflight-allow-mixed to run anyway", msg);
}

/* Rule 1 and the record's own fields: these fail the job whatever allow_mixed says. */
static void check_nodes(struct ctx *c, const struct node *nd, size_t n)
{
    char l[NAME_MAX_LEN + 48];

    for (size_t i = 0; i < n; i++) {
        const struct node *x = &nd[i];

        label(x, l, sizeof(l));
        if (x->not_object) {
            add_problem(c, 1, "record %zu of %zu is not a JSON object", x->order + 1, n);
            continue;
        }
        if (x->rank < 0)
            add_problem(c, 1, "node %s: record has no valid group_rank", l);
        else if (i > 0 && nd[i - 1].rank == x->rank)
            add_problem(c, 1, "group rank %lld is claimed by two nodes: %s and %s", x->rank,
                        nd[i - 1].host, x->host);
        if (x->need < 0)
            add_problem(c, 1, "node %s: record has no valid need_gpus", l);
        else if (x->need > 0 && !x->have_inv)
            add_problem(c, 1, "node %s: no GPU inventory: %s", l, x->error);
        else if (x->need > 0 && x->ngpus < x->need)
            add_problem(c, 1, "node %s has %lld GPU%s, its %lld worker%s need%s %lld", l, x->ngpus,
                        x->ngpus == 1 ? "" : "s", x->need, x->need == 1 ? "" : "s",
                        x->need == 1 ? "s" : "", x->need);
    }
}

/* Rule 2: GPUs of one node that differ in model or memory. */
static void check_within(struct ctx *c, const struct node *nd, size_t n)
{
    char l[NAME_MAX_LEN + 48], name[MODEL_CELL_MAX + 8], gib[CELL_LEN];
    struct kinds k;
    struct sbuf b = {0};

    for (size_t i = 0; i < n; i++) {
        if (nd[i].need == 0 || !nd[i].have_inv || !nd[i].mixed)
            continue;
        count_kinds(&k, nd[i].gpus);
        b.len = 0;
        sb_printf(&b, "node %s has mixed GPUs:", label(&nd[i], l, sizeof(l)));
        for (size_t j = 0; j < k.n; j++) {
            sanitize(name, sizeof(name), k.name[j], MODEL_CELL_MAX);
            fmt_gib(gib, sizeof(gib), k.mem[j]);
            sb_printf(&b, "%s %zux %s (%s)", j ? "," : "", k.count[j], name, gib);
        }
        if (k.other > 0)
            sb_printf(&b, ", %zu more of other kinds", k.other);
        if (b.oom)
            break;
        add_mixed(c, b.p);
    }
    c->oom |= b.oom;
    free(b.p);
}

/* Whether a node's column takes part in the comparison across nodes. */
static int comparable(const struct node *x, int col)
{
    if (x->need == 0 || !x->have_inv)
        return 0;
    return col > COL_MEMORY || x->ngpus > 0;
}

/* A value in a problem line; the exact key follows when the printed forms coincide
 * (two memory sizes that round to the same GiB). */
static void put_value(struct sbuf *b, const struct node *x, const struct node *other, int col)
{
    const char *d = col == COL_MODEL ? x->model : x->disp[col];
    const char *od = col == COL_MODEL ? other->model : other->disp[col];

    sb_printf(b, "%s", d);
    if (strcmp(d, od) == 0)
        sb_printf(b, " (%s)", x->key[col]);
}

/* Rule 3: one problem per column, naming the nodes that differ from the reference. */
static void check_column(struct ctx *c, struct node *nd, size_t n, const struct node *ref, int col)
{
    char l[NAME_MAX_LEN + 48];
    struct sbuf b = {0};
    const struct node *first = NULL;
    size_t ndiff = 0;

    if (!comparable(ref, col))
        return;
    sb_printf(&b, "%s differs:", col_title[col]);
    for (size_t i = 0; i < n; i++) {
        struct node *x = &nd[i];

        if (x == ref || !comparable(x, col) || strcmp(x->key[col], ref->key[col]) == 0)
            continue;
        x->differs[col] = 1;
        if (first == NULL)
            first = x;
        if (ndiff++ >= LIST_MAX)
            continue;
        sb_printf(&b, "%s %s has ", ndiff > 1 ? "," : "", label(x, l, sizeof(l)));
        put_value(&b, x, ref, col);
    }
    if (ndiff > LIST_MAX)
        sb_printf(&b, ", and %zu more node%s", ndiff - LIST_MAX, ndiff - LIST_MAX > 1 ? "s" : "");
    if (first != NULL) {
        sb_printf(&b, ", %s has ", label(ref, l, sizeof(l)));
        put_value(&b, ref, first, col);
        if (!b.oom)
            add_mixed(c, b.p);
    }
    c->oom |= b.oom;
    free(b.p);
}

static void make_cells(const struct node *x, char cell[NCELLS][CELL_LEN])
{
    char a[24], b[24];
    int gpu = x->need != 0;

    fmt_int(cell[0], CELL_LEN, x->rank);
    sanitize(cell[1], CELL_LEN, x->host, HOST_CELL_MAX);
    fmt_int(a, sizeof(a), x->ngpus);
    fmt_int(b, sizeof(b), x->need);
    if (gpu)
        snprintf(cell[2], CELL_LEN, "%s/%s%s", a, b,
                 x->need > 0 && (!x->have_inv || x->ngpus < x->need) ? "!" : "");
    else
        snprintf(cell[2], CELL_LEN, "-");
    for (int col = COL_MODEL; col <= COL_DRIVER; col++)
        snprintf(cell[3 + col], CELL_LEN, "%.40s%s", gpu ? x->disp[col] : "-",
                 gpu && x->differs[col] ? "*" : "");
    snprintf(cell[6], CELL_LEN, "%.20s/%.20s%s", x->disp[COL_CUDA_DRIVER],
             x->disp[COL_CUDA_RUNTIME],
             x->differs[COL_CUDA_DRIVER] || x->differs[COL_CUDA_RUNTIME] ? "*" : "");
    snprintf(cell[7], CELL_LEN, "%.40s%s", x->disp[COL_NCCL], x->differs[COL_NCCL] ? "*" : "");
    if (!gpu) {
        snprintf(cell[6], CELL_LEN, "-");
        snprintf(cell[7], CELL_LEN, "-");
    }
}

/* The rank column is right-aligned, the others left-aligned, two spaces apart, no trailing
 * blanks; widths come from the cells themselves. */
static void put_line(struct sbuf *b, char cell[NCELLS][CELL_LEN], const int *w)
{
    for (int j = 0; j < NCELLS; j++) {
        if (j == 0)
            sb_printf(b, "%*s", w[0], cell[0]);
        else if (j == NCELLS - 1)
            sb_printf(b, "  %s\n", cell[j]);
        else
            sb_printf(b, "  %-*s", w[j], cell[j]);
    }
}

static void write_table(struct sbuf *b, const struct node *nd, size_t n, const struct sbuf *notes)
{
    char cell[NCELLS][CELL_LEN];
    int w[NCELLS];

    for (int j = 0; j < NCELLS; j++) {
        snprintf(cell[j], CELL_LEN, "%s", cell_title[j]);
        w[j] = (int)strlen(cell_title[j]);
    }
    for (size_t i = 0; i < n; i++) {
        make_cells(&nd[i], cell);
        for (int j = 0; j < NCELLS; j++)
            if ((int)strlen(cell[j]) > w[j])
                w[j] = (int)strlen(cell[j]);
    }
    for (int j = 0; j < NCELLS; j++)
        snprintf(cell[j], CELL_LEN, "%s", cell_title[j]);
    put_line(b, cell, w);
    for (size_t i = 0; i < n; i++) {
        make_cells(&nd[i], cell);
        put_line(b, cell, w);
    }
    if (notes->len > 0)
        sb_printf(b, "%s", notes->p);
}

static void jset(json_t *o, const char *k, json_t *val, int *oom)
{
    if (val == NULL || json_object_set_new(o, k, val) != 0)
        *oom = 1;
}

static json_t *jint(long long v, int applies)
{
    return v < 0 || !applies ? json_null() : json_integer((json_int_t)v);
}

static json_t *jstr(const char *s, int applies)
{
    return !applies || strcmp(s, "?") == 0 || strcmp(s, "-") == 0 ? json_null() : json_string(s);
}

static json_t *node_json(const struct node *x, int *oom)
{
    json_t *o = json_object(), *d = json_array();
    int gpu = x->need != 0;

    if (o == NULL || d == NULL) {
        json_decref(o);
        json_decref(d);
        *oom = 1;
        return NULL;
    }
    jset(o, "group_rank", jint(x->rank, 1), oom);
    jset(o, "host", jstr(x->host, 1), oom);
    jset(o, "gpus", jint(x->ngpus, gpu), oom);
    jset(o, "need", jint(x->need, 1), oom);
    jset(o, "model", jstr(x->model, gpu), oom);
    jset(o, "memory", x->mixed && x->mem < 0 && gpu ? json_string("mixed") : jint(x->mem, gpu),
         oom);
    jset(o, "driver", jstr(x->key[COL_DRIVER], gpu), oom);
    jset(o, "cuda_driver", jint(x->cuda_drv, gpu), oom);
    jset(o, "cuda_runtime", jint(x->cuda_rt, gpu), oom);
    jset(o, "nccl", jint(x->nccl, gpu), oom);
    for (int col = 0; col < NCOLS; col++)
        if (x->differs[col] && json_array_append_new(d, json_string(col_key[col])) != 0)
            *oom = 1;
    jset(o, "differs", d, oom);
    return o;
}

static json_t *make_summary(struct ctx *c, const struct node *nd, size_t n)
{
    json_t *s = json_object(), *arr = json_array();
    int oom = s == NULL || arr == NULL;

    for (size_t i = 0; i < n && !oom; i++) {
        json_t *o = node_json(&nd[i], &oom);
        if (o != NULL && json_array_append_new(arr, o) != 0)
            oom = 1;
    }
    if (!oom) {
        jset(s, "ok", json_boolean(!c->v->failed), &oom);
        jset(s, "mixed", json_boolean(c->v->mixed), &oom);
        jset(s, "reason", json_string(c->v->reason), &oom);
        jset(s, "nodes", json_incref(arr), &oom);
        jset(s, "problems", json_incref(c->problems), &oom);
    }
    json_decref(arr);
    if (oom) {
        json_decref(s);
        return NULL;
    }
    return s;
}

int pf_inventory_compare(json_t *const *nodes, size_t n, int allow_mixed,
                         struct pf_inventory_verdict *v, char **table, json_t **summary)
{
    struct ctx c = {.v = v, .allow_mixed = allow_mixed};
    struct sbuf tbl = {0};
    struct node *nd = NULL;
    const struct node *ref = NULL;
    json_t *sum = NULL;
    int rc = -ENOMEM;

    if (table != NULL)
        *table = NULL;
    if (summary != NULL)
        *summary = NULL;
    if (n == 0 || nodes == NULL || v == NULL || table == NULL || summary == NULL)
        return -EINVAL;
    memset(v, 0, sizeof(*v));
    nd = calloc(n, sizeof(*nd));
    c.problems = json_array();
    if (nd == NULL || c.problems == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        parse_node(&nd[i], nodes[i], i);
    qsort(nd, n, sizeof(*nd), node_cmp);
    check_nodes(&c, nd, n);
    check_within(&c, nd, n);
    for (size_t i = 0; i < n && ref == NULL; i++)
        if (nd[i].need != 0 && nd[i].have_inv)
            ref = &nd[i];
    for (int col = 0; col < NCOLS && ref != NULL; col++)
        check_column(&c, nd, n, ref, col);
    write_table(&tbl, nd, n, &c.notes);
    sum = make_summary(&c, nd, n);
    if (c.oom || c.notes.oom || tbl.oom || sum == NULL)
        goto out;
    *table = tbl.p;
    tbl.p = NULL;
    *summary = sum;
    sum = NULL;
    rc = 0;
out:
    if (rc != 0)
        memset(v, 0, sizeof(*v));
    json_decref(sum);
    json_decref(c.problems);
    free(c.notes.p);
    free(tbl.p);
    free(nd);
    return rc;
}
