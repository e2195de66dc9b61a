#include "failure.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "escape.h"
#include "exitcode.h"
#include "ids.h"

static void copy_first_line(char *dst, size_t len, const char *src)
{
    size_t n = strcspn(src, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The last len - 1 bytes of src (a call stack's innermost frames are at its end). */
static void copy_tail(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);

    if (n >= len)
        src += n - (len - 1);
    snprintf(dst, len, "%s", src);
}

int agent_error_file_read(const char *path, char *text, size_t len, char *stack, size_t stack_len)
{
    json_error_t jerr;
    json_t *root, *msg, *info = NULL;
    int rc = -EINVAL;

    text[0] = '\0';
    if (stack != NULL && stack_len > 0)
        stack[0] = '\0';
    if (path == NULL || *path == '\0')
        return -ENOENT;
    root = json_load_file(path, 0, &jerr);
    if (root == NULL)
        return jerr.position == 0 && jerr.line <= 0 ? -ENOENT : -EINVAL;
    msg = json_object_get(root, "message");
    if (json_is_object(msg)) {
        info = json_object_get(msg, "extraInfo");
        msg = json_object_get(msg, "message");
    }
    if (json_is_string(msg)) {
        copy_first_line(text, len, json_string_value(msg));
        rc = 0;
    }
    info = json_is_object(info) ? json_object_get(info, "py_callstack") : NULL;
    if (rc == 0 && stack != NULL && stack_len > 0 && json_is_string(info))
        copy_tail(stack, stack_len, json_string_value(info));
    json_decref(root);
    return rc;
}

int agent_error_file_message(const char *path, char *text, size_t len)
{
    return agent_error_file_read(path, text, len, NULL, 0);
}

void agent_failure_describe(const struct rdzv_failure *f, char *buf, size_t len)
{
    if (f->signal > 0)
        snprintf(buf, len, "was killed by signal %d (SIG%s)", f->signal,
                 sigabbrev_np(f->signal) ? sigabbrev_np(f->signal) : "?");
    else if (f->rank < 0 || f->exit_code < 0)
        mc_escape(f->text, buf, len); /* a lost node, a hang: the text (a peer's) says what */
    else
        snprintf(buf, len, "exited with code %d", f->exit_code);
}

int agent_failure_exit_code(const struct rdzv_failure *f)
{
    if (f->signal > 0)
        return 128 + f->signal;
    return f->exit_code > 0 && f->exit_code < 256 ? f->exit_code : 1;
}

int agent_failure_job_exit_code(const struct rdzv_failure *f)
{
    return f->flags & RDZV_FAILURE_NOT_RETRYABLE ? MC_EXIT_NOT_RETRYABLE
                                                 : agent_failure_exit_code(f);
}

void agent_failure_print_not_retryable(FILE *out, const struct rdzv_failure *f, unsigned k)
{
    char sig[MC_ESCAPE_SIZE(sizeof(f->sig))];

    mc_escape(f->sig, sig, sizeof(sig)); /* a peer's text, through the server */
    if (k == 1)
        fprintf(out,
                "muster: not retrying: a failure like this (%s) ends the job "
                "(--max-same-failure 1); exit %d\n",
                sig, MC_EXIT_NOT_RETRYABLE);
    else
        fprintf(out,
                "muster: not retrying: the same failure (%s) ended %u attempts in a row with no "
                "newer checkpoint (--max-same-failure %u); exit %d\n",
                sig, k, k, MC_EXIT_NOT_RETRYABLE);
    fflush(out);
}

void agent_failure_print_summary(FILE *out, const char *run_id, unsigned restarts,
                                 const struct rdzv_failure *f, const char *error_file)
{
    time_t t = (time_t)(f->time_ms / 1000);
    struct tm tm;
    char when[32] = "?";
    /* host and text come from another node (through the server), the error file's message from
     * a worker: a newline would forge a summary line, an ESC sequence rewrite the terminal */
    char host[MC_ESCAPE_SIZE(sizeof(f->host))], text[MC_ESCAPE_SIZE(sizeof(f->text))];
    char id[MC_ESCAPE_SIZE(MC_ID_MAX)];

    mc_escape(f->host, host, sizeof(host));
    mc_escape(f->text, text, sizeof(text));
    mc_escape(run_id, id, sizeof(id));

    if (gmtime_r(&t, &tm) != NULL)
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(out, "muster: job %s failed after %u restart(s)\n", id, restarts);
    fprintf(out, "muster: root cause (first observed failure):\n");
    if (f->rank >= 0)
        fprintf(out, "muster:   rank       : %d (local_rank %d)\n", f->rank, f->local_rank);
    fprintf(out, "muster:   host       : %s\n", host);
    if (f->signal > 0)
        fprintf(out, "muster:   signal     : %d (SIG%s)\n", f->signal,
                sigabbrev_np(f->signal) ? sigabbrev_np(f->signal) : "?");
    else if (f->rank >= 0 && f->exit_code >= 0)
        fprintf(out, "muster:   exit code  : %d\n", f->exit_code);
    fprintf(out, "muster:   time       : %s\n", when);
    if (error_file != NULL && *error_file != '\0')
        fprintf(out, "muster:   error file : %s\n", error_file);
    if (f->sig[0] != '\0') {
        char sig[MC_ESCAPE_SIZE(sizeof(f->sig))];
        mc_escape(f->sig, sig, sizeof(sig));
        fprintf(out, "muster:   signature  : %s (%s)\n", sig, rdzv_sig_class_name(f->sig_class));
    }
    if (f->text[0] != '\0')
        fprintf(out, "muster:   message    : %s\n", text);
    else if (f->rank >= 0)
        fprintf(out, "muster:   message    : none (decorate the entry point with "
                     "torch.distributed.elastic.multiprocessing.errors.record for a traceback)\n");
    fflush(out);
}
