"""A sharded checkpoint written by every rank on nodes without a shared file system (the way
FSDP with torch.distributed.checkpoint writes one): muster's "every node's checkpoint".

  * every rank trains the same small model on the same global batch (no gradient all-reduce),
    so its weights depend on (seed, step) only, never on the world size: a run that resumes on
    fewer nodes ends bit-identical to one that never stopped;
  * every `--ckpt_every` steps each rank writes its slice of the flattened state (parameters and
    Adam's moments) as `--ckpt_dir/step-<N>/__<rank>_0.distcp` (torch.save) into its own
    node's directory; after a barrier (every rank wrote) rank 0 writes `.metadata.tmp` and
    renames it to `.metadata`, as DCP's FileSystemWriter does. So only rank 0's node holds a
    directory with `.metadata`; every other node holds its own ranks' shards only;
  * resuming, each rank reads the shards its node holds ($MUSTER_RESUME_PARTS: its own part
    and the copies of other nodes' parts muster kept there; else $MUSTER_RESUME_FROM), the
    ranks exchange them (all_gather_object) and rebuild the state from the slices of the world
    that wrote it, whatever the world size is now.

`--hold_at S --hold_file F`: after saving step S every rank waits while F exists (a test's
pause). Rank 0 prints `resumed from step N: K of W shards on this node` and, at the end,
`final sha256 <hex> step <n>`.
"""
import argparse
import glob
import hashlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt_dir", required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--ckpt_every", type=int, default=5)
    p.add_argument("--step_sleep", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--hold_at", type=int, default=-1,
                   help="after saving this step, wait while --hold_file exists (tests)")
    p.add_argument("--hold_file", default="")
    return p.parse_args()


def make(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                          nn.Linear(256, 1))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def tensors(model, opt):
    """Every tensor of the training state, in a fixed order (Adam's moments created if absent)."""
    out = []
    for p in model.parameters():
        st = opt.state.setdefault(p, {})
        st.setdefault("step", torch.tensor(0.0))
        st.setdefault("exp_avg", torch.zeros_like(p))
        st.setdefault("exp_avg_sq", torch.zeros_like(p))
        out += [p.data, st["exp_avg"], st["exp_avg_sq"], st["step"].reshape(1)]
    return out


def flat(model, opt):
    return torch.cat([t.reshape(-1).double() for t in tensors(model, opt)])


def unflat(model, opt, v):
    off = 0
    for p in model.parameters():
        st = opt.state.setdefault(p, {})
        for key in ("p", "exp_avg", "exp_avg_sq", "step"):
            t = p.data if key == "p" else st.setdefault(key, torch.zeros_like(p) if key != "step"
                                                         else torch.tensor(0.0))
            n = t.numel()
            t.copy_(v[off:off + n].reshape(t.shape).to(t.dtype))
            off += n
    assert off == v.numel(), (off, v.numel())


def bounds(n, world, rank):
    per = (n + world - 1) // world
    return min(rank * per, n), min((rank + 1) * per, n)


def save(args, step, model, opt, rank, world):
    path = os.path.join(args.ckpt_dir, f"step-{step}")
    os.makedirs(path, exist_ok=True)
    v = flat(model, opt)
    lo, hi = bounds(v.numel(), world, rank)
    torch.save({"step": step, "world": world, "rank": rank, "lo": lo, "hi": hi,
                "numel": v.numel(), "data": v[lo:hi].clone()},
               os.path.join(path, f"__{rank}_0.distcp"))
    dist.barrier()  # every shard written (DCP: the coordinator gathers the write results)
    if rank == 0:
        tmp = os.path.join(path, ".metadata.tmp")
        with open(tmp, "wb") as f:
            torch.save({"step": step, "world": world, "numel": v.numel()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(path, ".metadata"))
    dist.barrier()


def load(model, opt, rank, world):
    dirs = [d for d in os.environ.get("MUSTER_RESUME_PARTS", "").split(":") if d]
    if not dirs and os.environ.get("MUSTER_RESUME_FROM"):
        dirs = [os.environ["MUSTER_RESUME_FROM"]]
    mine = {}
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, "__*_0.distcp"))):
            sh = torch.load(f)
            mine[sh["rank"]] = sh
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    shards = {}
    for got in everyone:
        shards.update(got)
    if not shards:
        raise SystemExit(f"rank {rank}: no shard of the checkpoint anywhere: {dirs}")
    first = next(iter(shards.values()))
    old_world, step, numel = first["world"], first["step"], first["numel"]
    missing = [r for r in range(old_world) if r not in shards or shards[r]["step"] != step]
    if missing:
        raise SystemExit(f"rank {rank}: shards of ranks {missing} of step {step} are nowhere")
    v = torch.empty(numel, dtype=torch.float64)
    for r in range(old_world):
        v[shards[r]["lo"]:shards[r]["hi"]] = shards[r]["data"]
    unflat(model, opt, v)
    return step, len(mine), old_world


def main():
    args = parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, opt = make(args.seed)
    step = 0
    if os.environ.get("MUSTER_RESUME_FROM"):
        step, here, old_world = load(model, opt, rank, world)
        print(f"rank {rank}: resumed from step {step}: {here} of {old_world} shards on this node",
              flush=True)
    while step < args.steps:
        g = torch.Generator().manual_seed(args.seed * 7919 + step)
        x = torch.randn(64, 32, generator=g)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if step % args.ckpt_every == 0:
            save(args, step, model, opt, rank, world)
        while step == args.hold_at and args.hold_file and os.path.exists(args.hold_file):
            time.sleep(0.1)
    if rank == 0:
        digest = hashlib.sha256(flat(model, opt).numpy().tobytes()).hexdigest()
        print(f"final sha256 {digest} step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
