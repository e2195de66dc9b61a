#!/usr/bin/env python3
"""Worker for test_agent_store.sh and bench/store_bench.sh: the agent's TCPStore as
PyTorch's own client sees it. Modes:

  init         pytorch's test/bin/test_script_init_method.py shape: init_process_group over
               env://, one all_reduce, "Done", and no destroy_process_group()
  rank0-leaves rank 0 exits right after init; the others keep using the store for 3 s
  restart      attempt 0 writes a key outside every prefix (as 2.x's un-prefixed keys), then
               the last rank fails; attempt 1 must not see it
  hostile      before its init, the last rank sends garbage, a 2^63 length and 50 idle
               connections to MASTER_ADDR:MASTER_PORT; the job must still work
  stamp        prints the wall time (ns) at process start and after init + one all_reduce
               (the first step), for the bench
"""
import os
import socket
import struct
import sys
import time

T0 = time.time_ns()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def env(k):
    return os.environ[k]


def raw_store():
    """A client of the store itself, no PrefixStore: what 2.x's init_process_group uses."""
    return dist.TCPStore(env("MASTER_ADDR"), int(env("MASTER_PORT")), is_master=False,
                         timeout=__import__("datetime").timedelta(seconds=30))


def seen(key):
    """Whether key exists (1.13's Python has no check()): a get that gives up after 0.3 s."""
    store = raw_store()
    store.set_timeout(__import__("datetime").timedelta(milliseconds=300))
    try:
        store.get(key)
        return True
    except RuntimeError:
        return False


def init():
    dist.init_process_group("gloo", init_method="env://")
    t = torch.ones(1)
    dist.all_reduce(t)
    if int(t.item()) != dist.get_world_size():
        raise RuntimeError(f"all_reduce gave {t.item()}")


def hostile():
    addr = (env("MASTER_ADDR"), int(env("MASTER_PORT")))
    held = []
    for payload in (b"GET / HTTP/1.1\r\n\r\n", b"\x02" + struct.pack("<Q", 1 << 63),
                    b"\x00\xff\xff\xff\xff", os.urandom(64)):
        s = socket.create_connection(addr, timeout=10)
        s.sendall(payload)
        held.append(s)
    for _ in range(50):
        held.append(socket.create_connection(addr, timeout=10))
    return held


def main():
    mode = sys.argv[1]
    rank = int(env("RANK"))
    world = int(env("WORLD_SIZE"))
    attempt = int(env("TORCHELASTIC_RESTART_COUNT"))
    print(f"rank {rank} USE_AGENT_STORE={env('TORCHELASTIC_USE_AGENT_STORE')} attempt {attempt}",
          flush=True)
    held = hostile() if mode == "hostile" and rank == world - 1 else []
    if mode == "restart" and attempt == 1 and rank == 0:
        stale = [seen(f"stale_{r}") for r in range(world)]
        print(f"attempt 1 sees attempt 0's keys: {stale}", flush=True)
    init()
    if mode == "stamp":
        print(f"stamp start_ns {T0} step_ns {time.time_ns()} rank {rank} attempt {attempt}",
              flush=True)
    if mode == "rank0-leaves":
        if rank == 0:
            print("rank 0 leaves", flush=True)
            os._exit(0)
        store = dist.distributed_c10d._get_default_store()
        deadline = time.time() + 3
        n = 0
        while time.time() < deadline:
            store.set(f"after_{rank}", str(n))
            if store.get(f"after_{rank}") != str(n).encode():
                raise RuntimeError("store gave back another value")
            n += 1
            time.sleep(0.01)
        print(f"rank {rank} used the store {n} times after rank 0 left", flush=True)
    if mode == "restart" and attempt == 0:
        raw_store().set(f"stale_{rank}", "from attempt 0")
        dist.barrier()
        if rank == 0:  # the control: the same check finds attempt 0's own keys
            print(f"attempt 0 sees its own keys: {[seen(f'stale_{r}') for r in range(world)]}",
                  flush=True)
        dist.barrier()
        if rank == world - 1:
            print("injected failure", flush=True)
            sys.exit(3)
        time.sleep(30)  # stopped by the restart
    for s in held:
        s.close()
    print(f"Done rank {rank}/{world}", flush=True)
    if mode == "stamp" and rank == 0 and attempt == 0 and os.environ.get("STORE_BENCH_FAIL"):
        time.sleep(0.5)  # every rank's step is in: the failure is not one rank's slow start
        print(f"stamp fail_ns {time.time_ns()}", flush=True)
        os._exit(5)  # the bench's restart: attempt 1 is measured too
    # no destroy_process_group(): as pytorch's test_script_init_method.py. That shape can abort
    # at interpreter exit under torch 1.13 on Python 3.11 (a gloo thread takes the GIL during
    # Py_FinalizeEx: docs/BENCHMARKS.md); the modes that test the store itself leave
    # without finalizing, so that race cannot fail them
    if mode != "init":
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
