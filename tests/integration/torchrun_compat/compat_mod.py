"""Module for test_torchrun_compat.sh's -m case: `muster run -m compat_mod DIR` touches
DIR/mod.<RANK> and prints how it was started."""
import os
import sys

if __name__ == "__main__":
    rank = os.environ["RANK"]
    open(os.path.join(sys.argv[1], "mod." + rank), "w").write(__spec__.name if __spec__ else "")
    print(f"module {__name__} spec {__spec__.name if __spec__ else None} rank {rank}")
