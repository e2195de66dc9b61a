/* Writes the seed corpus of fuzz_message: one valid message of every type, encoded with
 * rdzv_msg_encode(), as "TYPE byte + payload" (the target's single-message mode), plus one
 * "0 + frame, frame, ..." stream of several whole frames (its stream mode).
 * Usage: fuzz_gen_corpus DIR   (fuzz/run.sh regenerates nothing; the output is committed). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "message.h"

static struct rdzv_msg msg;
static uint8_t buf[RDZV_HEADER_SIZE + RDZV_MAX_PAYLOAD];
static uint8_t stream[8192];
static size_t stream_len = 1; /* stream[0] = 0: the stream mode selector */

static void fill_join(struct rdzv_join *j)
{
    strcpy(j->job_id, "job-42");
    j->min_nodes = 1;
    j->max_nodes = 4;
    j->nproc = 8;
    strcpy(j->host, "node01");
    strcpy(j->addr, "10.0.0.1");
    j->master_port = 29500;
    j->max_restarts = 3;
    j->last_call_ms = 30000;
    j->join_timeout_ms = 600000;
    j->node_id = 0x0123456789abcdefULL;
    j->keep_alive_ms = 1000;
    j->heartbeat_timeout_ms = 3000;
    j->reconnect_grace_ms = 60000;
    strcpy(j->resume, "ckpt_120.pt");
    j->resume_step = 120;
    j->backoff_min_ms = 1000; /* the optional tail, both parts */
    j->backoff_max_ms = 60000;
    j->exclude_after = 2;
    j->flags = RDZV_JOIN_SPARE;
}

static void fill_assign(struct rdzv_assign *a)
{
    a->round = 2;
    a->group_rank = 1;
    a->group_world_size = 2;
    a->rank_offset = 8;
    a->world_size = 16;
    a->restart_count = 1;
    strcpy(a->master_addr, "10.0.0.1");
    a->master_port = 29500;
    strcpy(a->resume, "ckpt_120.pt");
    a->resume_step = 120;
}

static void fill_failure(struct rdzv_failure *f)
{
    f->round = 1;
    f->rank = 3;
    f->local_rank = 3;
    f->exit_code = -1;
    f->signal = 9;
    f->time_ms = 1700000000000ULL;
    strcpy(f->host, "node02");
    strcpy(f->text, "worker killed by SIGKILL");
}

/* A valid example of each type in msg. Long: one case per message type, as long as the
 * protocol's list of types. */
static void fill(uint8_t type)
{
    memset(&msg, 0, sizeof(msg));
    msg.type = type;
    switch (type) {
    case RDZV_MSG_HELLO:
        msg.u.hello.version = RDZV_PROTO_VERSION;
        msg.u.hello.role = RDZV_ROLE_AGENT;
        strcpy(msg.u.hello.token, "s3cret");
        break;
    case RDZV_MSG_ERROR:
        msg.u.error.code = RDZV_ERR_AUTH;
        strcpy(msg.u.error.text, "wrong token");
        break;
    case RDZV_MSG_JOIN:
        fill_join(&msg.u.join);
        break;
    case RDZV_MSG_WAITING:
        msg.u.waiting = (struct rdzv_waiting){1, 2, 4, 25000, -1};
        break;
    case RDZV_MSG_ASSIGN:
        fill_assign(&msg.u.assign);
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        fill_failure(&msg.u.failed);
        break;
    case RDZV_MSG_RESTART:
        msg.u.restart.restart_count = 2;
        fill_failure(&msg.u.restart.cause);
        break;
    case RDZV_MSG_DONE:
    case RDZV_MSG_REJOIN_OK:
        msg.u.done.round = 3;
        break;
    case RDZV_MSG_JOB_FAILED:
        msg.u.job_failed.restarts = 3;
        fill_failure(&msg.u.job_failed.cause);
        break;
    case RDZV_MSG_HEARTBEAT:
        msg.u.heartbeat.round = 2;
        msg.u.heartbeat.seq = 99;
        break;
    case RDZV_MSG_REJOIN:
        fill_join(&msg.u.rejoin.join);
        msg.u.rejoin.running = 1;
        fill_assign(&msg.u.rejoin.assign);
        break;
    case RDZV_MSG_ATTACH:
        strcpy(msg.u.attach.job_id, "job-42");
        msg.u.attach.round = 2;
        msg.u.attach.rank = 5;
        break;
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        msg.u.kv.req_id = 7;
        msg.u.kv.wait_ms = type == RDZV_MSG_KV_PUT ? 0 : 5000;
        msg.u.kv.count = type == RDZV_MSG_BARRIER ? 16 : 0;
        strcpy(msg.u.kv.key, type == RDZV_MSG_BARRIER ? "init" : "nccl_unique_id");
        if (type == RDZV_MSG_KV_PUT || type == RDZV_MSG_KV_REPLY) {
            msg.u.kv.value_len = 8;
            memcpy(msg.u.kv.value,
                   "\x01\x02\x00\xff"
                   "abcd",
                   8);
        }
        break;
    case RDZV_MSG_STATUS_REQ:
        strcpy(msg.u.status_req.job_id, "job-42");
        break;
    case RDZV_MSG_STATUS:
        strcpy(msg.u.status.json, "{\"jobs\":[{\"id\":\"job-42\",\"round\":2}]}");
        msg.u.status.len = (uint32_t)strlen(msg.u.status.json);
        break;
    case RDZV_MSG_CKPT:
        strcpy(msg.u.ckpt.name, "ckpt_000120.pt");
        msg.u.ckpt.step = 120;
        msg.u.ckpt.size = 4096;
        msg.u.ckpt.checksum = 0xfeedfacecafebeefULL;
        msg.u.ckpt.time_ms = 1700000000000ULL;
        msg.u.ckpt.verified_bad = 1;
        strcpy(msg.u.ckpt.reason, "size 1024 != recorded 4096 (truncated?)");
        break;
    case RDZV_MSG_PREFLIGHT:
        msg.u.preflight.round = 1;
        msg.u.preflight.ok = 1;
        msg.u.preflight.joined = 1;
        msg.u.preflight.p2p_pairs = 2;
        msg.u.preflight.p2p_min_mbps = 390000;
        msg.u.preflight.p2p_median_mbps = 391000;
        msg.u.preflight.count = 2;
        for (uint32_t i = 0; i < 2; i++) {
            msg.u.preflight.gpus[i].index = i;
            snprintf(msg.u.preflight.gpus[i].uuid, sizeof(msg.u.preflight.gpus[i].uuid),
                     "GPU-0000000%u-aaaa-bbbb-cccc-dddddddddddd", i);
            strcpy(msg.u.preflight.gpus[i].model, "NVIDIA H200");
            msg.u.preflight.gpus[i].gemm_gflops = 790100;
            msg.u.preflight.gpus[i].hbm_mbps = 4270300;
            msg.u.preflight.gpus[i].level = (uint8_t)i;
        }
        strcpy(msg.u.preflight.gpus[1].note, "clocks held down by HW slowdown");
        break;
    case RDZV_MSG_REPL_BEGIN: /* its tail's three parts: a direct link, a directory, a mode */
        msg.u.repl_begin.xfer = 0x80000001u;
        msg.u.repl_begin.round = 2;
        msg.u.repl_begin.rank = 1;
        strcpy(msg.u.repl_begin.name, "step-120");
        msg.u.repl_begin.step = 120;
        msg.u.repl_begin.size = 5000019;
        msg.u.repl_begin.checksum = 0x6e3d2879e2dc7071ULL;
        msg.u.repl_begin.port = 41015;
        msg.u.repl_begin.link = 0x80000001u;
        memset(msg.u.repl_begin.key, 0xa5, sizeof(msg.u.repl_begin.key));
        strcpy(msg.u.repl_begin.host, "10.0.0.1");
        msg.u.repl_begin.flags = RDZV_REPL_BEGIN_DIR;
        msg.u.repl_begin.mode = 0750;
        break;
    case RDZV_MSG_REPL_DATA:
        msg.u.repl_data.xfer = 7;
        msg.u.repl_data.offset = 61440;
        msg.u.repl_data.len = 16;
        memcpy(msg.u.repl_data.data, "step-120/.meta\0\0", 16);
        break;
    case RDZV_MSG_REPL_ACK:
        msg.u.repl_ack.xfer = 7;
        msg.u.repl_ack.offset = 122880;
        msg.u.repl_ack.status = RDZV_REPL_RELAY;
        strcpy(msg.u.repl_ack.text, "the link was not up within 5000 ms");
        break;
    default: /* WELCOME, JOB_DONE, ATTACH_OK: empty payloads */
        break;
    }
}

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        return -EIO;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t len = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    for (unsigned t = 1; t < RDZV_MSG_TYPE_MAX_; t++) {
        char name[64];
        fill((uint8_t)t);
        if (rdzv_msg_encode(&msg, buf, sizeof(buf), &len) != 0) {
            fprintf(stderr, "cannot encode %s\n", rdzv_msg_name(t));
            return 1;
        }
        /* single-message mode: the type byte replaces the 12-byte header */
        buf[RDZV_HEADER_SIZE - 1] = (uint8_t)t;
        snprintf(name, sizeof(name), "%02u_%s", t, rdzv_msg_name(t));
        if (write_file(argv[1], name, buf + RDZV_HEADER_SIZE - 1, len - RDZV_HEADER_SIZE + 1))
            return 1;
        /* the stream: a client's first frames, HELLO, JOIN, HEARTBEAT, CKPT, LEAVE */
        if ((t == RDZV_MSG_HELLO || t == RDZV_MSG_JOIN || t == RDZV_MSG_HEARTBEAT ||
             t == RDZV_MSG_CKPT || t == RDZV_MSG_LEAVE) &&
            stream_len + len <= sizeof(stream)) {
            fill((uint8_t)t);
            rdzv_msg_encode(&msg, stream + stream_len, sizeof(stream) - stream_len, &len);
            stream_len += len;
        }
    }
    stream[0] = 0;
    return write_file(argv[1], "00_stream", stream, stream_len) ? 1 : 0;
}
