#!/usr/bin/env python3
"""PyTorch counterpart of `muster-preflight allreduce`'s bandwidth sweep, for comparing the two.

Times in-place dist.all_reduce (NCCL, float32, sum) on the same sizes: --min-bytes to
--max-bytes by factor 4, the maximum always last (default 1, 4, 16, 64, 256 MiB); per size
--warmup untimed all-reduces, then --iters timed ones between torch.cuda.synchronize() calls
around a time.perf_counter() loop (time = elapsed / iters). algbw = bytes / 1e9 / s and
busbw = algbw * 2(n-1)/n, as nccl-tests and muster-preflight compute them. Device = LOCAL_RANK.
NCCL_NVLS_ENABLE defaults to 0 (NVLink SHARP off on shared hosts), like muster-preflight.

Run under torchrun or muster, e.g.
    muster run --standalone --nproc-per-node 2 bench/gpu/torch_allreduce.py --out ar.json
Rank 0 prints one line per size and writes {"sizes": [{"bytes", "time_us", "algbw", "busbw"}]}
(plus the run's parameters) to --out.
"""
import argparse
import json
import os
import re
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before torch initialises NCCL

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

_UNITS = {"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20,
          "g": 30, "gb": 30, "gib": 30}


def parse_size(text):
    """Bytes, or with K/M/G or KiB/MiB/GiB (binary), as muster-preflight's --max-bytes."""
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    return int(m.group(1)) << _UNITS[m.group(2).lower()]


def sweep(lo, hi, factor=4):
    """lo, lo*factor, ... while <= hi, then hi itself; each rounded down to whole floats."""
    sizes, s = [], lo
    while s < hi:
        sizes.append(s)
        s *= factor
    sizes.append(hi)
    return [x // 4 * 4 for x in sizes]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-bytes", type=parse_size, default=1 << 20)
    ap.add_argument("--max-bytes", type=parse_size, default=256 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", help="JSON file written by rank 0")
    args = ap.parse_args()
    if args.min_bytes < 4 or args.min_bytes > args.max_bytes or args.iters < 1 or args.warmup < 0:
        ap.error("need 4 <= --min-bytes <= --max-bytes, --iters >= 1, --warmup >= 0")

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()

    buf = torch.zeros(args.max_bytes // 4, dtype=torch.float32, device=device)
    results = []
    if rank == 0:
        print(f"# {world} ranks, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"torch {torch.__version__}, {args.warmup} warm-up + {args.iters} timed iterations")
        print(f"# {'bytes':>12} {'time_us':>12} {'algbw':>9} {'busbw':>9}  (GB/s)")
    for nbytes in sweep(args.min_bytes, args.max_bytes):
        t = buf[: nbytes // 4]
        for _ in range(args.warmup):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        sec = (time.perf_counter() - t0) / args.iters
        algbw = nbytes / 1e9 / sec
        busbw = algbw * 2 * (world - 1) / world  # 0 for one rank, as nccl-tests
        results.append({"bytes": nbytes, "time_us": sec * 1e6, "algbw": algbw, "busbw": busbw})
        if rank == 0:
            print(f"  {nbytes:>12} {sec * 1e6:>12.1f} {algbw:>9.2f} {busbw:>9.2f}", flush=True)

    if rank == 0 and args.out:
        report = {"nranks": world, "iters": args.iters, "warmup": args.warmup,
                  "torch": torch.__version__,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "sizes": results}
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
