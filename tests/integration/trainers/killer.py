#!/usr/bin/env python3
"""The fault injector of the test_ckpt_trainers_*.sh tests: SIGKILLs workers of a running
`muster run` at random moments, and on purpose in the middle of checkpoint writes.

It finds the job's workers in /proc: processes whose environment holds MUSTER_IT_MARK=<mark>
(lib.sh's marker, inherited by the workers) and whose command line names --script; their RANK
and TORCHELASTIC_RESTART_COUNT come from the same environment. Each kill targets the workers of
one attempt (restart count); after a kill it waits for the next attempt's workers.

Two kinds of kill, chosen by a seeded RNG (--seed: the same seed makes the same choices; the
moments still depend on timing):
  random     after a delay drawn from --delay LO:HI seconds from the attempt's start (importing
             torch, loading a checkpoint, training, or writing one: wherever it lands), rank 0
             with probability 0.7, else rank 1;
  mid-write  poll the checkpoint directory every millisecond for a write in progress (--style:
             what a write looks like), let 0-2 writes complete first, then kill the writing
             rank after a short random delay inside the write. Afterwards, once the process is
             gone, look again: the kill counts as mid-write only if it left the checkpoint
             incomplete (a torch.save zip without its end record, a checkpoint directory without
             its marker file).

A mid-write kill that truncated a file the killer had seen complete in that attempt (a rewrite
in place: nanoGPT's ckpt.pt, Lightning's last.ckpt) says "it overwrote a complete one": muster
could record that version, so the restart must put it back. --overwrite-min asks for that many.

With --progress (muster's stdout) and --total, past --late of the steps random kills land early
in an attempt and mid-write kills take the first write, so the job cannot finish first.

Until --kills kills are done, --mid-write-min of them left a checkpoint incomplete and
--overwrite-min cut a rewrite short (at most --max-kills in all). Then it stops and prints
`killer: N kills, M mid-write (R others), O cut a rewrite of a complete checkpoint short`; one
line per kill before that.
"""
import argparse
import os
import random
import re
import signal
import sys
import time

EOCD = b"PK\x05\x06"


def log(msg):
    print(f"killer: {msg}", flush=True)


def zip_complete(path):
    """A torch.save file (a zip) is complete when its end-of-central-directory record is there:
    torch writes no zip comment, so it is the last 22 bytes (zip64 adds records before it)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size < 22:
                return False
            f.seek(size - 22)
            return f.read(4) == EOCD
    except OSError:
        return False


def stat_sig(path):
    try:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


class FileWatch:
    """Checkpoint files written in place (nanoGPT's ckpt.pt; Lightning's *.ckpt when $TMPDIR is
    on another file system): a write is in progress when a file's inode/size/mtime changed since
    the last poll and it is not a complete zip yet."""

    def __init__(self, d, pattern):
        self.d, self.re = d, re.compile(pattern)
        self.last = {}
        self.complete_seen = set()  # names seen complete in this attempt (or at its start)
        self.poll()

    def names(self):
        try:
            return [n for n in os.listdir(self.d) if self.re.fullmatch(n)]
        except OSError:
            return []

    def poll(self):
        """Returns ('writing', name) or ('done', name) for a change seen, else None."""
        ev = None
        for n in self.names():
            p = os.path.join(self.d, n)
            s = stat_sig(p)
            if s is None or s == self.last.get(n):
                continue
            self.last[n] = s
            ev = ("done", n) if zip_complete(p) else ("writing", n)
            if ev[0] == "done":
                self.complete_seen.add(n)
            if ev[0] == "writing":
                return ev
        return ev

    def incomplete(self, name):
        p = os.path.join(self.d, name)
        if not os.path.exists(p):
            return False, "gone"
        ok = zip_complete(p)
        desc = f"{name} {os.path.getsize(p)} bytes, {'complete' if ok else 'no zip end record'}"
        if not ok and name in self.complete_seen:
            # what a restart must repair: muster could record the complete one it overwrote
            desc += "; it overwrote a complete one"
        return (not ok), desc


class DirWatch:
    """Directory checkpoints (HF's checkpoint-N/, DCP's step-N/): a write is in progress in a
    directory without its marker file (trainer_state.json, .metadata) that just appeared or
    gained an entry (its mtime changed and it holds no fewer entries: shutil.rmtree of an old one
    is no write). One stat per directory and poll: each new file of a write is seen at once."""

    def __init__(self, d, prefix, marker):
        self.d, self.prefix, self.marker = d, prefix, marker
        self.last = {}
        self.complete_seen = set()  # a directory is never rewritten in place
        self.poll()

    def dirs(self):
        try:
            return [n for n in os.listdir(self.d)
                    if n.startswith(self.prefix) and n[len(self.prefix):].isdigit()]
        except OSError:
            return []

    def poll(self):
        ev = None
        for n in self.dirs():
            p = os.path.join(self.d, n)
            try:
                mt = os.stat(p).st_mtime_ns
            except OSError:
                continue
            old = self.last.get(n)
            if old is not None and old[0] == mt:
                continue
            try:
                count = len(os.listdir(p))
            except OSError:
                continue
            done = os.path.exists(os.path.join(p, self.marker))
            self.last[n] = (mt, count)
            if done:
                ev = ev or ("done", n)
            elif old is None or count >= old[1]:
                return ("writing", n)
        return ev

    def incomplete(self, name):
        p = os.path.join(self.d, name)
        if not os.path.isdir(p):
            return False, "gone"
        if os.path.exists(os.path.join(p, self.marker)):
            return False, f"{name}/ complete"
        return True, f"{name}/ without {self.marker} ({len(os.listdir(p))} files)"


STYLES = {
    "nanogpt": lambda d: FileWatch(d, r"ckpt\.pt"),
    "lightning": lambda d: FileWatch(d, r".*\.ckpt"),
    "hf": lambda d: DirWatch(d, "checkpoint-", "trainer_state.json"),
    "dcp": lambda d: DirWatch(d, "step-", ".metadata"),
}


def read_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        env[k] = v
    return env


def workers(mark, script):
    """{restart_count: {rank: pid}} of the live workers of the job. A matching process whose
    parent matches too (a fork of the worker: a shell's subshell, a data loader) is left out."""
    found = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" or script not in cmd:
            continue
        env = read_environ(p)
        if not env or env.get(b"MUSTER_IT_MARK") != mark or b"RANK" not in env:
            continue
        rc = int(env.get(b"TORCHELASTIC_RESTART_COUNT", b"0"))
        found[int(p)] = (int(fields[1]), rc, int(env[b"RANK"]))
    out = {}
    for pid, (ppid, rc, rank) in found.items():
        if ppid not in found:
            out.setdefault(rc, {})[rank] = pid
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Progress:
    """The last step number in rank 0's lines of muster's stdout (`[rank0]: ... step 120` or
    `iter 120`), read incrementally."""

    RE = re.compile(rb"^\[rank0\]: .*?\b(?:step|iter)\W{1,4}(\d+)", re.M)

    def __init__(self, path):
        self.path, self.off, self.step, self.tail = path, 0, 0, b""

    def last(self):
        if not self.path:
            return 0
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except OSError:
            return self.step
        self.off += len(data)
        data = self.tail + data
        cut = data.rfind(b"\n") + 1
        self.tail = data[cut:]
        for m in self.RE.finditer(data[:cut]):
            self.step = int(m.group(1))
        return self.step


def past_late(prog, a):
    return a.total > 0 and prog.last() >= a.late * a.total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--style", required=True, choices=sorted(STYLES))
    ap.add_argument("--dir", required=True, help="the checkpoint directory")
    ap.add_argument("--script", required=True, help="the trainer's file name")
    ap.add_argument("--mark-file", required=True)
    ap.add_argument("--muster-pid", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--mid-write-min", type=int, default=5)
    ap.add_argument("--overwrite-min", type=int, default=0,
                    help="of the mid-write kills, at least this many must cut short the rewrite "
                         "of a file seen complete before (nanoGPT's ckpt.pt, Lightning's "
                         "last.ckpt): what a restart must repair")
    ap.add_argument("--max-kills", type=int, default=26)
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--delay", default="0.3:3.5", help="LO:HI seconds for random kills")
    ap.add_argument("--p-mid", type=float, default=0.45, help="chance that a kill is a mid-write one")
    ap.add_argument("--writer-ranks", default="0", help="ranks that write checkpoints (comma list)")
    ap.add_argument("--write-delay-ms", type=float, default=10.0,
                    help="a mid-write kill lands 0..this many ms after the write is seen")
    ap.add_argument("--mid-write-timeout", type=float, default=10.0,
                    help="seconds to wait for a write to kill in, then a random kill")
    ap.add_argument("--progress", help="muster's stdout: rank 0's progress lines")
    ap.add_argument("--total", type=int, default=0, help="the job's last step")
    ap.add_argument("--late", type=float, default=0.6,
                    help="past this fraction of --total, random kills land early in an attempt "
                         "(0.2-1.0 s: starting up) and mid-write kills take the first write, so "
                         "the job cannot finish before the kills are done")
    ap.add_argument("--attempt-timeout", type=float, default=60.0)
    a = ap.parse_args()
    with open(a.mark_file, "rb") as f:
        mark = f.read().strip()
    script = os.path.basename(a.script).encode()
    lo, hi = (float(x) for x in a.delay.split(":"))
    writers = [int(r) for r in a.writer_ranks.split(",")]
    rng = random.Random(a.seed)
    log(f"seed {a.seed}, style {a.style}, {a.kills} kills, at least {a.mid_write_min} mid-write")

    prog = Progress(a.progress)
    kills = mid = 0
    next_attempt = 0
    overwrites = 0
    while (kills < a.kills or mid < a.mid_write_min or overwrites < a.overwrite_min) \
            and kills < a.max_kills:
        # the workers of the next attempt (all ranks up), or muster gone
        deadline = time.monotonic() + a.attempt_timeout
        ws = None
        while time.monotonic() < deadline:
            if not alive(a.muster_pid):
                log(f"muster exited; stopping after {kills} kills")
                break
            found = workers(mark, script)
            ready = sorted(rc for rc, rk in found.items() if rc >= next_attempt and len(rk) == a.nranks)
            if ready:
                attempt = ready[0]
                ws = found[attempt]
                break
            time.sleep(0.02)
        if ws is None:
            if alive(a.muster_pid):
                log(f"no workers of attempt {next_attempt} within {a.attempt_timeout} s")
            break
        t_start = time.monotonic()
        need_mid = max(a.mid_write_min - mid, a.overwrite_min - overwrites)
        want_over = overwrites < a.overwrite_min and rng.random() < 0.6
        left = a.max_kills - kills
        step = prog.last()
        late = a.total > 0 and step >= a.late * a.total  # also re-checked while waiting
        # behind on mid-write kills past half the quota: only those now, or the job may finish
        # (it ran out of steps) before enough writes were hit
        midwrite = need_mid > 0 and (rng.random() < a.p_mid or left <= need_mid + 3
                                     or kills >= a.kills // 2)
        if midwrite:
            skip = rng.choice([0, 0, 0, 1, 2])
            in_ms = rng.uniform(0, a.write_delay_ms)
            target = rng.choice(writers)
            if late:
                skip = 0
        else:
            delay = rng.uniform(lo, hi)
            target = 0 if rng.random() < 0.7 else 1
            if late:
                delay = rng.uniform(0.2, 1.0)
        pid = ws[target]
        what = None
        if midwrite:
            watch = STYLES[a.style](a.dir)
            skipping = False
            while time.monotonic() - t_start < a.mid_write_timeout:
                if not all(alive(p) for p in ws.values()):
                    break
                ev = watch.poll()
                if skip > 0 and not late and past_late(prog, a):
                    late, skip, skipping = True, 0, False  # as random kills: take the next write
                if ev and want_over and ev[1] not in watch.complete_seen:
                    ev = None  # a new name: not a rewrite in place
                if ev and ev[0] == "writing" and not skipping:
                    if skip <= 0:
                        what = ev[1]
                        break
                    skipping = True  # let this one complete
                elif ev and ev[0] == "done" and skipping:
                    skipping = False
                    skip -= 1
                time.sleep(0.001)
            if what is None and not all(alive(p) for p in ws.values()):
                log(f"attempt {attempt}: a worker died before a checkpoint write was seen")
                next_attempt = attempt + 1
                continue
            if what is None:
                log(f"attempt {attempt}: no checkpoint write seen within {a.mid_write_timeout} s: "
                    f"a random kill instead")
                midwrite = False
            else:
                time.sleep(in_ms / 1000.0)
        else:
            polls = 0
            while time.monotonic() - t_start < delay:
                if not all(alive(p) for p in ws.values()):
                    break
                polls += 1
                if not late and polls % 10 == 0 and past_late(prog, a):
                    late = True  # the attempt ran past the mark while we waited: kill now,
                    break        # or a fast machine finishes the job before the kills are done
                time.sleep(0.005)
            if not all(alive(p) for p in ws.values()):
                log(f"attempt {attempt}: a worker exited by itself before the kill")
                next_attempt = attempt + 1
                continue
        t_kill = time.monotonic() - t_start
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            log(f"attempt {attempt}: rank {target} pid {pid} gone before the kill")
            next_attempt = attempt + 1
            continue
        kills += 1
        next_attempt = attempt + 1
        if midwrite:
            while alive(pid):
                time.sleep(0.0005)
            bad, desc = watch.incomplete(what)
            if bad:
                mid += 1
                overwrites += "overwrote a complete one" in desc
            log(f"kill {kills}: attempt {attempt} rank {target} pid {pid} at {t_kill:.2f} s, "
                f"{'mid-write' if bad else 'meant mid-write, but the write was done'}: {desc}")
        else:
            log(f"kill {kills}: attempt {attempt} rank {target} pid {pid} at {t_kill:.2f} s "
                f"({'random, early: the job is past step ' + str(step) if late else 'random'})")
    log(f"{kills} kills, {mid} mid-write ({kills - mid} others), "
        f"{overwrites} cut a rewrite of a complete checkpoint short")
    return 0


if __name__ == "__main__":
    sys.exit(main())
