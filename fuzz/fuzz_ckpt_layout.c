/* libFuzzer target: the checkpoint layout check (agent/ckptexam.c agent_ckpt_layout_file), which
 * reads whatever a trainer (or anyone who can write the checkpoint directory) left in a file: a
 * zip's end record, a safetensors header (a length, then JSON with tensor offsets). The input is
 * the file, written to a memfd.
 * Oracle: the check returns one of its three states, and a file it calls complete is one whose
 * format says so: a zip ends with an end record, a safetensors header fits in the file. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckptexam.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct agent_ckpt_layout out;
    int fd = memfd_create("ckpt", MFD_CLOEXEC);
    uint64_t hlen = 0;

    if (fd < 0)
        return 0;
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    agent_ckpt_layout_file(fd, size, &out);
    close(fd);
    if (out.state != AGENT_CKPT_LAYOUT_UNKNOWN && out.state != AGENT_CKPT_LAYOUT_COMPLETE &&
        out.state != AGENT_CKPT_LAYOUT_INCOMPLETE)
        abort();
    if (out.state != AGENT_CKPT_LAYOUT_COMPLETE)
        return 0;
    if (size >= 4 && memcmp(data, "PK\x03\x04", 4) == 0) {
        if (size < 22)
            abort(); /* complete, yet no room for an end record */
        return 0;
    }
    for (int i = 7; size >= 8 && i >= 0; i--)
        hlen = hlen << 8 | data[i];
    if (size < 9 || 8 + hlen > size)
        abort(); /* a safetensors header that does not fit, called complete */
    return 0;
}
