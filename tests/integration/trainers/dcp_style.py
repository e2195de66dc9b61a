"""torch.distributed.checkpoint (DCP)-style training: a directory per checkpoint.

torch 1.13's torch.distributed.checkpoint is not importable here (Debian's 1.13 on Python 3.11
fails in its dataclasses), so this imitates FileSystemWriter's layout and order:

  * every rank creates `--ckpt_dir/step-<N>/` (mkdir exist_ok) and writes its own shard,
    `__<rank>_0.distcp` (torch.save of the tensors it owns: parameters and their Adam moments,
    round robin by parameter index), straight under its final name;
  * the ranks gather (the coordinator learns every rank's write results), then rank 0 writes
    `.metadata.tmp` (which key lives in which file, plus the step) and renames it to
    `.metadata`, as FileSystemWriter.finish does. A directory without `.metadata` is no
    checkpoint;
  * rank 0 then deletes the oldest step-* beyond `--keep_latest_k` (shutil.rmtree, as
    torchtitan's checkpoint manager does).

Resumes from $MUSTER_RESUME_FROM when set (what a DCP user adapting to muster writes):
`dcp.load(state, checkpoint_id=os.environ["MUSTER_RESUME_FROM"])`; every rank reads every shard.
Rank 0 prints `final sha256 <hex> step <n>` at the end.
"""
import argparse
import os
import pickle
import shutil
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_common as tc  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt_dir", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ckpt_every", type=int, default=10)
    p.add_argument("--keep_latest_k", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


def flat_state(model, opt, step):
    """The application state as DCP sees it: fully qualified names -> tensors."""
    names = [n for n, _ in model.named_parameters()]
    osd = opt.state_dict()
    st = {}
    for i, n in enumerate(names):
        st[f"model.{n}"] = model.state_dict()[n]
        for k, v in osd["state"].get(i, {}).items():
            st[f"optim.state.{n}.{k}"] = v
    st["train.step"] = torch.tensor(step)
    return st, names


def owner(key, names, world):
    """Round robin by parameter index (the shards of a sharded model)."""
    for i, n in enumerate(names):
        if key == f"model.{n}" or key.startswith(f"optim.state.{n}."):
            return i % world
    return 0


def save(ckpt_dir, step, model, opt, rank, world, keep_latest_k):
    path = os.path.join(ckpt_dir, f"step-{step}")
    os.makedirs(path, exist_ok=True)
    st, names = flat_state(model, opt, step)
    mine = {k: v for k, v in st.items() if owner(k, names, world) == rank}
    fname = f"__{rank}_0.distcp"
    torch.save(mine, os.path.join(path, fname))
    # write results to the coordinator (DCP: gather_object of the WriteResults)
    results = [None] * world
    dist.all_gather_object(results, {"file": fname, "keys": sorted(mine)})
    if rank == 0:
        metadata = {"storage_data": {k: r["file"] for r in results for k in r["keys"]},
                    "planner_data": {"step": step}}
        tmp = os.path.join(path, ".metadata.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(metadata, f)
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(path, ".metadata"))
        print(f"saved checkpoint {path}", flush=True)
        done = []
        for name in os.listdir(ckpt_dir):
            if name.startswith("step-") and os.path.isfile(os.path.join(ckpt_dir, name, ".metadata")):
                done.append((int(name[5:]), name))
        for _, name in sorted(done)[:-keep_latest_k]:
            shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)
    dist.barrier()


def load(path, model, opt):
    with open(os.path.join(path, ".metadata"), "rb") as f:
        metadata = pickle.load(f)
    st = {}
    for fname in sorted(set(metadata["storage_data"].values())):
        st.update(torch.load(os.path.join(path, fname)))
    missing = set(metadata["storage_data"]) - set(st)
    if missing:
        raise RuntimeError(f"{path}: keys missing from the shards: {sorted(missing)[:3]}")
    names = [n for n, _ in model.named_parameters()]
    model.load_state_dict({n: st[f"model.{n}"] for n in names}, strict=False)
    osd = opt.state_dict()
    for i, n in enumerate(names):
        osd["state"][i] = {k[len(f"optim.state.{n}."):]: v for k, v in st.items()
                           if k.startswith(f"optim.state.{n}.")}
    opt.load_state_dict(osd)
    return int(st["train.step"])


def main():
    args = parse_args()
    rank, world = tc.setup(args.seed)
    model = tc.TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    step = 0
    resume = os.environ.get("MUSTER_RESUME_FROM")
    if resume:
        step = load(resume, model, opt)
        print(f"rank {rank}: loaded {resume} at step {step}", flush=True)
    ddp = DDP(model)
    t0 = time.time()
    while step < args.steps:
        tc.reseed_step(args.seed, step, rank)
        x, y = tc.batch(args.seed, step, rank)
        loss = ddp(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: loss {loss.item():.4f} {(time.time() - t0) * 1000:.0f}ms", flush=True)
        if step % args.ckpt_every == 0:
            save(args.ckpt_dir, step, model, opt, rank, world, args.keep_latest_k)
    if rank == 0:
        print(f"final sha256 {tc.state_digest(model)} step {step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
