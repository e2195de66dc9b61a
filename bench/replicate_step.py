#!/usr/bin/env python3
"""Synthetic trainer for bench/replicate_bench.sh: fixed CPU work per step (matmuls), one tiny
all-reduce per step (the ranks stay in lock step, as DDP does), and rank 0 writes a checkpoint
of MB megabytes every EVERY steps (temporary name, fsync, rename into MUSTER_CHECKPOINT_DIR).
Rank 0 prints `steps N mean_ms M median_ms D` for the steps after the first checkpoint.

    replicate_step.py STEPS EVERY MB
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main():
    steps, every, mb = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    d = os.environ.get("MUSTER_CHECKPOINT_DIR")
    x = torch.randn(192, 192)
    blob = os.urandom(mb << 20) if rank == 0 else b""
    times = []
    for s in range(1, steps + 1):
        t = time.perf_counter()
        for _ in range(40):
            x = torch.tanh(x @ x)
        flag = torch.ones(1)
        dist.all_reduce(flag)
        if rank == 0 and d and s % every == 0:
            tmp = os.path.join(d, f".ckpt_{s}.bin.tmp")
            with open(tmp, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, os.path.join(d, f"ckpt_{s}.bin"))
        times.append(time.perf_counter() - t)
    dist.barrier()
    if rank == 0:
        t = times[every:]
        print(f"steps {len(t)} mean_ms {1000 * statistics.mean(t):.2f} "
              f"median_ms {1000 * statistics.median(t):.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
