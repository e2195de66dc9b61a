"""A tiny DDP-style trainer (gloo, CPU) with a bug: at step --bug-at-step every rank looks up a
batch that is not there and raises KeyError in load_batch(), each attempt at the same line.

  --steps N          steps to train (default 10)
  --bug-at-step S    the KeyError's step; with --after-resume, S steps after the resumed step
  --after-resume     make progress each attempt: rank 0 writes ckpt_<step>.pt (atomically) into
                     $MUSTER_CHECKPOINT_DIR after the first step past the resumed one, waits
                     until muster's registry lists it, then the bug comes S steps on
Every start prints "start: rank R restart_count C resume_step K".
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def load_batch(batches, step):
    return batches[step]  # the bug: batches hold steps 0 .. bug-1 only


def save(step, params):
    d = os.environ["MUSTER_CHECKPOINT_DIR"]
    name = "ckpt_%d.pt" % step
    tmp = os.path.join(d, "." + name + ".tmp")
    torch.save({"step": step, "params": params}, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(d, name))
    # until muster recorded it (the registry lists it): the CKPT reaches the server before the
    # failure does, so the job's progress is known when the next failure comes
    reg = os.path.join(d, ".muster", "registry.json")
    for _ in range(200):
        try:
            with open(reg) as f:
                if name in f.read():
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    print("checkpoint %s never recorded" % name, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--bug-at-step", type=int, default=3)
    ap.add_argument("--after-resume", action="store_true")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    start = 0
    params = torch.zeros(4)
    resume = os.environ.get("MUSTER_RESUME_FROM")
    if resume:
        ck = torch.load(resume)
        start, params = ck["step"], ck["params"]
    print("start: rank %d restart_count %s resume_step %d"
          % (rank, os.environ.get("TORCHELASTIC_RESTART_COUNT"), start), flush=True)
    bug = start + a.bug_at_step if a.after_resume else a.bug_at_step
    batches = {s: torch.ones(4) * s for s in range(bug)}
    for step in range(start, a.steps):
        x = load_batch(batches, step)
        dist.all_reduce(x)
        params += x
        if a.after_resume and rank == 0 and step == start:
            save(step + 1, params)
        dist.barrier()
    print("done: rank %d" % rank, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
