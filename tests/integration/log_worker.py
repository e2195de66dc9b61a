"""Worker of integration.netns_logs: every rank says one identical line first ("all ranks say
hello", for --dedup), then
- the flooding one (FLOOD_HOST=HOSTNO and LOCAL_RANK 0) waits FLOOD_WAIT s, prints 100-byte
  lines as fast as it can for FLOOD_S s, says on stderr how fast ("flood rank R: B bytes in S
  s"), rests 2.5 s (its caps refill) and prints "flood done rank R";
- every other rank prints TICKS lines "tick I rank R at T" (T: time.time() when printed), one
  each TICK_MS ms.
Then each prints "bye rank R" and exits 0. TOKEN_OUT: rank 0 writes its MUSTER_TOKEN (the
worker credential) there."""
import os
import sys
import time

rank = int(os.environ["RANK"])
host = os.environ.get("HOSTNO", "")
out = sys.stdout
if rank == 0 and os.environ.get("TOKEN_OUT"):  # the worker credential, for hostile tests
    with open(os.environ["TOKEN_OUT"] + ".tmp", "w") as f:
        f.write(os.environ.get("MUSTER_TOKEN", ""))
    os.rename(os.environ["TOKEN_OUT"] + ".tmp", os.environ["TOKEN_OUT"])
out.write("all ranks say hello\n")
out.flush()
if host == os.environ.get("FLOOD_HOST") and os.environ.get("LOCAL_RANK") == "0":
    time.sleep(float(os.environ.get("FLOOD_WAIT", "1")))
    line = ("flood " + "x" * 93 + "\n").encode()
    chunk = line * 10486  # ~1 MiB
    fd = out.fileno()
    t0 = time.time()
    sent = 0
    end = t0 + float(os.environ.get("FLOOD_S", "3"))
    while time.time() < end:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]
        sent += len(chunk)
    took = time.time() - t0
    sys.stderr.write("flood rank %d: %d bytes in %.3f s\n" % (rank, sent, took))
    sys.stderr.flush()
    time.sleep(2.5)
    out.write("flood done rank %d\n" % rank)
else:
    ticks = int(os.environ.get("TICKS", "100"))
    every = int(os.environ.get("TICK_MS", "50")) / 1000.0
    start = time.time()
    for i in range(ticks):
        out.write("tick %d rank %d at %.3f\n" % (i, rank, time.time()))
        out.flush()
        nxt = start + (i + 1) * every
        time.sleep(max(0.0, nxt - time.time()))
out.write("bye rank %d\n" % rank)
out.flush()
