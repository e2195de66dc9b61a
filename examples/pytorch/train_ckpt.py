#!/usr/bin/env python3
"""DDP training that survives restarts: the checkpoint pattern to copy into your own script.

Runs under `muster run` (which restarts the job from the newest good checkpoint), under
`torchrun`, or under any launcher that sets torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT); gloo backend, CPU only, `init_method="env://"`.

    PYTHON_EXEC=/usr/bin/python3 muster run --standalone --nproc-per-node 2 --max-restarts 3 \\
        --checkpoint-dir /tmp/ckpt examples/pytorch/train_ckpt.py --fail-at-step 25

What it shows:
  * Only rank 0 writes checkpoints, atomically: `.ckpt_<step>.pt.tmp`, flush, fsync, rename to
    `ckpt_<step>.pt`, fsync of the directory. A reader (muster's checkpoint watcher, a restart)
    never sees half a file under the final name.
  * Checkpoints go to $MUSTER_CHECKPOINT_DIR (or --ckpt-dir); without either, none are written.
  * On start, when $MUSTER_RESUME_FROM (or --resume) names a checkpoint, every rank loads it
    (model, optimizer, step) and continues from that step with the same data order, so a
    resumed run ends with the same weights, bit for bit, as one that never failed. When the
    file is not on every node (no shared file system), rank 0 reads it and broadcasts it.
  * Each rank is seeded differently (seed + rank); the data order comes from the sampler's seed
    and the epoch; randomness inside a step (dropout) is reseeded from (seed, rank, step), so a
    replayed step draws the same numbers.
  * $MUSTER_HEARTBEAT_FILE, when set, is touched once per step: one line,
    `pathlib.Path(p).touch()`. muster's --hang-timeout then restarts the job if it stops.
  * SIGTERM or SIGUSR1 (Slurm pre-emption, forwarded by muster): the ranks agree to stop after
    the current step, rank 0 writes a final checkpoint, and every rank exits with 128 + signal.

Options:
  --steps N            optimizer steps in all (default 60)
  --ckpt-every K       rank 0 checkpoints after every K-th step (default 10; 0: never)
  --ckpt-dir DIR       default $MUSTER_CHECKPOINT_DIR
  --resume PATH        default $MUSTER_RESUME_FROM
  --fail-at-step S     the rank --fail-rank exits with code 3 on reaching step S, only when
                       TORCHELASTIC_RESTART_COUNT is 0 (unset counts as 0)
  --hang-at-step S     the rank --fail-rank stops touching the heartbeat and sleeps for ever on
                       reaching step S, only when TORCHELASTIC_RESTART_COUNT is 0
  --fail-rank R        which rank fails or hangs (default 0)
  --step-sleep SEC     sleep after each step (default 0), to make room for signals in demos
Rank 0's last line is `done: step N of M ...` with a SHA-256 of the final parameters.
"""
import argparse
import hashlib
import os
import pathlib
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES = 8
SAMPLES = 1024

stop_signal = 0  # set by the handler; acted on between steps, never inside the handler


def on_signal(signum, frame):
    global stop_signal
    stop_signal = signum


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--ckpt-every", type=int, default=10)
    p.add_argument("--ckpt-dir", default=os.environ.get("MUSTER_CHECKPOINT_DIR") or None)
    p.add_argument("--resume", default=os.environ.get("MUSTER_RESUME_FROM") or None)
    p.add_argument("--fail-at-step", type=int, default=-1)
    p.add_argument("--hang-at-step", type=int, default=-1)
    p.add_argument("--fail-rank", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--step-sleep", type=float, default=0.0)
    return p.parse_args()


def make_dataset(seed):
    # The same data on every rank; the sampler gives each rank its own shard.
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    true_w = torch.arange(1, FEATURES + 1, dtype=torch.float32).unsqueeze(1) / FEATURES
    y = x @ true_w + 0.5 + 0.01 * torch.randn(SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(),
                               torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(ckpt_dir, step, model, opt, world):
    """Rank 0 only. Temporary name, fsync, rename, fsync the directory: atomic and durable."""
    os.makedirs(ckpt_dir, exist_ok=True)
    tmp = os.path.join(ckpt_dir, f".ckpt_{step}.pt.tmp")
    final = os.path.join(ckpt_dir, f"ckpt_{step}.pt")
    state = {"step": step, "world_size": world,
             "model": model.module.state_dict(), "optimizer": opt.state_dict()}
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, final)
    fsync_dir(ckpt_dir)
    return final


def read_state(path, rank):
    """Every rank reads the file when every node has it (a shared --checkpoint-dir). Without a
    shared file system only rank 0's node is sure to hold it (muster gives group rank 0 to the
    node with the newest verified checkpoint, e.g. a replica from --replicate-checkpoints):
    rank 0 reads it and broadcasts it to the others."""
    here = torch.tensor([1 if os.path.isfile(path) else 0], dtype=torch.int32)
    dist.all_reduce(here, op=dist.ReduceOp.MIN)
    if here.item():
        return torch.load(path, map_location="cpu")
    box = [torch.load(path, map_location="cpu") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def load_checkpoint(path, model, opt, world, rank):
    state = read_state(path, rank)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    if state.get("world_size", world) != world and rank == 0:
        print(f"warning: {path} was written with world size {state['world_size']}, now {world}: "
              f"the data order differs from the original run", flush=True)
    return int(state["step"])


def params_digest(model):
    h = hashlib.sha256()
    for p in model.module.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def inject_faults(args, step, rank, restart):
    if rank != args.fail_rank or restart != "0":
        return
    if step == args.fail_at_step:
        print(f"rank {rank}: injected failure at step {step} (restart_count 0), exit 3", flush=True)
        os._exit(3)
    if step == args.hang_at_step:
        print(f"rank {rank}: injected hang at step {step} (restart_count 0): no more heartbeats",
              flush=True)
        while not stop_signal:  # a hung process still dies of SIGTERM, as by default
            time.sleep(0.1)
        os._exit(128 + stop_signal)


def agree_to_stop():
    """Every rank must stop after the same step, or the others block in the next all-reduce;
    a signal can reach the ranks at different steps, so they vote (one tiny all-reduce)."""
    flag = torch.tensor([1 if stop_signal else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def settle_ddp_buckets(model, loader):
    """DDP lays its gradient buckets out again once, after the first iteration, in the order
    the gradients became ready. A resumed run must use the rebuilt layout from its first step,
    like an uninterrupted one, or with 3+ ranks the all-reduce adds in another order and the
    weights drift by rounding. One gradient-only pass (no optimizer step) triggers it."""
    x, _ = next(iter(loader))
    model(torch.zeros_like(x)).sum().mul(0.0).backward()
    model.zero_grad()


def train(args, model, opt, loader, sampler, step, rank, world):
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    heartbeat = os.environ.get("MUSTER_HEARTBEAT_FILE")
    loss_fn = torch.nn.MSELoss()
    per_epoch = len(loader)
    while step < args.steps:
        epoch, skip = divmod(step, per_epoch)
        sampler.set_epoch(epoch)  # the data order is a function of (seed, epoch) only
        for i, (x, y) in enumerate(loader):
            if i < skip:  # resuming mid-epoch: replay the epoch's order up to where we were
                continue
            inject_faults(args, step, rank, restart)
            if agree_to_stop():
                return step, True
            torch.manual_seed((args.seed + rank) * 1_000_003 + step)  # dropout, replayable
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            step += 1
            if heartbeat:
                pathlib.Path(heartbeat).touch()
            if rank == 0 and args.ckpt_dir and args.ckpt_every > 0 and step % args.ckpt_every == 0:
                print(f"checkpoint {save_checkpoint(args.ckpt_dir, step, model, opt, world)}",
                      flush=True)
            if args.step_sleep > 0:
                time.sleep(args.step_sleep)
            if step >= args.steps:
                break
    return step, False


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed + rank)  # each rank differently; DDP broadcasts rank 0's weights
    torch.set_num_threads(1)

    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ds = make_dataset(args.seed)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    step = 0
    if args.resume:
        step = load_checkpoint(args.resume, model, opt, world, rank)
        settle_ddp_buckets(model, loader)
        print(f"resumed from {args.resume} at step {step}", flush=True)

    step, stopped = train(args, model, opt, loader, sampler, step, rank, world)
    if stopped:
        sig = stop_signal or signal.SIGTERM  # a peer got it: exit as if we had too
        why = f"signal {int(stop_signal)}" if stop_signal else "a signal to another rank"
        final = "no checkpoint directory"
        if rank == 0 and args.ckpt_dir:
            final = os.path.join(args.ckpt_dir, f"ckpt_{step}.pt")
            if not os.path.exists(final):  # not already written at this very step
                final = save_checkpoint(args.ckpt_dir, step, model, opt, world)
            final = f"final checkpoint {final}"
        if rank == 0:
            print(f"stopping on {why} at step {step}: {final}", flush=True)
        dist.destroy_process_group()
        # Leave at once: torch 1.13 / gloo teardown at interpreter exit sometimes hung a rank
        # for the launcher's whole shutdown timeout after a pre-emption (seen under a real
        # Slurm, docs/SLURM.md). The checkpoint is on disk and the output flushed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + int(sig))

    if rank == 0:
        print(f"done: step {step} of {args.steps}, world_size {world}, restart_count "
              f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}, params {params_digest(model)}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
