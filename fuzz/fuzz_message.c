/* libFuzzer target: the rendezvous frame header and every message decoder.
 *
 * Input byte 0 picks the mode:
 *   0            a byte stream of frames, read the way conn.c reads a socket: 12-byte header
 *                (rdzv_header_decode), then that many payload bytes (rdzv_msg_decode);
 *   1..255       the rest of the input is the payload of message type byte0 (types past the
 *                last known one exercise the -ENOTSUP path).
 * Oracle besides the sanitizers: a payload that decodes must re-encode to exactly the same bytes,
 * or, when its free text was not valid UTF-8 and was made valid, to bytes that are a fixed point
 * of decode + encode (the codec is canonical: no padding, trailing bytes refused, an optional tail
 * (JOIN, REJOIN, RESTART; JOIN's in two parts) present only when its last part is not all zeros).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"

static struct rdzv_msg msg; /* ~130 KB: too big for the stack under ASan's redzones */
static struct rdzv_msg msg2;
static uint8_t reenc[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD],
    reenc2[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];

static void decode_one(uint8_t type, const uint8_t *p, size_t len)
{
    size_t n = 0;

    if (rdzv_msg_decode(type, p, len, &msg) != 0)
        return;
    (void)rdzv_msg_name(type);
    if (rdzv_msg_encode(&msg, reenc, sizeof(reenc), &n) != 0)
        abort(); /* decoded but cannot be sent back: decoder and encoder disagree on limits */
    if (n == RDZV_HEADER_SIZE + len && memcmp(reenc + RDZV_HEADER_SIZE, p, len) == 0)
        return;
    /* Free text that is not valid UTF-8 is made valid on receipt (a character cut
     * short dropped, other bad bytes '?'), so its re-encoding differs from the input; what it
     * became must then be canonical itself: decoding and encoding it again changes nothing. */
    size_t n2 = 0;
    if (rdzv_msg_decode(type, reenc + RDZV_HEADER_SIZE, n - RDZV_HEADER_SIZE, &msg2) != 0 ||
        rdzv_msg_encode(&msg2, reenc2, sizeof(reenc2), &n2) != 0 || n2 != n ||
        memcmp(reenc2, reenc, n) != 0)
        abort(); /* not canonical: two encodings of one message */
}

static void decode_stream(const uint8_t *p, size_t len)
{
    while (len >= RDZV_HEADER_SIZE) {
        uint8_t type = 0;
        uint32_t plen = 0;
        if (rdzv_header_decode(p, &type, &plen) != 0)
            return;
        if (plen > RDZV_MAX_PAYLOAD)
            abort(); /* the header check is what keeps allocations bounded */
        p += RDZV_HEADER_SIZE;
        len -= RDZV_HEADER_SIZE;
        if (plen > len)
            return; /* incomplete frame: a socket would wait for more */
        decode_one(type, p, plen);
        p += plen;
        len -= plen;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] == 0)
        decode_stream(data + 1, size - 1);
    else
        decode_one(data[0], data + 1, size - 1);
    return 0;
}
