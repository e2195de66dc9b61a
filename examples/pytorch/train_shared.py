#!/usr/bin/env python3
"""A small training job meant to share one GPU with other copies of itself (shared-GPU mode).

Each copy is an independent job (no process group): a small MLP (about 1.6 M parameters, 6 MB)
trained with Adam on random data. Under `muster run --nproc-per-gpu K` every copy gets
MUSTER_GPU_MEM_FRACTION, MUSTER_TASK_INDEX and MUSTER_TASK_COUNT; `muster plan` picks the batch.

    muster plan --probe --procs 3 -- /usr/bin/python3 train_shared.py --probe-batch 8
    MUSTER_BATCH_SIZE=192 muster run --nproc-per-gpu 3 train_shared.py --steps 200

Environment (all optional):
  MUSTER_GPU_MEM_FRACTION  cap on this process's share of the GPU, applied with
                           torch.cuda.set_per_process_memory_fraction before any CUDA tensor
  MUSTER_BATCH_SIZE        batch size (else --batch-size)
  MUSTER_TASK_INDEX/COUNT  which copy this is: picks the learning rate from --lrs
  MUSTER_PROBE_FILE        with --probe-batch: where to write the probe's measurements
  MUSTER_PROBE_BATCH       with MUSTER_PROBE_FILE and no --probe-batch: probe at this batch
                           (how `muster run --nproc-per-gpu K --auto-batch` asks for a probe)

Modes:
  (default)          train for --steps, then print `task=<i> steps=<n> steps_per_s=<x> t0=.. t1=..`
                     (t0/t1: wall-clock start and end of the timed steps)
  --probe-batch B    measure static memory (model + gradients + Adam state + cuBLAS workspace,
                     after a warm-up step) and the peak of one forward + backward + step at
                     batch B; write {"static_bytes", "peak_bytes", "batch", "total_bytes"} to
                     MUSTER_PROBE_FILE and exit 0. Needs CUDA: exits 3
                     on a machine without it (CPU memory cannot stand in for GPU memory)
  --oom-test         allocate 1 GiB tensors until CUDA runs out of memory, print
                     `task=<i> oom after <n> GiB`, exit 0 (shows the memory cap works); needs CUDA

Runs on CPU too (training only), e.g. with Debian's python3-torch.
"""
import argparse
import json
import os
import sys
import time

import torch

EXIT_USAGE = 2
EXIT_NO_CUDA = 3


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=32,
                   help="batch size when MUSTER_BATCH_SIZE is not set (default 32)")
    p.add_argument("--lrs", default="0.001,0.0005,0.002,0.0002",
                   help="comma-separated learning rates; task i uses entry i mod len")
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--layers", type=int, default=1,
                   help="hidden Linear(hidden, hidden) + ReLU blocks (default 1)")
    p.add_argument("--fixed-batch", action="store_true",
                   help="train on one random batch made once (no data generation per step)")
    p.add_argument("--probe-batch", type=int, default=0, metavar="B")
    p.add_argument("--oom-test", action="store_true")
    p.add_argument("--oom-task", type=int, default=-1, metavar="I",
                   help="only task I runs --oom-test; the others train")
    p.add_argument("--start-at", type=float, default=0.0, metavar="EPOCH",
                   help="after the warm-up step, wait until this wall-clock time (seconds since "
                        "the epoch) so that copies started apart train over the same window")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even if CUDA exists")
    return p.parse_args()


def env_int(name, default):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        return int(v)
    except ValueError:
        sys.exit(f"train_shared: {name}={v!r} is not an integer")


def apply_memory_fraction(use_cuda):
    """Must run before the first CUDA tensor: the caching allocator reads the cap when it grows."""
    v = os.environ.get("MUSTER_GPU_MEM_FRACTION", "")
    if v == "" or not use_cuda:
        return None
    try:
        frac = float(v)
    except ValueError:
        sys.exit(f"train_shared: MUSTER_GPU_MEM_FRACTION={v!r} is not a number")
    if not 0.0 < frac <= 1.0:
        sys.exit(f"train_shared: MUSTER_GPU_MEM_FRACTION={v!r} is not in (0, 1]")
    torch.cuda.set_per_process_memory_fraction(frac, 0)
    return frac


def build(args, device, lr):
    layers = [torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU()]
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(args.hidden, args.classes))
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return model, opt


_FIXED = {}


def step(model, opt, args, batch, device):
    if args.fixed_batch and batch in _FIXED:
        x, y = _FIXED[batch]
    else:
        x = torch.randn(batch, args.features, device=device)
        y = torch.randint(0, args.classes, (batch,), device=device)
        if args.fixed_batch:
            _FIXED[batch] = (x, y)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    return loss


def warm_up(model, opt, args, device):
    """One step at batch 1, so that what lives across steps exists before `static` is read: the
    gradients, Adam's moments, and the cuBLAS workspace (which PyTorch takes from its caching
    allocator on the first matmul; left out of static, it would count as per-sample memory)."""
    step(model, opt, args, 1, device)
    opt.zero_grad(set_to_none=False)  # gradients stay allocated, as during training


def probe(args, task):
    path = os.environ.get("MUSTER_PROBE_FILE", "")
    if path == "":
        print("train_shared: --probe-batch needs MUSTER_PROBE_FILE "
              "(run it under `muster plan --probe -- ...`)", file=sys.stderr)
        return EXIT_USAGE
    if args.probe_batch < 1:
        print("train_shared: --probe-batch must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if not torch.cuda.is_available():
        print("train_shared: the probe measures GPU memory and this machine has no CUDA device; "
              "give muster plan --static and --per-sample instead", file=sys.stderr)
        return EXIT_NO_CUDA
    device = torch.device("cuda", 0)
    model, opt = build(args, device, 1e-3)
    warm_up(model, opt, args, device)
    torch.cuda.synchronize()
    static = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step(model, opt, args, args.probe_batch, device)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated(device)
    total = torch.cuda.get_device_properties(device).total_memory
    result = {"static_bytes": static, "peak_bytes": peak, "batch": args.probe_batch,
              "total_bytes": total}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)  # muster never reads a half-written file
    print(f"task={task} probe batch={args.probe_batch} static_bytes={static} peak_bytes={peak}",
          file=sys.stderr)
    return 0


def oom_test(task):
    if not torch.cuda.is_available():
        print("train_shared: --oom-test needs a CUDA device", file=sys.stderr)
        return EXIT_NO_CUDA
    oom = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    held = []
    while True:
        try:
            held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        except oom as e:
            if "out of memory" not in str(e).lower():
                raise
            break
    print(f"task={task} oom after {len(held)} GiB", flush=True)
    return 0


def train(args, task, count, use_cuda):
    lrs = [float(v) for v in args.lrs.split(",") if v.strip()]
    lr = lrs[task % len(lrs)]
    batch = env_int("MUSTER_BATCH_SIZE", args.batch_size)
    if batch < 1 or args.steps < 1:
        sys.exit("train_shared: batch size and --steps must be at least 1")
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    torch.manual_seed(1234 + task)
    model, opt = build(args, device, lr)
    print(f"task={task}/{count} device={device} batch={batch} lr={lr}", file=sys.stderr)
    step(model, opt, args, batch, device)  # warm-up, not timed
    if use_cuda:
        torch.cuda.synchronize()
    if args.start_at > time.time():
        time.sleep(args.start_at - time.time())
    w0 = time.time()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step(model, opt, args, batch, device)
    if use_cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"task={task} final loss={loss.item():.4f}", file=sys.stderr)
    print(f"task={task} steps={args.steps} steps_per_s={args.steps / dt:.2f} "
          f"t0={w0:.4f} t1={w0 + dt:.4f}", flush=True)
    return 0


def main():
    args = parse_args()
    task = env_int("MUSTER_TASK_INDEX", 0)
    count = env_int("MUSTER_TASK_COUNT", 1)
    use_cuda = torch.cuda.is_available() and not args.cpu
    if not args.probe_batch and os.environ.get("MUSTER_PROBE_FILE"):
        # `muster run --auto-batch` probes the unchanged command with MUSTER_PROBE_BATCH
        args.probe_batch = env_int("MUSTER_PROBE_BATCH", 0)
    if args.probe_batch:
        use_cuda = torch.cuda.is_available()
    apply_memory_fraction(use_cuda)  # before any CUDA tensor
    if args.probe_batch:
        return probe(args, task)
    if args.oom_test or args.oom_task == task:
        return oom_test(task)
    return train(args, task, count, use_cuda)


if __name__ == "__main__":
    sys.exit(main())
