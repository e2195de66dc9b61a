/* Failure signatures: see signature.h. */
#include "signature.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static const char *const network_keys[] = {
    "NCCL error",
    "ncclSystemError",
    "ncclRemoteError",
    "ncclInternalError",
    "Connection reset by peer",
    "Connection closed by peer",
    "Watchdog caught collective operation timeout",
};

static const char *const oom_keys[] = {
    "CUDA out of memory",
    "torch.cuda.OutOfMemoryError",
};

static const char *find_any(const char *text, const char *const *keys, size_t n)
{
    if (text == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strstr(text, keys[i]) != NULL)
            return keys[i];
    return NULL;
}

/* A signal that says someone outside the script ended it, not the script's own crash. */
static int outside_signal(int sig)
{
    return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT ||
           sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGPIPE || sig == SIGXCPU;
}

static size_t line_len(const char *p)
{
    return strcspn(p, "\n");
}

/* `  File "/a/b/train.py", line 88, in load_batch` as "train.py:88 in load_batch". */
static int parse_frame(const char *p, size_t n, char *frame, size_t len)
{
    const char *end = p + n, *file, *close, *base, *q, *func = "";
    unsigned long line = 0;
    size_t func_len = 0;

    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if ((size_t)(end - p) < 6 || memcmp(p, "File \"", 6) != 0)
        return 0;
    file = p + 6;
    if ((close = memchr(file, '"', (size_t)(end - file))) == NULL)
        return 0;
    base = file;
    for (const char *s = file; s < close; s++)
        if (*s == '/')
            base = s + 1;
    if ((size_t)(end - close) < 8 || memcmp(close, "\", line ", 8) != 0)
        return 0;
    for (q = close + 8; q < end && *q >= '0' && *q <= '9' && line < 100000000; q++)
        line = line * 10 + (unsigned long)(*q - '0');
    if ((size_t)(end - q) >= 5 && memcmp(q, ", in ", 5) == 0) {
        func = q + 5;
        func_len = (size_t)(end - func);
        while (func_len > 0 && (func[func_len - 1] == '\r' || func[func_len - 1] == ' '))
            func_len--;
    }
    snprintf(frame, len, "%.*s:%lu in %.*s", (int)(close - base), base, line, (int)func_len, func);
    return 1;
}

/* The exception type at the start of an exception line: a dotted name ending at ':' or the
 * line's end ("KeyError: 'x'", "torch.cuda.OutOfMemoryError: CUDA out of memory", "StopIteration").
 * Returns 0 for a line that is not one ("During handling of ...", "[W socket.cpp] ..."). */
static int parse_exc(const char *p, size_t n, char *exc, size_t len)
{
    size_t i = 0;

    while (i < n && ((p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z') ||
                     (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '.'))
        i++;
    if (i == 0 || (i < n && p[i] != ':') || p[0] == '.' || (p[0] >= '0' && p[0] <= '9'))
        return 0;
    if (i < n && p[i] == ':' && i + 1 < n && p[i + 1] != ' ')
        return 0; /* "http://...", "a:b" */
    snprintf(exc, len, "%.*s", (int)i, p);
    return 1;
}

int agent_signature_traceback(const char *text, char *exc, size_t exc_len, char *frame,
                              size_t frame_len)
{
    char cur[AGENT_SIG_FRAME_MAX];
    int found = 0, want_exc = 0;

    exc[0] = frame[0] = '\0';
    if (text == NULL)
        return 0;
    for (const char *p = text; *p != '\0';) {
        size_t n = line_len(p);
        if (n > 0 && (p[0] == ' ' || p[0] == '\t')) {
            if (parse_frame(p, n, cur, sizeof(cur))) {
                /* a frame after the exception line of an earlier traceback: a newer one */
                if (!want_exc)
                    exc[0] = '\0';
                snprintf(frame, frame_len, "%s", cur);
                found = want_exc = 1;
            }
        } else if (n > 0 && want_exc) {
            /* the first unindented line after the frames (and their source lines) */
            if (!parse_exc(p, n, exc, exc_len))
                exc[0] = '\0';
            want_exc = 0;
        }
        p += n + (p[n] == '\n');
    }
    if (!found)
        exc[0] = '\0';
    return found;
}

/* The exception type in the error file's message ("KeyError: 'x'"), or "". */
static void exc_of_message(const char *msg, char *exc, size_t len)
{
    exc[0] = '\0';
    if (msg != NULL && !parse_exc(msg, line_len(msg), exc, len))
        exc[0] = '\0';
}

static void sig_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    snprintf(buf, len, "signal %d (SIG%s)", sig, abbrev != NULL ? abbrev : "?");
}

/* The last traceback of the first source that has one. */
static void last_traceback(const struct agent_sig_input *in, struct agent_signature *s)
{
    const char *src[] = {in->err_tail, in->out_tail, in->error_stack};

    for (size_t i = 0; i < sizeof(src) / sizeof(src[0]); i++)
        if (agent_signature_traceback(src[i], s->exc, sizeof(s->exc), s->frame, sizeof(s->frame)))
            break;
    if (s->exc[0] == '\0') /* cut off, or no traceback at all: the error file may name it */
        exc_of_message(in->error_msg, s->exc, sizeof(s->exc));
}

static void classify(const struct agent_sig_input *in, struct agent_signature *s)
{
    const char *key;
    int oom;

    if (in->hang) {
        s->cls = RDZV_SIG_HANG;
        snprintf(s->text, sizeof(s->text), "hang");
        return;
    }
    if (in->signal > 0 && outside_signal(in->signal)) {
        s->cls = RDZV_SIG_SIGNAL;
        sig_name(in->signal, s->text, sizeof(s->text));
        return;
    }
    if ((key = find_any(in->error_msg, network_keys, 7)) != NULL ||
        (key = find_any(in->err_tail, network_keys, 7)) != NULL) {
        s->cls = RDZV_SIG_NETWORK;
        snprintf(s->text, sizeof(s->text), "network: %s", key);
        return;
    }
    last_traceback(in, s);
    oom = find_any(in->error_msg, oom_keys, 2) != NULL ||
          strstr(s->exc, "OutOfMemoryError") != NULL ||
          (s->frame[0] != '\0' && find_any(in->err_tail, oom_keys, 2) != NULL);
    if (oom) {
        s->cls = RDZV_SIG_OOM;
        snprintf(s->text, sizeof(s->text), "CUDA out of memory%s%s", s->frame[0] ? " at " : "",
                 s->frame);
    } else if (s->exc[0] != '\0') {
        s->cls = RDZV_SIG_SCRIPT;
        snprintf(s->text, sizeof(s->text), "%s%s%s", s->exc, s->frame[0] ? " at " : "", s->frame);
    } else if (in->signal > 0) {
        s->cls = RDZV_SIG_OTHER;
        sig_name(in->signal, s->text, sizeof(s->text));
    } else {
        s->cls = RDZV_SIG_OTHER;
        snprintf(s->text, sizeof(s->text), "exit code %d", in->exit_code);
    }
}

void agent_signature_derive(const struct agent_sig_input *in, struct agent_signature *s)
{
    memset(s, 0, sizeof(*s));
    classify(in, s);
    s->hash = XXH3_64bits(s->text, strlen(s->text));
}
