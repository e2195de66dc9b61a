#!/usr/bin/env python3
"""A small but real DistributedDataParallel job: linear regression on synthetic data.

Runs unmodified under `muster run` and under `torchrun`:

    PYTHON_EXEC=/usr/bin/python3 muster run --standalone --nproc-per-node 2 train_ddp.py
    torchrun --standalone --nproc_per_node 2 train_ddp.py

It reads the torchrun worker environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...) through
`init_method="env://"` with the gloo backend (CPU only), trains for a few steps with a
DistributedSampler, then checks that every rank ends with bit-identical parameters (DDP's
promise) and exits 1 if not.

Options:
  --steps N            optimizer steps per rank (default 40)
  --batch-size B       per-rank batch size (default 16)
  --fail-once-rank R   the worker with RANK == R exits with code 3 halfway through when
                       TORCHELASTIC_RESTART_COUNT == "0", so a launcher with --max-restarts >= 1
                       restarts the job once and the second attempt finishes
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES = 8
SAMPLES = 1024


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--fail-once-rank", type=int, default=-1)
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo",
                   help="nccl: one GPU per worker (LOCAL_RANK), tensors on the GPU")
    return p.parse_args()


def make_dataset():
    # The same data on every rank (fixed seed), the sampler gives each rank its own shard.
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    true_w = torch.arange(1, FEATURES + 1, dtype=torch.float32).unsqueeze(1) / FEATURES
    y = x @ true_w + 0.5 + 0.01 * torch.randn(SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


def main():
    args = parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cpu")
    if args.backend == "nccl":
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
    dist.init_process_group(args.backend, init_method="env://")
    rank = dist.get_rank()
    world = dist.get_world_size()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")

    # Per-rank seed: the model is initialised differently on every rank on purpose, so that
    # the final equality check proves DDP broadcast rank 0's parameters and kept them in sync.
    torch.manual_seed(1000 + rank)
    torch.set_num_threads(1)

    print(f"rank {rank}/{world} local_rank {local_rank} restart_count {restart} "
          f"master {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
          f"run_id {os.environ.get('TORCHELASTIC_RUN_ID')}", flush=True)

    model = DDP(torch.nn.Linear(FEATURES, 1).to(dev),
                device_ids=[local_rank] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.MSELoss()

    ds = make_dataset()
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    step, epoch, loss = 0, 0, torch.tensor(float("nan"))
    fail_at = max(1, args.steps // 2)
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step == fail_at and rank == args.fail_once_rank and restart == "0":
                print(f"rank {rank}: injected failure at step {step} (restart_count 0), exit 3",
                      flush=True)
                sys.stdout.flush()
                os._exit(3)
            x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        epoch += 1

    # Global mean of the last loss, and a bit-exact parameter comparison across ranks.
    avg = loss.detach().clone().to(dev)
    dist.all_reduce(avg, op=dist.ReduceOp.SUM)
    avg /= world
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    same = bool(torch.equal(lo, hi))

    if rank == 0:
        print(f"final loss {avg.item():.6f} after {args.steps} steps, world_size {world}, "
              f"restart_count {restart}, params identical across ranks: {same}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if not same:
        print(f"rank {rank}: parameters differ across ranks (max spread "
              f"{(hi - lo).abs().max().item():g})", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
