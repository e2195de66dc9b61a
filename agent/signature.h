/* Failure signatures: why a worker ended, in a short stable form, so that the server can tell a
 * bug that fails the same way every attempt (a KeyError at step 1,000) from a node, a network or
 * a kill from outside, which a restart may well cure (docs/FAULT_TOLERANCE.md "Failure
 * signatures"). Pure functions: the caller hands in the exit status, the torchelastic error
 * file's message and call stack (failure.h) and the stream tails (output.h agent_output_tail).
 *
 * The class, in order of precedence:
 *   hang     muster killed it after --hang-timeout
 *   signal   killed by SIGKILL, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2, SIGPIPE, SIGXCPU:
 *            from outside (an operator, the OOM killer, a scheduler), never the script's own
 *   network  "NCCL error", "ncclSystemError", "ncclRemoteError", "ncclInternalError",
 *            "Connection reset by peer", "Connection closed by peer" (gloo), NCCL's watchdog
 *            timeout, anywhere in the error message or stderr's tail
 *   oom      "CUDA out of memory", "torch.cuda.OutOfMemoryError" in the error message or the
 *            last traceback
 *   script   a Python exception: the last traceback of stderr's tail (else stdout's, else the
 *            error file's call stack), or an exception type in the error file's message
 *   other    anything else: a bare exit code, a crash signal (SIGSEGV, SIGABRT, ...)
 * Text forms: "KeyError at train.py:88 in load_batch" (the exception type and the innermost frame
 * of the last traceback, the file's base name), "KeyError" (no frame), "CUDA out of memory at
 * train.py:88 in forward", "network: Connection closed by peer", "signal 9 (SIGKILL)", "hang",
 * "exit code 3", "signal 11 (SIGSEGV)". Nothing that changes between attempts (messages,
 * addresses, steps) enters the text. */
#ifndef MUSTER_AGENT_SIGNATURE_H
#define MUSTER_AGENT_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#include "message.h"

#define AGENT_SIG_EXC_MAX 96    /* exception type, "torch.cuda.OutOfMemoryError" */
#define AGENT_SIG_FRAME_MAX 150 /* "train.py:88 in load_batch" */

/* What is known of one ended worker; every string borrowed, NULL or "" when not known. */
struct agent_sig_input {
    int exit_code;           /* -1 when killed by a signal */
    int signal;              /* 0 when it exited */
    int hang;                /* muster killed it: no heartbeat past --hang-timeout */
    const char *error_msg;   /* the error file's message ("KeyError: 'x'") */
    const char *error_stack; /* the error file's extraInfo.py_callstack */
    const char *err_tail;    /* stderr's last bytes */
    const char *out_tail;    /* stdout's last bytes */
};

struct agent_signature {
    uint8_t cls;                     /* enum rdzv_sig_class, never RDZV_SIG_NONE */
    char exc[AGENT_SIG_EXC_MAX];     /* exception type; "" when none */
    char frame[AGENT_SIG_FRAME_MAX]; /* innermost frame of the last traceback; "" when none */
    char text[RDZV_SIG_MAX + 1];     /* the stable short form, never "" */
    uint64_t hash;                   /* XXH3-64 of text */
};

/* Derives s from in (see the top of this file). Never fails. */
void agent_signature_derive(const struct agent_sig_input *in, struct agent_signature *s);

/* Finds the last Python traceback of text: the exception type of its exception line (the first
 * unindented line after its last frame; "" when cut off) into exc, its innermost frame as
 * "FILE:LINE in FUNC" (FILE's base name) into frame. Returns 1 when a frame was found, else 0
 * with both "". Both buffers are always NUL-terminated. */
int agent_signature_traceback(const char *text, char *exc, size_t exc_len, char *frame,
                              size_t frame_len);

#endif
