"""A gloo job that goes wrong the way real jobs do, for the evidence tests.

EVIDENCE_MODE (on the node whose agent has EVIDENCE_CULPRIT=LOCAL_RANK set, attempt 0 only):
  sleep     that rank sleeps inside load_batch() at step 3 while the others wait in all_reduce
  mismatch  that rank calls broadcast at step 3 where the others call all_reduce
  loader    that rank's DataLoader worker deadlocks (a lock nobody releases) at step 3
  crash     that rank raises ValueError at step 3 while the others wait in all_reduce
  none      nothing goes wrong: the job runs STEPS steps (muster debug looks at it meanwhile)
TOKEN_OUT: rank 0 writes its MUSTER_TOKEN (the worker credential) there, for hostile tests.
Each step prints "step N rank R"; the job ends after STEPS steps."""
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "8"))
PAUSE = float(os.environ.get("PAUSE", "0.2"))


def load_batch():
    time.sleep(3600)


class Data(torch.utils.data.Dataset):
    def __init__(self, stuck_at):
        self.stuck_at = stuck_at
        self.lock = threading.Lock()

    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        if i == self.stuck_at:
            self.lock.acquire()
            self.lock.acquire()  # a deadlock: the lock is ours already
        return torch.ones(4)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mode = os.environ.get("EVIDENCE_MODE", "none")
    culprit = os.environ.get("EVIDENCE_CULPRIT", "")
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    me = first and culprit != "" and int(culprit) == int(os.environ["LOCAL_RANK"])
    stuck = 3 if me and mode == "loader" else -1
    loader = torch.utils.data.DataLoader(Data(stuck), batch_size=None, num_workers=1 if me else 0)
    batches = iter(loader)
    if rank == 0 and os.environ.get("TOKEN_OUT"):
        with open(os.environ["TOKEN_OUT"] + ".tmp", "w") as f:
            f.write(os.environ.get("MUSTER_TOKEN", ""))
        os.rename(os.environ["TOKEN_OUT"] + ".tmp", os.environ["TOKEN_OUT"])
    t = torch.ones(4)
    for step in range(STEPS):
        if me and step == 3 and mode == "sleep":
            load_batch()
        if me and step == 3 and mode == "crash":
            raise ValueError("bad batch at step 3")
        next(batches)
        if me and step == 3 and mode == "mismatch":
            dist.broadcast(t, 0)  # the others call all_reduce
        else:
            dist.all_reduce(t)
        print("step %d rank %d" % (step, rank), flush=True)
        time.sleep(PAUSE)
    dist.barrier()
    print("done rank %d" % rank, flush=True)


if __name__ == "__main__":
    sys.exit(main())
