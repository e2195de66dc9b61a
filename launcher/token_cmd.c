/* `muster token`: an operator mints a scoped credential from the server's secret (cred.h), so
 * teams share one server without sharing its secret. Nothing is stored on the server: it
 * rederives every credential from its secret when a peer presents one. */
#include "token_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cred.h"
#include "ids.h"
#include "log.h"
#include "safefile.h"
#include "secret.h"
#include "token.h"

static const char token_help[] =
    "usage: muster token (--job ID | --job 'PREFIX*' | --read-only) [--token-file FILE]\n"
    "                    [--out FILE]\n"
    "\n"
    "Mints a credential from the rendezvous server's secret, for a team or a monitor that must\n"
    "not hold the secret itself. The server needs no change: it derives every credential from\n"
    "its secret when a peer presents one, so credentials keep working across server restarts.\n"
    "Revoke them all by giving the server a new secret.\n"
    "\n"
    "  --job ID            a job credential: its agents may join job ID (muster run\n"
    "                      --token-file), `muster status` may show that job. Its workers never\n"
    "                      see it: each job's workers get a worker credential of their own job\n"
    "  --job 'PREFIX*'     the same for every job whose id starts with PREFIX (one team)\n"
    "  --read-only         an observer credential: `muster status` of every job, nothing else\n"
    "  --token-file FILE   the server's secret (the file given to muster server --token-file;\n"
    "                      default: MUSTER_TOKEN)\n"
    "  --out FILE          write the credential to FILE, a new file with mode 0600 (default:\n"
    "                      standard output)\n"
    "  -h, --help          this text\n"
    "\n"
    "Exit codes: 0 written, 2 usage error or unreadable secret, 1 FILE could not be written.\n";

struct token_args {
    const char *job, *token_file, *out;
    int read_only;
};

static int usage(const char *fmt, const char *arg)
{
    char msg[PATH_MAX + 256];

    snprintf(msg, sizeof(msg), fmt, arg);
    mc_error("token: %s (see 'muster token --help')", msg);
    return 2;
}

static int parse(int argc, char **argv, struct token_args *a)
{
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], **slot = NULL;

        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            fputs(token_help, stdout);
            return 1;
        }
        if (strcmp(o, "--read-only") == 0 || strcmp(o, "--read_only") == 0) {
            a->read_only = 1;
            continue;
        }
        if (strcmp(o, "--job") == 0)
            slot = &a->job;
        else if (strcmp(o, "--token-file") == 0 || strcmp(o, "--token_file") == 0)
            slot = &a->token_file;
        else if (strcmp(o, "--out") == 0)
            slot = &a->out;
        else
            return usage("unknown option '%s'", o);
        if (i + 1 >= argc)
            return usage("%s needs a value", o);
        *slot = argv[++i];
    }
    if ((a->job != NULL) == a->read_only)
        return usage("%s", "give exactly one of --job ID and --read-only");
    return 0;
}

/* A scope is a job id, or a job id prefix followed by one '*'. */
static int check_scope(const char *scope)
{
    char id[MC_ID_MAX + 2], err[256];
    size_t n = strlen(scope);

    if (n == 0 || n > MC_ID_MAX + 1)
        return usage("--job '%s': give a job id or a prefix ending in '*'", scope);
    memcpy(id, scope, n + 1);
    if (n > 1 && id[n - 1] == '*')
        id[n - 1] = '\0';
    if (!mc_id_valid(id, err, sizeof(err)))
        return usage("--job: %s", err);
    return 0;
}

/* The server's secret, from FILE or MUSTER_TOKEN; it must be a server secret, not a scoped
 * credential (those cannot mint others). */
static int read_secret(const struct token_args *a, char **secret)
{
    const char *env = getenv("MUSTER_TOKEN");
    struct rdzv_cred c;
    char err[512];
    int rc = launcher_secret_alloc(LAUNCHER_TOKEN_FILE_MAX + 1, secret);

    if (rc < 0)
        return usage("%s", "out of memory");
    if (a->token_file != NULL)
        rc = launcher_read_token_file(a->token_file, *secret, LAUNCHER_TOKEN_FILE_MAX + 1, err,
                                      sizeof(err));
    else if (env != NULL && env[0] != '\0')
        rc = launcher_token_check_len(env, "MUSTER_TOKEN", err, sizeof(err));
    else
        return usage("%s", "no server secret: give --token-file FILE or MUSTER_TOKEN");
    if (rc == 0 && a->token_file == NULL)
        snprintf(*secret, LAUNCHER_TOKEN_FILE_MAX + 1, "%s", env);
    if (rc == 0 && (rc = rdzv_cred_parse(*secret, &c, err, sizeof(err))) == 0 &&
        c.kind != RDZV_CRED_SERVER) {
        snprintf(err, sizeof(err), "%s holds a scoped credential, not the server's secret",
                 a->token_file != NULL ? a->token_file : "MUSTER_TOKEN");
        rc = -EINVAL;
    }
    rdzv_cred_wipe(&c);
    return rc == 0 ? 0 : usage("%s", err);
}

static int write_out(const char *path, const char *text)
{
    int rc = mc_secret_write_new(path, text);

    if (rc == -EIO)
        mc_error("token: cannot write %s", path);
    else if (rc != 0)
        mc_error("token: cannot create %s: %s", path, strerror(-rc));
    return rc != 0;
}

int launcher_token(int argc, char **argv)
{
    struct token_args a = {0};
    char *secret = NULL, text[RDZV_CRED_TEXT_MAX + 1];
    int rc = parse(argc, argv, &a);

    if (rc != 0)
        return rc == 1 ? 0 : rc;
    launcher_secret_protect_process();
    if ((a.job != NULL && (rc = check_scope(a.job)) != 0) || (rc = read_secret(&a, &secret)))
        goto out;
    rc = rdzv_cred_mint(secret, a.job != NULL ? RDZV_CRED_JOB : RDZV_CRED_OBSERVER,
                        a.job != NULL ? a.job : "", text, sizeof(text));
    if (rc != 0) {
        rc = usage("%s", "cannot derive the credential");
        goto out;
    }
    if (a.out != NULL)
        rc = write_out(a.out, text);
    else
        printf("%s\n", text);
out:
    memset(text, 0, sizeof(text));
    launcher_secret_free(secret);
    return rc;
}
