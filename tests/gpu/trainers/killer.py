"""Fault injector for tests/gpu/ckpt_trainers.sh: follows the combined output of one
`muster run` (its own lines and the worker's) and the checkpoint directory, and SIGKILLs the
worker at the planned moments. Not a trainer; it knows the trainers' output lines and muster's.

    killer.py --log FILE --dir CKPT_DIR --kind nanogpt|hf --plan after-record:N,during-write
              [--muster-pid PID] [--timeout S] [--result FILE]

Each item of the plan is one kill, in order, each in its own attempt (the next item waits for
a worker with a new pid):
  after-record:N   once muster has logged "checkpoint NAME recorded" for a checkpoint the
                   trainer finished saving, and the trainer then printed the loss of a step at
                   least N past that checkpoint's step: kill (mid-training). The attempt after
                   it must resume from that checkpoint.
  during-write     once a checkpoint newer than this attempt's first step is recorded (and no
                   finished save is still unrecorded), kill while the next one is being written:
                     nanogpt: ckpt.pt shorter than the finished size (torch.save truncates it
                              and writes it again in place), killed once it holds >= 25 % or
                              50 ms after the truncation was seen, whichever comes first;
                     hf:      checkpoint-N/ exists with files in it but no trainer_state.json.
                   A write that finishes before it is caught re-arms for the next one. The
                   attempt after it must resume from the last recorded checkpoint (for nanogpt:
                   the last good copy muster restores over the torn ckpt.pt).
Writes one line per kill to --result (and stdout):
    kill K: PLAN pid P at step S: expect resume from R (why)
or  kill K: PLAN not done: WHY
"""

import argparse
import os
import re
import signal
import sys
import time

START = re.compile(r"start: (?:iter|step) (\d+), pid (\d+)")
LOSS = {"nanogpt": re.compile(r"\biter (\d+): loss "), "hf": re.compile(r"\bstep (\d+) loss ")}
SAVED = {"nanogpt": re.compile(r"saved checkpoint at iter (\d+), (\d+) bytes"),
         "hf": re.compile(r"saved checkpoint-(\d+)\b")}
RECORDED = re.compile(r"checkpoint (\S+) recorded")
STEP_IN_RECORD = re.compile(r"checkpoint \S+ recorded[^(]*\(step (-?\d+)")
DONE = re.compile(r"done: (?:iter|step) \d+|muster: job \S+ failed after")


class Follow:
    """The state of the run, from the log lines read so far."""

    def __init__(self, kind):
        self.kind = kind
        self.pid = None  # the current worker
        self.start = None  # its first step
        self.step = None  # the last step it printed a loss for
        self.saved = None  # (step, bytes) of its last finished save
        self.full_size = None  # the size of a finished ckpt.pt (nanogpt)
        self.recorded_step = None  # step of the newest checkpoint muster recorded
        self.recorded_any = False
        self.finished = False

    def line(self, l):
        m = START.search(l)
        if m:
            self.start, self.pid, self.step, self.saved = int(m.group(1)), int(m.group(2)), None, None
            return
        m = LOSS[self.kind].search(l)
        if m:
            self.step = int(m.group(1))
            return
        m = SAVED[self.kind].search(l)
        if m:
            self.saved = (int(m.group(1)), int(m.group(2)) if self.kind == "nanogpt" else 0)
            if self.kind == "nanogpt":
                self.full_size = self.saved[1]
            return
        m = RECORDED.search(l)
        if m and "muster" in l and " at start" not in l:
            name = m.group(1)
            if self.kind == "hf":
                n = re.fullmatch(r"checkpoint-(\d+)", name)
                if n:
                    self.recorded_step = max(self.recorded_step or 0, int(n.group(1)))
                    self.recorded_any = True
            elif name == "ckpt.pt" and self.saved is not None:
                # the version recorded is the one the trainer finished last (the settle time
                # passes between the save and this line)
                self.recorded_step = self.saved[0]
                self.recorded_any = True
            return
        if DONE.search(l):
            self.finished = True


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--kind", choices=("nanogpt", "hf"), required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--muster-pid", type=int, default=None, help="stop when this process is gone")
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--result", default=None)
    a = p.parse_args()
    plan = a.plan.split(",")
    out = open(a.result, "w") if a.result else None

    def report(s):
        print(s, flush=True)
        if out:
            out.write(s + "\n")
            out.flush()

    f = Follow(a.kind)
    deadline = time.time() + a.timeout
    while not os.path.exists(a.log) and time.time() < deadline:
        time.sleep(0.05)
    log = open(a.log, errors="replace")
    buf = ""

    def pump():
        nonlocal buf
        chunk = log.read()
        if chunk:
            buf += chunk
            *lines, buf = buf.split("\n")
            for l in lines:
                f.line(l)

    def kill(k, item, why, expect):
        try:
            os.kill(f.pid, signal.SIGKILL)
        except ProcessLookupError:
            report(f"kill {k}: {item} not done: worker pid {f.pid} already gone")
            return False
        report(f"kill {k}: {item} pid {f.pid} at step {f.step}: expect resume from {expect} ({why})")
        return True

    ckpt = os.path.join(a.dir, "ckpt.pt")
    killed_pid = None  # the worker the previous item killed: this item waits for another
    for k, item in enumerate(plan, 1):
        last_pid, done = killed_pid, False
        while not done:
            pump()
            if time.time() > deadline:
                report(f"kill {k}: {item} not done: timed out (worker step {f.step}, recorded {f.recorded_step})")
                return 1
            if f.finished or (a.muster_pid and not alive(a.muster_pid)):
                pump()
                report(f"kill {k}: {item} not done: the run ended first (worker step {f.step}, "
                       f"recorded {f.recorded_step})")
                return 1
            if f.pid is None or f.pid == last_pid or f.step is None:
                time.sleep(0.01)
                continue
            if item.startswith("after-record"):
                n = int(item.split(":")[1]) if ":" in item else 10
                ok = (f.recorded_any and f.recorded_step is not None and f.recorded_step > 0
                      and f.step >= f.recorded_step + n
                      and (f.saved is None or f.saved[0] <= f.recorded_step))
                if ok:
                    done = kill(k, item, f"checkpoint of step {f.recorded_step} recorded", f.recorded_step)
                    killed_pid = f.pid
                else:
                    time.sleep(0.005)
                continue
            if item == "during-write":
                # a checkpoint of this attempt recorded to fall back on, no finished save left
                # unrecorded
                if (not f.recorded_any or (f.recorded_step or 0) <= f.start
                        or (f.saved is not None and f.saved[0] > f.recorded_step)):
                    time.sleep(0.005)
                    continue
                expect = f.recorded_step
                if a.kind == "nanogpt":
                    if not f.full_size:
                        time.sleep(0.005)
                        continue
                    try:
                        size = os.stat(ckpt).st_size
                    except FileNotFoundError:
                        size = 0
                    if size < f.full_size:
                        # torch.save truncated the file: a write is on. Kill once it holds a
                        # quarter, or 50 ms after the truncation was seen (a writer that
                        # buffers: the file is torn all the same), unless it completes first.
                        t_end = time.time() + 0.05
                        while True:
                            try:
                                size = os.stat(ckpt).st_size
                            except FileNotFoundError:
                                size = 0
                            if size >= f.full_size:
                                break
                            if size >= f.full_size // 4 or time.time() >= t_end:
                                done = kill(k, item, f"ckpt.pt at {size} of {f.full_size} bytes; "
                                                     f"last recorded step {expect}", expect)
                                break
                        if not done:
                            pump()  # the write finished first: wait for the next one
                    else:
                        time.sleep(0.0005)
                else:
                    newer = []
                    for name in os.listdir(a.dir):
                        m = re.fullmatch(r"checkpoint-(\d+)", name)
                        if m and int(m.group(1)) > (expect or 0):
                            newer.append((int(m.group(1)), name))
                    for step, name in sorted(newer):
                        d = os.path.join(a.dir, name)
                        try:
                            files = os.listdir(d)
                        except FileNotFoundError:
                            continue
                        if files and "trainer_state.json" not in files:
                            done = kill(k, item, f"{name}/ holds {', '.join(sorted(files))} without "
                                                 f"trainer_state.json; last recorded step {expect}", expect)
                            break
                    if not done:
                        time.sleep(0.0005)
                if done:
                    killed_pid = f.pid
                continue
            report(f"kill {k}: unknown plan item {item!r}")
            return 2
        # the next item waits for the restarted worker
        while (f.pid == killed_pid and time.time() < deadline and not f.finished
               and not (a.muster_pid and not alive(a.muster_pid))):
            pump()
            time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
