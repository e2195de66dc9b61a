#!/usr/bin/env python3
"""Worker for test_torchrun_compat.sh, in the role of pytorch's
bin/test_script_is_torchelastic_launched.py: writes torch.distributed.is_torchelastic_launched()
("True"/"False") to --out-file."""
import argparse

import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--out-file", "--out_file", required=True)
args = ap.parse_args()
with open(args.out_file, "w") as f:
    f.write(f"{dist.is_torchelastic_launched()}")
