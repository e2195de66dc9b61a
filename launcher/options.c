/* The option table (options.def) and the code that reads nothing but it: name lookup as
 * torchrun's argparse does it, PET_<NAME> fallbacks, the generic parsers, --help's option
 * sections and the README's flag table. Options with a grammar of their own are parsed in
 * config.c, config_gpu.c and config_torchrun.c; cross-option rules are config.c's validate(). */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_priv.h"

const struct launcher_option launcher__options[O_COUNT_] = {
#define LAUNCHER_OPTION(id, ...) [O_##id] = {__VA_ARGS__},
#include "options.def"
#undef LAUNCHER_OPTION
};

#define OPTS launcher__options

/* ---- lookup ------------------------------------------------------------------------------ */

/* argparse's allow_abbrev, which torchrun keeps: an exact name wins, else a prefix that one
 * option alone starts with names it (both spellings: '_' is '-'); a prefix several share is an
 * error listing them, unless exactly one of them is torchrun's: --nproc=2 is --nproc-per-node,
 * as in torchrun, although muster also has --nproc-per-gpu. Returns the id, or -1 with the
 * reason in p->err. */
static int lookup_long(struct parse *p, const char *arg, size_t len)
{
    char norm[64], list[LAUNCHER_ERR_MAX] = "";
    int n = 0, ntr = 0, hit = -1, tr = -1;

    if (len == 0 || len >= sizeof(norm))
        goto unknown;
    for (size_t i = 0; i < len; i++)
        norm[i] = arg[2 + i] == '_' ? '-' : arg[2 + i];
    norm[len] = '\0';
    for (int i = 0; i < O_COUNT_; i++)
        if (strcmp(OPTS[i].name, norm) == 0)
            return i;
    for (int i = 0; i < O_COUNT_; i++) {
        if (strncmp(OPTS[i].name, norm, len) != 0)
            continue;
        n++, hit = i;
        if (OPTS[i].torchrun != NULL)
            ntr++, tr = i;
        size_t used = strlen(list);
        snprintf(list + used, sizeof(list) - used, "%s--%s", used ? ", " : "", OPTS[i].name);
    }
    if (n == 1 || ntr == 1)
        return n == 1 ? hit : tr;
    if (n > 1) {
        launcher__cfg_fail(p, "ambiguous option: --%.*s could match %s", (int)len, arg + 2, list);
        return -1;
    }
unknown:
    launcher__cfg_fail(p, "unknown option '%s' (see 'muster run --help')", arg);
    return -1;
}

static int lookup_short(char c)
{
    for (int i = 0; i < O_COUNT_; i++)
        if (OPTS[i].short_name == c)
            return i;
    return -1;
}

/* --resume-arg may be given many times: each value is one more argument, in order. */
static int push_resume_arg(struct parse *p, const char *v)
{
    struct launcher_config *cfg = p->cfg;
    char **list = realloc(cfg->resume_args, ((size_t)cfg->nresume_args + 2) * sizeof(*list));

    if (list == NULL)
        return -ENOMEM;
    cfg->resume_args = list;
    if ((list[cfg->nresume_args] = strdup(v)) == NULL)
        return -ENOMEM;
    list[++cfg->nresume_args] = NULL;
    return 0;
}

int launcher__opt_take(struct parse *p, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *inline_val = NULL;
    int id;

    if (a[1] == '-') {
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if ((id = lookup_long(p, a, len)) < 0)
            return -EINVAL;
        if (eq)
            inline_val = eq + 1;
    } else {
        id = lookup_short(a[1]);
        if (id >= 0 && a[2] != '\0') {
            if (OPTS[id].kind == OPT_FLAG)
                id = -1; /* no bundling of short flags */
            else
                inline_val = a + 2; /* -r3, like argparse */
        }
    }
    if (id < 0)
        return launcher__cfg_fail(p, "unknown option '%s' (see 'muster run --help')", a);
    if (OPTS[id].kind == OPT_OPTIONAL) {
        p->val[id] = inline_val != NULL ? inline_val : "1";
    } else if (OPTS[id].kind == OPT_FLAG) {
        if (inline_val != NULL)
            return launcher__cfg_fail(p, "option '--%s' takes no value", OPTS[id].name);
        p->val[id] = "1";
    } else if (inline_val != NULL) {
        p->val[id] = inline_val;
    } else {
        if (*i + 1 >= argc)
            return launcher__cfg_fail(p, "option '%s' needs a value", a);
        p->val[id] = argv[++*i];
    }
    p->src[id] = a;
    if (id == O_RESUME_ARG)
        return push_resume_arg(p, p->val[id]) == 0 ? id : -ENOMEM;
    return id;
}

void launcher__opt_env_fallbacks(struct parse *p)
{
    for (int i = 0; i < O_COUNT_; i++) {
        if (p->val[i] != NULL || OPTS[i].pet == NULL)
            continue;
        const char *v = getenv(OPTS[i].pet);
        if (v != NULL && *v != '\0') {
            p->val[i] = v;
            p->src[i] = OPTS[i].pet;
        }
    }
}

const char *launcher__opt_value(const struct parse *p, int id)
{
    return p->val[id] != NULL ? p->val[id] : OPTS[id].def;
}

/* ---- generic parsers --------------------------------------------------------------------- */

static int parse_flag(struct parse *p, int id, const char *v, int *out)
{
    if (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0)
        return *out = 1, 0;
    if (strcmp(v, "0") == 0 || strcasecmp(v, "false") == 0)
        return *out = 0, 0;
    return launcher__cfg_fail(p, "%s must be 0 or 1, not '%s'", p->src[id], v);
}

/* A decimal within (lo, hi]. */
static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v) || !(v > lo) || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

/* One row's value v into its field. Returns 0, 1 when v is not what o->must says, or -EINVAL
 * (reason in p->err) / -ENOMEM. */
static int parse_row(struct parse *p, int id, const char *v)
{
    const struct launcher_option *o = &OPTS[id];
    void *dest = (char *)p->cfg + o->dest;
    unsigned ms;
    long n;

    switch (o->parse) {
    case OPT_P_FLAG:
        return parse_flag(p, id, v, dest);
    case OPT_P_FLAG_NONZERO:
        *(int *)dest = strcmp(v, "0") != 0;
        return 0;
    case OPT_P_INT:
        if (launcher__cfg_parse_int(v, (long)o->lo, (long)o->hi, &n) != 0)
            return 1;
        *(int *)dest = (int)n;
        return 0;
    case OPT_P_UINT:
        if (launcher__cfg_parse_int(v, (long)o->lo, (long)o->hi, &n) != 0 || n < 0)
            return 1;
        *(unsigned *)dest = (unsigned)n;
        return 0;
    case OPT_P_MS:
        if (launcher__cfg_parse_seconds_ms(v, &ms) != 0 || ms < o->lo || ms > o->hi)
            return 1;
        *(unsigned *)dest = ms;
        return 0;
    case OPT_P_DOUBLE:
        return parse_double(v, o->lo, o->hi, dest) == 0 ? 0 : 1;
    case OPT_P_STRING:
        if (o->nonempty && *v == '\0')
            return launcher__cfg_fail(p, "--%s must not be empty", o->name);
        free(*(char **)dest);
        return (*(char **)dest = strdup(v)) != NULL ? 0 : -ENOMEM;
    case OPT_P_CUSTOM:
        break;
    }
    return 0;
}

int launcher__opt_parse_table(struct parse *p)
{
    for (int i = 0; i < O_COUNT_; i++) {
        const char *v = launcher__opt_value(p, i);
        int rc;

        if (OPTS[i].parse == OPT_P_CUSTOM || v == NULL)
            continue;
        rc = parse_row(p, i, v);
        if (rc == 1)
            return launcher__cfg_fail(p, "--%s must be %s, not '%s'", OPTS[i].name, OPTS[i].must,
                                      v);
        if (rc != 0)
            return rc;
    }
    return 0;
}

void launcher__opt_free_strings(struct launcher_config *cfg)
{
    for (int i = 0; i < O_COUNT_; i++) {
        if (OPTS[i].parse != OPT_P_STRING)
            continue;
        char **s = (char **)((char *)cfg + OPTS[i].dest);
        free(*s);
        *s = NULL;
    }
}

/* ---- --dry-run ---------------------------------------------------------------------------- */

/* A row's field as --dry-run shows it; 0 when there is nothing to show (a NULL string). */
static int format_field(const struct launcher_option *o, const struct launcher_config *cfg,
                        char *buf, size_t len)
{
    const void *field = (const char *)cfg + o->dest;

    switch (o->parse) {
    case OPT_P_FLAG:
    case OPT_P_FLAG_NONZERO:
    case OPT_P_INT:
        snprintf(buf, len, "%d", *(const int *)field);
        return 1;
    case OPT_P_UINT:
        snprintf(buf, len, "%u", *(const unsigned *)field);
        return 1;
    case OPT_P_MS:
        snprintf(buf, len, "%g", *(const unsigned *)field / 1000.0);
        return 1;
    case OPT_P_DOUBLE:
        snprintf(buf, len, "%g", *(const double *)field);
        return 1;
    case OPT_P_STRING:
        if (*(char *const *)field == NULL)
            return 0;
        snprintf(buf, len, "%s", *(char *const *)field);
        return 1;
    case OPT_P_CUSTOM:
        break;
    }
    return 0;
}

void launcher__opt_print_changed(const struct launcher_config *cfg, FILE *f)
{
    static struct launcher_config def; /* the rows' defaults, parsed as a value would be */
    char err[LAUNCHER_ERR_MAX], cur[512], was[512];
    struct parse scratch = {.cfg = &def, .err = err, .errlen = sizeof(err)};
    int header = 0;

    memset(&def, 0, sizeof(def));
    for (int i = 0; i < O_COUNT_; i++) {
        if (OPTS[i].parse == OPT_P_CUSTOM || i == O_DRY_RUN)
            continue;
        if (OPTS[i].def != NULL && parse_row(&scratch, i, OPTS[i].def) != 0)
            continue; /* not reached: test_launcher_config's test_option_table parses each */
        int has = format_field(&OPTS[i], cfg, cur, sizeof(cur));
        int had = format_field(&OPTS[i], &def, was, sizeof(was));
        if (!has || (had && strcmp(cur, was) == 0))
            continue;
        if (!header++)
            fputs("# options not at their defaults (launcher/options.def):\n", f);
        fprintf(f, "#   --%s=%s\n", OPTS[i].name, cur);
    }
    launcher__opt_free_strings(&def);
}

/* ---- --help ------------------------------------------------------------------------------ */

struct opt_section_text {
    const char *title; /* the heading, with its colon */
    const char *intro; /* preformatted lines before the options, or NULL */
    const char *outro; /* preformatted lines after them, or NULL */
};

static const struct opt_section_text sections[OPT_SEC_COUNT_] = {
    [OPT_SEC_NODES] = {"Nodes and rendezvous:", NULL, NULL},
    [OPT_SEC_SUPERVISION] = {"Supervision:", NULL, NULL},
    [OPT_SEC_RUN] = {"What to run:",
                     "  SCRIPT [ARGS...]            run as `$PYTHON_EXEC -u SCRIPT ARGS` "
                     "(PYTHON_EXEC defaults\n"
                     "                              to python3 on PATH; resolved once, shown by "
                     "--dry-run)\n",
                     NULL},
    [OPT_SEC_OUTPUT] = {"Output:", NULL,
                        "  Console updates end at '\\n' or '\\r' (progress bars pass at once); a "
                        "line\n"
                        "  without either is shown after 100 ms.\n"},
    [OPT_SEC_FT] = {"Fault tolerance:", NULL,
                    "\n"
                    "Slurm: inside an allocation, absent flags default from SLURM_NNODES, "
                    "SLURM_JOB_ID, the\n"
                    "first host of SLURM_JOB_NODELIST (rendezvous on port 29400) and the GPUs "
                    "of the task.\n"},
    [OPT_SEC_SECURITY] = {"Security (every control connection is TLS 1.2; see "
                          "docs/SECURITY.md):",
                          NULL, NULL},
    [OPT_SEC_PREFLIGHT] = {"Pre-flight (before the first attempt, and on a node joining a "
                           "running job before its\n"
                           "workers start; see muster preflight --help, docs/PREFLIGHT.md) and "
                           "the health check\nbefore a restart round (--health-*):",
                           NULL,
                           "  (per GPU also: bf16 GEMM TFLOP/s, HBM copy GB/s, NVML health; a "
                           "GPU > 10 % below its\n"
                           "   model's median or below a floor fails, uncorrectable ECC / "
                           "row-remap failure fail;\n"
                           "   per node with several GPUs: the P2P bandwidth matrix, a pair "
                           "below half the node's\n"
                           "   median fails; results per GPU in the server's /status and "
                           "/metrics)\n"},
    [OPT_SEC_SHARED] = {"Shared-GPU mode (one node; see docs/SHARED_GPU.md):", NULL, NULL},
    [OPT_SEC_OWN] = {"muster's own:", NULL, NULL},
};

#define HELP_COLUMN 30

/* "-m, --module", "--nnodes N|MIN:MAX", "--dedup[=MS]" */
static void option_head(const struct launcher_option *o, char *buf, size_t len)
{
    int n = 0;

    if (o->short_name != 0)
        n = snprintf(buf, len, "-%c, ", o->short_name);
    snprintf(buf + n, len - (size_t)n, "--%s%s%s", o->name,
             o->arg == NULL || o->arg[0] == '[' ? "" : " ", o->arg ? o->arg : "");
}

/* The default as --help and the README write it: quoted when it is a string. */
static void option_default(const struct launcher_option *o, char *buf, size_t len)
{
    buf[0] = '\0';
    if (o->def != NULL)
        snprintf(buf, len, o->parse == OPT_P_STRING ? "\"%s\"" : "%s", o->def);
}

static void print_help_row(FILE *f, const struct launcher_option *o)
{
    char head[96], def[96];
    const char *s = o->help;
    size_t last = 0;

    option_head(o, head, sizeof(head));
    option_default(o, def, sizeof(def));
    if (strlen(head) + 2 < HELP_COLUMN)
        fprintf(f, "  %-*s", HELP_COLUMN - 2, head);
    else
        fprintf(f, "  %s\n%*s", head, HELP_COLUMN, "");
    for (int first = 1; *s != '\0'; first = 0) {
        size_t n = strcspn(s, "\n");
        if (!first)
            fprintf(f, "%*s", HELP_COLUMN, "");
        fprintf(f, "%.*s", (int)n, s);
        last = n;
        s += n + (s[n] == '\n');
        if (*s != '\0')
            fputc('\n', f);
    }
    if (def[0] != '\0') { /* on the last line when it fits in 100 columns */
        if (HELP_COLUMN + last + strlen(def) + 11 > 100)
            fprintf(f, "\n%*s(default %s)", HELP_COLUMN, "", def);
        else
            fprintf(f, " (default %s)", def);
    }
    fputc('\n', f);
}

void launcher__opt_print_help(FILE *f)
{
    for (int s = 0; s < OPT_SEC_COUNT_; s++) {
        fprintf(f, "%s%s\n", s ? "\n" : "", sections[s].title);
        if (sections[s].intro != NULL)
            fputs(sections[s].intro, f);
        for (int i = 0; i < O_COUNT_; i++)
            if (OPTS[i].sec == (enum opt_section)s)
                print_help_row(f, &OPTS[i]);
        if (sections[s].outro != NULL)
            fputs(sections[s].outro, f);
    }
}

/* ---- the README's table ------------------------------------------------------------------ */

/* text with newlines as spaces and '|' escaped, as a GitHub table cell needs (in code too) */
static void md_cell(FILE *f, const char *text)
{
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '\n')
            fputc(' ', f);
        else if (*c == '|')
            fputs("\\|", f);
        else
            fputc(*c, f);
    }
}

/* The section title without its colon and parenthesis, and on one line. */
static void md_title(FILE *f, const char *title)
{
    size_t n = strcspn(title, "(:");
    while (n > 0 && title[n - 1] == ' ')
        n--;
    fprintf(f, "**%.*s**\n\n", (int)n, title);
}

void launcher__opt_print_markdown(FILE *f)
{
    for (int s = 0; s < OPT_SEC_COUNT_; s++) {
        md_title(f, sections[s].title);
        fputs("| option | environment | default | torchrun | what it does |\n", f);
        fputs("|---|---|---|---|---|\n", f);
        for (int i = 0; i < O_COUNT_; i++) {
            const struct launcher_option *o = &OPTS[i];
            char head[96], def[96];
            if (o->sec != (enum opt_section)s)
                continue;
            option_head(o, head, sizeof(head));
            option_default(o, def, sizeof(def));
            fputs("| `", f);
            md_cell(f, head);
            fprintf(f, "` | %s%s%s | ", o->pet ? "`" : "", o->pet ? o->pet : "", o->pet ? "`" : "");
            if (def[0] != '\0') {
                fputc('`', f);
                md_cell(f, def);
                fputc('`', f);
            }
            fputs(" | ", f);
            md_cell(f, o->torchrun ? o->torchrun : "muster's own");
            fputs(" | ", f);
            md_cell(f, o->help);
            fputs(" |\n", f);
        }
        fputc('\n', f);
    }
}
