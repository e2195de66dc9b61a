# muster's interpreter start-up hook (agent/evidence.h): muster run puts the directory holding
# this file first on the workers' PYTHONPATH, so every Python worker imports it as
# sitecustomize before the script's first line. It changes nothing the script can see, except
# one idle thread:
#
# - faulthandler dumps every thread's Python stack into MUSTER_EVIDENCE_DIR/stacks-PID.txt on
#   MUSTER_EVIDENCE_SIGNAL (a real-time signal nobody else uses). faulthandler writes from the
#   signal handler itself, without the GIL: a rank blocked in C code or holding the GIL in a
#   loop still answers. The file exists only once the handler is installed, so muster never
#   sends the signal to a process that would die of it.
# - the thread (a bare _thread, which never holds up the interpreter's exit) waits on the FIFO
#   trigger-PID; for each byte written there it writes
#   fr-PID.json: PyTorch's Flight Recorder (the last collectives per process group) when this
#   process runs an NCCL process group, else a line saying why there is none.
#
# Then the sitecustomize that this one hides (Debian's, a virtualenv's, the user's) runs as it
# would have. Nothing here may raise: a launcher must never break a script that ran before.
import os
import sys


def _muster_fr_dump():
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return {"fr": None, "why": "torch.distributed is not initialised"}
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return {"fr": None, "why": "no c10d"}
    dump = getattr(c10d, "_dump_nccl_trace_json", None)
    if dump is not None:
        import json

        try:
            text = dump(includeCollectives=True, onlyActive=False)
        except TypeError:
            text = dump()
        return {"fr": json.loads(text)}
    dump = getattr(c10d, "_dump_nccl_trace", None)
    if dump is not None:
        import pickle

        return {"fr": pickle.loads(dump())}
    return {"fr": None, "why": "this PyTorch has no Flight Recorder (NCCL only)"}


def _muster_fr_loop(fifo, out):
    # Until the first byte comes this thread runs nothing but open(): no import. An import in a
    # daemon thread that races the interpreter's exit corrupts the heap (Python 3.11: a short
    # script crashed at exit with SIGSEGV or "malloc_consolidate(): unaligned fastbin chunk" in
    # ~0.7 % of runs on a loaded 2-core machine; 0 of 1,200 with the import moved here).
    while True:
        try:
            with open(fifo, "rb") as p:
                if not p.read(1):
                    continue
        except OSError:
            return
        import json
        try:
            doc = _muster_fr_dump()
        except Exception as e:  # an old or a new PyTorch: say it, never raise
            doc = {"fr": None, "why": "Flight Recorder dump failed: %r" % (e,)}
        try:
            tmp = out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f, default=str)
            os.rename(tmp, out)
        except Exception:
            pass


def _muster_evidence():
    d = os.environ.get("MUSTER_EVIDENCE_DIR")
    sig = os.environ.get("MUSTER_EVIDENCE_SIGNAL")
    if not d or not sig or not os.path.isdir(d):
        return
    import _thread  # not threading: its import costs a worker's start-up a few ms
    import faulthandler

    pid = os.getpid()
    tmp = os.path.join(d, ".stacks-%d.tmp" % pid)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
    f = os.fdopen(fd, "w", buffering=1)
    f.write("muster-evidence 1 pid %d main 0x%016x\n" % (pid, _thread.get_ident()))
    f.flush()
    faulthandler.register(int(sig), file=f, all_threads=True, chain=False)
    globals()["_muster_evidence_file"] = f  # faulthandler writes to its descriptor
    fifo = os.path.join(d, "trigger-%d" % pid)
    try:
        os.mkfifo(fifo, 0o600)
        _thread.start_new_thread(_muster_fr_loop, (fifo, os.path.join(d, "fr-%d.json" % pid)))
    except OSError:
        pass
    os.rename(tmp, os.path.join(d, "stacks-%d.txt" % pid))


def _muster_chain():
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import importlib.machinery  # frozen, cheap; importlib.util would cost ~10 ms per start

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    mod = type(sys)("sitecustomize")
    mod.__spec__, mod.__loader__, mod.__file__ = spec, spec.loader, spec.origin
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


try:
    _muster_evidence()
except Exception:
    pass
_muster_chain()
