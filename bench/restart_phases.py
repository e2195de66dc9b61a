"""The worker of bench/restart_phases.sh: a 2-rank CPU (gloo) trainer that checkpoints every
step. Each event goes as one line "EVENT RANK ATTEMPT WALL_NS [PID]" to EVENTS (O_APPEND, one
write per line), so muster and torchrun are timed by the same clock and the same script:

  start    the interpreter runs (before `import torch`)
  imported `import torch` done
  init     init_process_group (gloo) done
  loaded   the checkpoint loaded (or none found)
  step N   step N done (rank 0 saved ckpt_N.pt: temporary name, then rename)
  term     SIGTERM arrived (the launcher is stopping the attempt)
  exit     exiting (on that SIGTERM, or on the error of a collective whose peer died)

usage: python3 restart_phases.py EVENTS CKPT_DIR STEPS [STEP_S]
It resumes from MUSTER_RESUME_FROM when set, else from the newest ckpt_N.pt in CKPT_DIR."""
import atexit
import os
import signal
import sys
import time

events, ckdir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
step_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def ev(what):
    os.write(fd, ("%s %d %d %d %d\n" % (what, rank, attempt, time.time_ns(), os.getpid())).encode())


def on_term(signum, frame):
    ev("term")
    ev("exit")
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
atexit.register(ev, "exit")  # a gloo error's exit too: torchrun may not have stopped us yet
ev("start")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ev("imported")
dist.init_process_group("gloo")
ev("init")


def newest():
    best, path = -1, None
    for name in os.listdir(ckdir):
        if name.startswith("ckpt_") and name.endswith(".pt"):
            try:
                n = int(name[5:-3])
            except ValueError:
                continue
            if n > best:
                best, path = n, os.path.join(ckdir, name)
    return path


torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start = 0
path = os.environ.get("MUSTER_RESUME_FROM") or newest()
if path:
    st = torch.load(path)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    start = st["step"]
ev("loaded")
for step in range(start + 1, steps + 1):
    x = torch.randn(64, 256)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    time.sleep(step_s)
    if rank == 0:
        tmp = os.path.join(ckdir, ".ckpt_%d.tmp" % step)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        os.rename(tmp, os.path.join(ckdir, "ckpt_%d.pt" % step))
    dist.barrier()
    ev("step %d" % step)
dist.destroy_process_group()
