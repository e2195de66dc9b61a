#!/usr/bin/env python3
"""Worker for test_torchrun_compat.sh, in the role of pytorch's
bin/test_script_init_method.py: init_process_group("gloo", init_method=--init-method) with
rank and world size from RANK/WORLD_SIZE, then an all_reduce of a one-hot vector whose sum
must be the world size. Prints "Done rank R/W" on success."""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init-method", "--init_method", required=True)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=args.init_method, rank=rank, world_size=world)
    t = torch.nn.functional.one_hot(torch.tensor(dist.get_rank()), num_classes=world)
    dist.all_reduce(t)
    got = int(torch.sum(t).item())
    if got != world or dist.get_world_size() != world:
        raise RuntimeError(f"wrong world size derived: expected {world}, got {got}")
    print(f"Done rank {dist.get_rank()}/{dist.get_world_size()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
