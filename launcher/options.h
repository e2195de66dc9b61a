/* The table of `muster run` options (options.def, one row each) and what is made from it:
 * lookup by name with torchrun's spellings and prefixes, the PET_<NAME> fallbacks, the generic
 * value parsers, --help's option lines and the README's flag table (--help-markdown).
 * Internal to the launcher (docs/ARCHITECTURE.md "Adding an option"). */
#ifndef MUSTER_LAUNCHER_OPTIONS_H
#define MUSTER_LAUNCHER_OPTIONS_H

#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>

struct launcher_config; /* config.h */
struct parse;           /* config_priv.h */

/* OPT_OPTIONAL: a flag that may carry "=VALUE" (--mps, --mps=auto); alone it holds "1" */
enum opt_kind { OPT_FLAG, OPT_VALUE, OPT_OPTIONAL };

/* How options.c parses a row's value into .dest; OPT_P_CUSTOM: config*.c does. */
enum opt_parse {
    OPT_P_CUSTOM,
    OPT_P_FLAG,         /* int: 1/true or 0/false, else "SRC must be 0 or 1" */
    OPT_P_FLAG_NONZERO, /* int: anything but "0" is on */
    OPT_P_INT,          /* int within [lo, hi], base 10 */
    OPT_P_UINT,         /* the same into an unsigned field */
    OPT_P_MS,           /* unsigned: seconds as a decimal, in ms within [lo, hi] */
    OPT_P_DOUBLE,       /* double within (lo, hi] */
    OPT_P_STRING,       /* char *, strdup'd (freed by launcher_config_free) */
};

/* --help's sections, in order */
enum opt_section {
    OPT_SEC_NODES,
    OPT_SEC_SUPERVISION,
    OPT_SEC_RUN,
    OPT_SEC_OUTPUT,
    OPT_SEC_FT,
    OPT_SEC_SECURITY,
    OPT_SEC_PREFLIGHT,
    OPT_SEC_SHARED,
    OPT_SEC_OWN,
    OPT_SEC_COUNT_
};

struct launcher_option {
    const char *name; /* dash spelling, without "--" */
    char short_name;  /* 0 = none */
    enum opt_kind kind;
    const char *pet;      /* PET_<NAME>, NULL = no environment override */
    const char *torchrun; /* torchrun's flag: how muster's differs ("same"); NULL = muster's */
    enum opt_section sec;
    const char *arg;  /* the value's name in --help, NULL for a flag */
    const char *def;  /* the default as a value, NULL = none / unset */
    const char *help; /* lines of at most 68 columns */
    enum opt_parse parse;
    int nonempty;     /* OPT_P_STRING: "" is refused */
    double lo, hi;    /* bounds, see enum opt_parse */
    const char *must; /* what the value must be, for the error line */
    size_t dest;      /* offsetof(struct launcher_config, field) */
};

enum opt_id {
#define LAUNCHER_OPTION(id, ...) O_##id,
#include "options.def"
#undef LAUNCHER_OPTION
    O_COUNT_
};

extern const struct launcher_option launcher__options[O_COUNT_];

/* argv[*i] is an option: looks it up (exact name, either spelling, unique prefix, torchrun's
 * meaning first; short names) and stores its value in p->val, moving *i past a separate value.
 * Returns the option's id, or -EINVAL with the reason in p->err. */
int launcher__opt_take(struct parse *p, int argc, char **argv, int *i);

/* For every option not given, PET_<NAME> when set and not empty. */
void launcher__opt_env_fallbacks(struct parse *p);

/* The value of id: given (command line, PET_*, SLURM_*) or its .def (which may be NULL). */
const char *launcher__opt_value(const struct parse *p, int id);

/* Parses every row whose .parse is not OPT_P_CUSTOM, given or from .def, into p->cfg.
 * Returns 0, -EINVAL (reason in p->err) or -ENOMEM. */
int launcher__opt_parse_table(struct parse *p);

/* Frees the OPT_P_STRING fields of cfg. */
void launcher__opt_free_strings(struct launcher_config *cfg);

/* --dry-run's list of the table's options whose value is not their default, as "#   --NAME=V"
 * lines (options with a grammar of their own are shown by run.c). */
void launcher__opt_print_changed(const struct launcher_config *cfg, FILE *f);

/* --help's option sections (everything between the introduction and "Environment:"). */
void launcher__opt_print_help(FILE *f);

/* The README's table of every option, in GitHub markdown (muster run --help-markdown). */
void launcher__opt_print_markdown(FILE *f);

#endif
