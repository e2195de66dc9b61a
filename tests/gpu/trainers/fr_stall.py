"""Two ranks on one GPU, each with an NCCL group of its own (one GPU cannot hold two ranks of
one NCCL communicator), the default group gloo. Each step: an NCCL all_reduce on the rank's
own group (recorded by PyTorch's Flight Recorder), then a gloo all_reduce that keeps the two in
step. At STALL_STEP rank 1 sleeps inside load_batch() before its NCCL call: rank 0 enqueued one
collective more and waits in gloo. Knows nothing of muster."""
import os
import time

import torch
import torch.distributed as dist

STALL_STEP = int(os.environ.get("STALL_STEP", "5"))


def load_batch():
    time.sleep(3600)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    groups = [dist.new_group([0], backend="nccl"), dist.new_group([1], backend="nccl")]
    mine = groups[rank]
    x = torch.ones(1 << 20, device="cuda")
    t = torch.ones(4)
    for step in range(100):
        if rank == 1 and step == STALL_STEP:
            load_batch()
        dist.all_reduce(x, group=mine)
        torch.cuda.synchronize()
        dist.all_reduce(t)
        print("step %d rank %d" % (step, rank), flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
