#include "msgfix.h"

#include <stdint.h>
#include <string.h>

static void example3(uint8_t type, struct rdzv_msg *m);

void msgfix_failure(struct rdzv_failure *f)
{
    f->round = 3;
    f->rank = -1;
    f->local_rank = 7;
    f->exit_code = -2147483647 - 1; /* INT32_MIN survives the two's complement path */
    strcpy(f->host, "node-a");
    f->signal = 9;
    f->time_ms = 0x0123456789abcdefULL;
    strcpy(f->text, "worker 7 exited with code 1: CUDA error");
}

void msgfix_telemetry(struct rdzv_telemetry *t)
{
    memset(t, 0, sizeof(*t));
    t->t_ms = 1700000000123ull;
    t->ngpus = 2;
    for (uint32_t i = 0; i < 2; i++)
        t->gpus[i] = (struct rdzv_tel_gpu){.gpu = i,
                                           .util = i ? 0 : 97,
                                           .mem_used = (30ull - 29 * i) << 30,
                                           .mem_total = 80ull << 30,
                                           .sm_clock = 1980 - 880 * (int32_t)i,
                                           .mem_clock = 2619,
                                           .temp = i ? 91 : 61,
                                           .power_mw = i ? 180000 : 412000,
                                           .throttle = i ? 0x44 : 0,
                                           .xid = i ? 79 : 0,
                                           .ecc = i ? 3 : 0};
    t->gpus[0].nprocs = 3;
    t->gpus[0].procs[0] = (struct rdzv_tel_proc){4242, 0, 12ull << 30};
    t->gpus[0].procs[1] = (struct rdzv_tel_proc){4243, 1, 11ull << 30};
    t->gpus[0].procs[2] = (struct rdzv_tel_proc){999, -1, UINT64_MAX};
    t->nwarn = 1;
    strcpy(t->warn[0], "ranks 0-1 all run on GPU 0 of node1: the script ignores LOCAL_RANK");
}

void msgfix_preflight(struct rdzv_preflight *pf)
{
    pf->round = 4;
    pf->ok = 1;
    pf->joined = 1;
    pf->p2p_pairs = 2;
    strcpy(pf->p2p_note, "node host0: P2P GPU 0 -> GPU 1 39.0 GB/s is far below");
    pf->p2p_min_mbps = 39000;
    pf->p2p_median_mbps = 214500;
    pf->p2p_level = RDZV_PF_WARNING;
    pf->count = 2;
    for (uint32_t i = 0; i < 2; i++) {
        pf->gpus[i].index = i;
        strcpy(pf->gpus[i].uuid, i ? "GPU-1111" : "GPU-0000");
        strcpy(pf->gpus[i].model, "NVIDIA H200");
        pf->gpus[i].gemm_gflops = i ? 474000 : 790000;
        pf->gpus[i].hbm_mbps = 4280000;
        pf->gpus[i].level = i ? RDZV_PF_FAILURE : RDZV_PF_OK;
    }
    strcpy(pf->gpus[1].note, "node host0, GPU 1 (GPU-1111): bf16 GEMM 474.0 TFLOP/s is slow");
}

/* One filled example of every type. Long: one case per message type (example3() has the
 * rest). */
void msgfix_example(uint8_t type, struct rdzv_msg *m)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    switch (type) {
    case RDZV_MSG_HELLO:
        m->u.hello = (struct rdzv_hello){.version = RDZV_PROTO_VERSION, .role = RDZV_ROLE_AGENT};
        strcpy(m->u.hello.token, "s3cret");
        break;
    case RDZV_MSG_ERROR:
        m->u.error.code = RDZV_ERR_AUTH;
        strcpy(m->u.error.text, "nope");
        break;
    case RDZV_MSG_JOIN:
        m->u.join = (struct rdzv_join){.min_nodes = 2,
                                       .max_nodes = 4,
                                       .nproc = 8,
                                       .master_port = 29500,
                                       .max_restarts = 3,
                                       .last_call_ms = 30000,
                                       .join_timeout_ms = 600000,
                                       .node_id = 0xfedcba9876543210ULL};
        strcpy(m->u.join.job_id, "job-1");
        strcpy(m->u.join.host, "node-a");
        strcpy(m->u.join.addr, "fe80::1");
        strcpy(m->u.join.resume, "ckpt-000120.pt");
        m->u.join.resume_step = 120;
        break;
    case RDZV_MSG_WAITING:
        m->u.waiting = (struct rdzv_waiting){1, 2, 4, -1, 12345};
        break;
    case RDZV_MSG_ASSIGN:
        m->u.assign = (struct rdzv_assign){.round = 5,
                                           .group_rank = 1,
                                           .group_world_size = 3,
                                           .rank_offset = 8,
                                           .world_size = 24,
                                           .restart_count = 2,
                                           .master_port = 29500};
        strcpy(m->u.assign.master_addr, "10.0.0.1");
        strcpy(m->u.assign.resume, "ckpt-000120.pt");
        m->u.assign.resume_step = -1; /* negative steps survive the two's complement path */
        break;
    case RDZV_MSG_FAILED:
    case RDZV_MSG_LEAVE:
        msgfix_failure(&m->u.failed);
        break;
    case RDZV_MSG_RESTART:
        m->u.restart.restart_count = 1;
        msgfix_failure(&m->u.restart.cause);
        break;
    case RDZV_MSG_DONE:
        m->u.done.round = 42;
        break;
    case RDZV_MSG_JOB_FAILED:
        m->u.job_failed.restarts = 3;
        msgfix_failure(&m->u.job_failed.cause);
        break;
    default:
        example3(type, m);
        break;
    }
}

static void example3(uint8_t type, struct rdzv_msg *m)
{
    static struct rdzv_msg a;

    switch (type) {
    case RDZV_MSG_HEARTBEAT:
        m->u.heartbeat.round = 7;
        m->u.heartbeat.seq = 0x1122334455667788ULL;
        break;
    case RDZV_MSG_REJOIN:
        msgfix_example(RDZV_MSG_JOIN, m);
        m->u.rejoin.join.keep_alive_ms = 1000;
        m->u.rejoin.join.heartbeat_timeout_ms = 3000;
        m->u.rejoin.join.reconnect_grace_ms = 60000;
        m->type = RDZV_MSG_REJOIN;
        m->u.rejoin.running = 1;
        m->u.rejoin.done = 1;
        msgfix_example(RDZV_MSG_ASSIGN, &a);
        m->u.rejoin.assign = a.u.assign; /* resume travels back to a restarted server */
        break;
    case RDZV_MSG_REJOIN_OK:
        m->u.rejoin_ok.round = 9;
        break;
    case RDZV_MSG_ATTACH:
        strcpy(m->u.attach.job_id, "job-1");
        m->u.attach.round = 3;
        m->u.attach.rank = -1;
        break;
    case RDZV_MSG_KV_PUT:
    case RDZV_MSG_KV_GET:
    case RDZV_MSG_KV_REPLY:
    case RDZV_MSG_BARRIER:
        m->u.kv.req_id = 77;
        m->u.kv.wait_ms = 5000;
        m->u.kv.count = 4;
        m->u.kv.status = RDZV_KV_STALE;
        strcpy(m->u.kv.key, "nccl/unique_id");
        m->u.kv.value_len = 3;
        memcpy(m->u.kv.value, "\0\1\2", 3); /* binary, NULs allowed */
        break;
    case RDZV_MSG_STATUS_REQ:
        strcpy(m->u.status_req.job_id, "job-1");
        break;
    case RDZV_MSG_STATUS:
        strcpy(m->u.status.json, "{\"jobs\": []}");
        m->u.status.len = (uint32_t)strlen(m->u.status.json);
        break;
    case RDZV_MSG_CKPT:
        strcpy(m->u.ckpt.name, "step-00000042");
        m->u.ckpt.step = 42;
        m->u.ckpt.size = 0x0000000123456789ULL;
        m->u.ckpt.checksum = 0xfedcba9876543210ULL;
        m->u.ckpt.time_ms = 1700000000123ULL;
        m->u.ckpt.verified_bad = 1;
        strcpy(m->u.ckpt.reason, "checksum mismatch");
        break;
    case RDZV_MSG_PREFLIGHT:
        msgfix_preflight(&m->u.preflight);
        break;
    case RDZV_MSG_REPL_BEGIN:
        m->u.repl_begin = (struct rdzv_repl_begin){
            .xfer = 7, .round = 3, .rank = 1, .step = 42, .size = 1ULL << 33, .checksum = 0xabcdef};
        strcpy(m->u.repl_begin.name, "ckpt_42.pt");
        break;
    case RDZV_MSG_REPL_DATA:
        m->u.repl_data.xfer = 7;
        m->u.repl_data.offset = 5ULL << 32;
        m->u.repl_data.len = RDZV_REPL_CHUNK_MAX;
        memset(m->u.repl_data.data, 0x5a, RDZV_REPL_CHUNK_MAX);
        break;
    case RDZV_MSG_REPL_ACK:
        m->u.repl_ack =
            (struct rdzv_repl_ack){.xfer = 7, .offset = 123456, .status = RDZV_REPL_ABORT};
        strcpy(m->u.repl_ack.text, "checksum mismatch");
        break;
    case RDZV_MSG_GOODPUT:
        m->u.goodput = (struct rdzv_goodput){
            .round = 3,
            .restarts = 2,
            .wall_ms = 21000,
            .phase_ms = {1000, 2000, 3000, 12000, 2500, 500},
            .lost_ms = 4000,
        };
        break;
    case RDZV_MSG_COLLECT:
        m->u.collect = (struct rdzv_collect){.round = 2, .req = 9, .timeout_ms = 5000};
        strcpy(m->u.collect.why, "rank 3 on node2: hung");
        break;
    case RDZV_MSG_EVIDENCE:
        m->u.evidence = (struct rdzv_evidence){.round = 2,
                                               .req = 0,
                                               .timeout_ms = 5000,
                                               .rank = 3,
                                               .local_rank = 1,
                                               .pid = 4242,
                                               .flags = RDZV_EV_ALIVE | RDZV_EV_HOOKED,
                                               .exit_code = -1,
                                               .silent_ms = 61000,
                                               .fr_enqueued = -1,
                                               .fr_started = -1,
                                               .fr_completed = -1};
        strcpy(m->u.evidence.host, "node2");
        strcpy(m->u.evidence.where, "train.py:88 in load_batch");
        strcpy(m->u.evidence.innermost, "train.py:88 in load_batch");
        strcpy(m->u.evidence.native, "state S, waiting in hrtimer_nanosleep, 6 threads");
        strcpy(m->u.evidence.frames, "/w/train.py:88 in load_batch\n/w/train.py:120 in main\n");
        break;
    case RDZV_MSG_DEBUG_REQ:
        m->u.debug_req = (struct rdzv_debug_req){.rank = -1};
        strcpy(m->u.debug_req.job_id, "job-1");
        break;
    case RDZV_MSG_TELEMETRY:
        msgfix_telemetry(&m->u.telemetry);
        break;
    case RDZV_MSG_CKPT_PART:
        strcpy(m->u.ckpt_part.name, "step-00000042");
        m->u.ckpt_part.step = 42;
        m->u.ckpt_part.checksum = 0xfedcba9876543210ULL;
        m->u.ckpt_part.round = 3;
        m->u.ckpt_part.part = 2;
        m->u.ckpt_part.parts = 3;
        break;
    case RDZV_MSG_NOTICE:
        strcpy(m->u.notice.text, "GPU 0 of node1 (node 1) is a straggler: 20 % busy while its "
                                 "peers' median is 97 %");
        break;
    case RDZV_MSG_LOG:
    case RDZV_MSG_LOGS: {
        static const char *const text[] = {"step 10 loss 2.31", "", "\xff\x1b[2J warn\r"};
        struct rdzv_log *l = &m->u.log;
        int logs = type == RDZV_MSG_LOGS;

        l->dropped = 12;
        l->next = logs ? 0x1122334455ull : 0;
        l->state = logs ? RDZV_LOGS_MORE | RDZV_LOGS_GAP | RDZV_LOGS_NONE : 0;
        for (uint32_t i = 0; i < 3; i++) {
            size_t n = strlen(text[i]);
            l->lines[i] = (struct rdzv_log_line){.rank = (int32_t)(i * 7),
                                                 .stream = (uint8_t)(i == 2),
                                                 .time_ms = 1700000000000ull + i,
                                                 .seq = logs ? 100 + i : 0,
                                                 .off = l->bytes,
                                                 .len = (uint32_t)n};
            memcpy(l->text + l->bytes, text[i], n);
            l->bytes += (uint32_t)n;
        }
        l->count = 3;
        break;
    }
    case RDZV_MSG_LOGS_REQ:
        m->u.logs_req = (struct rdzv_logs_req){
            .rank = 5, .after = 77, .since_ms = 1700000000000ull, .flags = RDZV_LOGS_REQ_FOLLOW};
        strcpy(m->u.logs_req.job_id, "job-1");
        break;
    default:
        break;
    }
}
