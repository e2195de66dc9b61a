# PID 1 of a container that never reaps: runs `muster run` N times, waiting only for each
# muster (subprocess waits for its own child by pid), then counts the zombies of its PID
# namespace. Used by test_container_reaper.sh. usage: pid1.py MUSTER N
import os, subprocess, sys, time
muster, runs = sys.argv[1], int(sys.argv[2])
bad = 0
for i in range(runs):
    r = subprocess.run([muster, "run", "--standalone", "--nproc-per-node", "1", "--no-python", "/bin/true"])
    bad += r.returncode != 0
time.sleep(1.5)
zombies = []
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        stat = open(f"/proc/{p}/stat").read()
    except OSError:
        continue
    if stat.rsplit(") ", 1)[1].startswith("Z"):
        zombies.append(stat[stat.index("(") + 1:stat.rindex(")")])
print(f"failed={bad} zombies={len(zombies)} {' '.join(zombies)}")
