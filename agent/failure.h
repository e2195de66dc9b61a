/* Worker failures: what the root-cause summary says about them. */
#ifndef MUSTER_AGENT_FAILURE_H
#define MUSTER_AGENT_FAILURE_H

#include <stddef.h>
#include <stdio.h>

#include "message.h"

/* Reads torchelastic's error file (written by @record / ErrorHandler):
 * {"message": {"message": "ValueError: boom", "extraInfo": {...}}} or {"message": "text"}.
 * Copies the message's first line into text (always NUL-terminated). Returns 0, -ENOENT when
 * there is no file, -EINVAL when it holds no message. */
int agent_error_file_message(const char *path, char *text, size_t len);
/* The same, and the last stack_len - 1 bytes of its extraInfo.py_callstack (the traceback
 * torchelastic's @record wrote) into stack ("" when none; stack may be NULL). */
int agent_error_file_read(const char *path, char *text, size_t len, char *stack, size_t stack_len);

/* Describes how a worker ended: "exited with code 3" / "was killed by signal 9 (SIGKILL)", or
 * the failure's text (a lost node, a hang), escaped (common/escape.h): it is a peer's. */
void agent_failure_describe(const struct rdzv_failure *f, char *buf, size_t len);

/* The exit code muster returns for this failure: the worker's code, or 128 + signal. */
int agent_failure_exit_code(const struct rdzv_failure *f);

/* The exit code of a job that failed with cause f (JOB_FAILED): MC_EXIT_NOT_RETRYABLE when the
 * server stopped it over the same failure (RDZV_FAILURE_NOT_RETRYABLE), else
 * agent_failure_exit_code. */
int agent_failure_job_exit_code(const struct rdzv_failure *f);

/* Prints the "muster: not retrying: the same failure (SIG) ended K attempts in a row ..." line
 * (k: this agent's --max-same-failure; the job's is its first JOIN's). SIG is escaped. */
void agent_failure_print_not_retryable(FILE *out, const struct rdzv_failure *f, unsigned k);

/* Prints the root-cause summary (several "muster: " lines) to out. Host, message and run id
 * are escaped (common/escape.h): they may come from another node. */
void agent_failure_print_summary(FILE *out, const char *run_id, unsigned restarts,
                                 const struct rdzv_failure *f, const char *error_file);

#endif
