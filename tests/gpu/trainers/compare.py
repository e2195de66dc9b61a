"""Loss comparison for tests/gpu/ckpt_trainers.sh: the losses of a run with kills and resumes
against the fault-free reference, step by step, attempt by attempt.

    compare.py --kind nanogpt|hf REF_LOG RUN_LOG [--tol T]

An attempt starts at a trainer's "start:" line (its first step) and holds the losses it printed
until the next one. Each printed loss is compared with the reference's loss of the same step:
exact (the same text at the printed precision, 6 decimals) or within T (absolute). Prints:
    attempt A: start S pid P, steps F..L (N losses): E exact, max |diff| D
    total: N compared, E exact, max |diff| D, within tol T: yes|no, last step L of R, missing M
    starts: S0 S1 ...
"""

import argparse
import re
import sys

START = re.compile(r"start: (?:iter|step) (\d+), pid (\d+)")
LOSS = {"nanogpt": re.compile(r"\biter (\d+): loss (-?[0-9.]+|nan|inf)"),
        "hf": re.compile(r"\bstep (\d+) loss (-?[0-9.]+|nan|inf)")}


def attempts(path, kind):
    out = []
    for line in open(path, errors="replace"):
        m = START.search(line)
        if m:
            out.append({"start": int(m.group(1)), "pid": int(m.group(2)), "loss": {}})
            continue
        m = LOSS[kind].search(line)
        if m and out:
            out[-1]["loss"][int(m.group(1))] = m.group(2)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=("nanogpt", "hf"), required=True)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("ref")
    p.add_argument("run")
    a = p.parse_args()
    ref_att = attempts(a.ref, a.kind)
    if len(ref_att) != 1 or not ref_att[0]["loss"]:
        print(f"error: the reference {a.ref} has {len(ref_att)} attempts and no losses" if not ref_att
              else f"error: the reference {a.ref} should be one attempt, has {len(ref_att)}")
        return 2
    ref = ref_att[0]["loss"]
    last_ref = max(ref)
    run = attempts(a.run, a.kind)
    total = exact = 0
    worst = 0.0
    seen = set()
    for i, at in enumerate(run):
        steps = sorted(at["loss"])
        e = n = 0
        d = 0.0
        for s in steps:
            if s not in ref:
                continue
            n += 1
            if at["loss"][s] == ref[s]:
                e += 1
            else:
                d = max(d, abs(float(at["loss"][s]) - float(ref[s])))
            seen.add(s)
        total += n
        exact += e
        worst = max(worst, d)
        span = f"{steps[0]}..{steps[-1]}" if steps else "none"
        print(f"attempt {i}: start {at['start']} pid {at['pid']}, steps {span} ({n} losses): "
              f"{e} exact, max |diff| {d:.6f}")
    last = max((max(at["loss"]) for at in run if at["loss"]), default=-1)
    missing = len(set(ref) - seen)
    ok = total > 0 and worst <= a.tol and missing == 0
    print(f"total: {total} compared, {exact} exact, max |diff| {worst:.6f}, within tol {a.tol:g}: "
          f"{'yes' if ok else 'no'}, last step {last} of {last_ref}, missing {missing}")
    print("starts: " + " ".join(str(at["start"]) for at in run))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
