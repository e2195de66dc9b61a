#!/usr/bin/env python3
"""Worker for test_torchrun_compat*.sh, in the role of pytorch's
test/distributed/launcher/bin/test_script.py (written anew for muster).

Prints the torchrun worker variables (every one must be set: a missing one is a KeyError and
exit 1), then touches DIR/<RANK> (--touch-file-dir DIR). --fail raises a RuntimeError instead;
with --record the error goes through torch's @record, which writes TORCHELASTIC_ERROR_FILE.
--env-dir DIR also writes the whole environment to DIR/env.<RANK>.<TORCHELASTIC_RESTART_COUNT>
(the names multi.sh's check_ranks reads). No torch import unless
--record is given, so this starts fast.
"""
import argparse
import os
import sys

NAMES = [
    "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "OMP_NUM_THREADS", "TEST_SENTINEL_PARENT", "TORCHELASTIC_ERROR_FILE",
]


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--touch-file-dir", "--touch_file_dir", dest="touch_dir")
    ap.add_argument("--env-dir", dest="env_dir")
    ap.add_argument("--fail", action="store_true")
    ap.add_argument("--record", action="store_true")
    return ap.parse_args()


def main(args):
    print("Distributed env vars set by agent:")
    for name in NAMES:
        print(f"{name} = {os.environ[name]}")
    rank = os.environ["RANK"]
    if args.env_dir:
        name = f"env.{rank}.{os.environ['TORCHELASTIC_RESTART_COUNT']}"
        with open(os.path.join(args.env_dir, name), "w") as f:
            for k, v in sorted(os.environ.items()):
                f.write(f"{k}={v}\n")
    if args.fail:
        raise RuntimeError("raising exception since --fail flag was set")
    path = os.path.join(args.touch_dir, rank)
    open(path, "a").close()
    print(f"Success, created {path}")


if __name__ == "__main__":
    a = parse()
    if a.record:
        from torch.distributed.elastic.multiprocessing.errors import record
        record(main)(a)
    else:
        main(a)
    sys.exit(0)
