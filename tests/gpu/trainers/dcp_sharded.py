"""Real torch.distributed.checkpoint on nodes without a shared file system (torch >= 2.2, CPU,
gloo): what muster's "every node's checkpoint" must survive.

Every rank trains the same small model on the same global batch (no gradient all-reduce), so
the weights depend on (seed, step) only, never on the world size. Every --ckpt_every steps:
    dcp.save({"model": ..., "optim": ..., "step": ...},
             checkpoint_id=$MUSTER_CHECKPOINT_DIR/step-N)
on every rank, each into its own node's directory: DCP spreads the (replicated) tensors over the
ranks' __<rank>_0.distcp files and the coordinator (rank 0) writes .metadata, on its node only.

Resuming: the ranks gather the bytes of the files their nodes hold of the checkpoint
($MUSTER_RESUME_PARTS: the node's own part and the copies muster keeps of other nodes' parts),
each writes the union into a private directory and loads it with dcp.load, unchanged. Rank 0
prints "resumed from step N: K of F files on this node" and, at the end,
"final sha256 <hex> step <n>".
"""
import argparse
import hashlib
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--ckpt_every", type=int, default=5)
    p.add_argument("--step_sleep", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=11)
    return p.parse_args()


def make(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                          nn.Linear(256, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # Adam's state exists before the first step, so a fresh state dict can be loaded into
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        fresh = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                              nn.Linear(256, 1))
        for p, q in zip(model.parameters(), fresh.parameters()):
            p.copy_(q)
    for st in opt.state.values():
        st["step"].zero_()
        st["exp_avg"].zero_()
        st["exp_avg_sq"].zero_()
    return model, opt


def state_of(model, opt, step):
    return {"model": model.state_dict(), "optim": opt.state_dict(), "step": torch.tensor(step)}


def load(model, opt, rank, world):
    dirs = [d for d in os.environ.get("MUSTER_RESUME_PARTS", "").split(":") if d]
    if not dirs:
        dirs = [os.environ["MUSTER_RESUME_FROM"]]
    mine = {}
    for d in dirs:
        if not os.path.isdir(d):  # a node that holds none of it: the others send theirs
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(".distcp") or f == ".metadata":
                with open(os.path.join(d, f), "rb") as fh:
                    mine[f] = fh.read()
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    files = {}
    for got in everyone:
        files.update(got)
    here = tempfile.mkdtemp(prefix=f"dcp-rank{rank}-")
    for f, data in files.items():
        with open(os.path.join(here, f), "wb") as fh:
            fh.write(data)
    st = state_of(model, opt, 0)
    dcp.load(st, checkpoint_id=here)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["optim"])
    return int(st["step"]), len(mine), len(files)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, opt = make(args.seed)
    step = 0
    if os.environ.get("MUSTER_RESUME_FROM"):
        step, here, total = load(model, opt, rank, world)
        print(f"rank {rank}: resumed from step {step}: {here} of {total} files on this node",
              flush=True)
    ckdir = os.environ["MUSTER_CHECKPOINT_DIR"]
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
            dcp.save(state_of(model, opt, step), checkpoint_id=os.path.join(ckdir, f"step-{step}"))
    if rank == 0:
        h = hashlib.sha256()
        for t in list(model.state_dict().values()):
            h.update(t.detach().double().numpy().tobytes())
        print(f"final sha256 {h.hexdigest()} step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
