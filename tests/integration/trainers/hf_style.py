"""HF Trainer-style training (transformers.Trainer), reduced to what matters for checkpoints:

  * every `--save_steps` optimizer steps, `_save_checkpoint` writes `checkpoint-<global_step>/`
    straight into `--output_dir` (no temporary name, no rename), in HF's order: config.json,
    model.safetensors (the real safetensors layout: 8-byte header length, JSON header, data),
    training_args.bin, optimizer.pt, scheduler.pt, then every process its
    rng_state_<rank>.pth, then trainer_state.json last (rank 0);
  * `--save_total_limit N` then deletes the oldest checkpoint-* beyond N with shutil.rmtree;
  * `--resume_from_checkpoint PATH` (HF semantics: only when given) loads the model, optimizer,
    scheduler, RNG state and global_step from PATH and continues;
  * at the end `trainer.save_model()` writes config.json, model.safetensors and
    training_args.bin into output_dir itself, as HF's example scripts do.

Data and dropout are functions of the step (trainer_common), so a resumed run is bit-identical to
one that never stopped. Rank 0 prints `final sha256 <hex> global_step <n>` at the end.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_common as tc  # noqa: E402

PREFIX_CHECKPOINT_DIR = "checkpoint"
TRAINER_STATE_NAME = "trainer_state.json"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_steps", type=int, default=200)
    p.add_argument("--save_steps", type=int, default=10)
    p.add_argument("--save_total_limit", type=int, default=2)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--warmup_steps", type=int, default=20)
    p.add_argument("--logging_steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--resume_from_checkpoint", default=None)
    return p.parse_args()


# --- safetensors (the format of huggingface/safetensors, written by hand: no dependency) ---
def save_safetensors(state, path, metadata=None):
    header, offset, blobs = {}, 0, []
    for k in sorted(state):
        t = state[k].detach().contiguous()
        assert t.dtype == torch.float32, k
        b = t.numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = torch.frombuffer(bytearray(data[base + s:base + e]), dtype=torch.float32).reshape(v["shape"])
    return out


class Trainer:
    def __init__(self, args, rank, world):
        self.args, self.rank, self.world = args, rank, world
        self.model = tc.TinyLM()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.learning_rate)
        warm, total = args.warmup_steps, args.max_steps

        def lr_lambda(step):  # get_linear_schedule_with_warmup
            if step < warm:
                return float(step) / float(max(1, warm))
            return max(0.0, float(total - step) / float(max(1, total - warm)))

        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)
        self.global_step = 0
        self.log_history = []
        self.should_save = rank == 0

    # --- saving (Trainer._save_checkpoint) ---
    def save_model(self, output_dir):
        os.makedirs(output_dir, exist_ok=True)
        if not self.should_save:
            return
        print(f"Saving model checkpoint to {output_dir}", flush=True)
        with open(os.path.join(output_dir, "config.json"), "w") as f:
            json.dump({"model_type": "tinylm", "vocab_size": tc.VOCAB, "n_embd": tc.D_MODEL,
                       "torch_dtype": "float32"}, f, indent=2)
        save_safetensors(self.model.state_dict(), os.path.join(output_dir, "model.safetensors"),
                         metadata={"format": "pt"})
        torch.save(vars(self.args), os.path.join(output_dir, "training_args.bin"))

    def _save_checkpoint(self):
        output_dir = os.path.join(self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.global_step}")
        self.save_model(output_dir)
        if self.should_save:
            torch.save(self.optimizer.state_dict(), os.path.join(output_dir, "optimizer.pt"))
            torch.save(self.lr_scheduler.state_dict(), os.path.join(output_dir, "scheduler.pt"))
        # every process saves its RNG state (HF: rng_state_<process_index>.pth when world > 1)
        os.makedirs(output_dir, exist_ok=True)
        torch.save({"cpu": torch.get_rng_state()}, os.path.join(output_dir, f"rng_state_{self.rank}.pth"))
        if self.should_save:
            state = {"global_step": self.global_step, "max_steps": self.args.max_steps,
                     "log_history": self.log_history, "save_steps": self.args.save_steps}
            with open(os.path.join(output_dir, TRAINER_STATE_NAME), "w") as f:
                f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
            self._rotate_checkpoints()

    def _rotate_checkpoints(self):
        limit = self.args.save_total_limit
        if limit is None or limit <= 0:
            return
        ckpts = []
        for name in os.listdir(self.args.output_dir):
            p = os.path.join(self.args.output_dir, name)
            if name.startswith(PREFIX_CHECKPOINT_DIR + "-") and os.path.isdir(p):
                try:
                    ckpts.append((int(name.rsplit("-", 1)[1]), p))
                except ValueError:
                    pass
        ckpts.sort()
        for _, p in ckpts[:max(0, len(ckpts) - limit)]:
            print(f"Deleting older checkpoint [{p}] due to args.save_total_limit", flush=True)
            shutil.rmtree(p, ignore_errors=True)

    # --- loading (Trainer._load_from_checkpoint, _load_optimizer_and_scheduler, _load_rng_state) ---
    def _load_from_checkpoint(self, ckpt):
        print(f"Loading model from {ckpt}.", flush=True)
        self.model.load_state_dict(load_safetensors(os.path.join(ckpt, "model.safetensors")))
        self.optimizer.load_state_dict(torch.load(os.path.join(ckpt, "optimizer.pt")))
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(ckpt, "scheduler.pt")))
        with open(os.path.join(ckpt, TRAINER_STATE_NAME)) as f:
            state = json.load(f)
        self.global_step = state["global_step"]
        self.log_history = state["log_history"]
        rng = os.path.join(ckpt, f"rng_state_{self.rank}.pth")
        if os.path.isfile(rng):
            torch.set_rng_state(torch.load(rng)["cpu"])
        print(f"  Continuing training from global step {self.global_step}", flush=True)

    def train(self, resume_from_checkpoint=None):
        if resume_from_checkpoint is not None:
            if not os.path.isdir(resume_from_checkpoint):
                raise ValueError(f"Can't find a valid checkpoint at {resume_from_checkpoint}")
            self._load_from_checkpoint(resume_from_checkpoint)
        model = DDP(self.model)
        args, t0 = self.args, time.time()
        while self.global_step < args.max_steps:
            tc.reseed_step(args.seed, self.global_step, self.rank)
            x, y = tc.batch(args.seed, self.global_step, self.rank)
            loss = model(x, y)
            loss.backward()
            self.optimizer.step()
            self.lr_scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.global_step += 1
            if self.global_step % args.logging_steps == 0:
                entry = {"loss": round(loss.item(), 4), "step": self.global_step,
                         "learning_rate": self.lr_scheduler.get_last_lr()[0]}
                self.log_history.append(entry)
                if self.rank == 0:
                    print(f"{entry} {(time.time() - t0) * 1000:.0f}ms", flush=True)
            if self.global_step % args.save_steps == 0:
                self._save_checkpoint()


def main():
    args = parse_args()
    rank, world = tc.setup(args.seed)
    trainer = Trainer(args, rank, world)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(args.output_dir)
    if rank == 0:
        print(f"final sha256 {tc.state_digest(trainer.model)} global_step {trainer.global_step}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
