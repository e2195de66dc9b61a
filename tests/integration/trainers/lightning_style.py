"""PyTorch Lightning-style training (Trainer + ModelCheckpoint), reduced to what matters for
checkpoints:

  * ModelCheckpoint(dirpath=--ckpt_dir, every_n_train_steps=N, save_top_k=1, save_last=True):
    after every N-th optimizer step global rank 0 saves `epoch=E-step=S.ckpt`, removes the
    previous one (save_top_k=1, monitor=None), then saves `last.ckpt` (overwritten each time);
  * each save is Lightning's `_atomic_save`: torch.save into a BytesIO, then fsspec's local
    transaction: the bytes go to `tempfile.mkstemp()` (in $TMPDIR) and on commit
    `shutil.move(temp, path)`: a rename when $TMPDIR is on the checkpoint's file system, else
    a copy into place (open 'wb' + sendfile) and an unlink of the temp file;
  * the ranks meet at a barrier after each save (strategy.barrier("Trainer.save_checkpoint"));
  * `trainer.fit(model, ckpt_path=...)`: --ckpt_path, or else $MUSTER_RESUME_FROM (what a
    Lightning user adapting to muster writes), restores weights, optimizer, epoch, global step.

Data and dropout are functions of the step (trainer_common), so a resumed run is bit-identical to
one that never stopped. Rank 0 prints `final sha256 <hex> global_step <n>` at the end.
"""
import argparse
import io
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_common as tc  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt_dir", required=True)
    p.add_argument("--max_steps", type=int, default=200)
    p.add_argument("--every_n_train_steps", type=int, default=10)
    p.add_argument("--batches_per_epoch", type=int, default=50)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--ckpt_path", default=os.environ.get("MUSTER_RESUME_FROM") or None)
    return p.parse_args()


def _atomic_save(checkpoint, filepath):
    """lightning_fabric.utilities.cloud_io._atomic_save with fsspec's LocalFileSystem."""
    bytesbuffer = io.BytesIO()
    torch.save(checkpoint, bytesbuffer)
    # with fs.transaction, fs.open(urlpath, "wb") as f: f.write(bytesbuffer.getvalue())
    i, temp = tempfile.mkstemp()
    os.close(i)
    with open(temp, "wb") as f:
        f.write(bytesbuffer.getvalue())
    shutil.move(temp, filepath)  # LocalFileOpener.commit


class ModelCheckpoint:
    def __init__(self, dirpath, every_n_train_steps):
        self.dirpath, self.every = dirpath, every_n_train_steps
        self.best_model_path = ""
        self.last_model_path = ""

    def state_dict(self):
        return {"dirpath": self.dirpath, "best_model_path": self.best_model_path,
                "last_model_path": self.last_model_path}

    def load_state_dict(self, sd):
        if sd.get("dirpath") == self.dirpath:
            self.best_model_path = sd["best_model_path"]
            self.last_model_path = sd["last_model_path"]

    def on_train_batch_end(self, trainer):
        if trainer.global_step % self.every != 0:
            return
        # _save_topk_checkpoint -> _save_none_monitor_checkpoint (save_top_k=1)
        filepath = os.path.join(self.dirpath, f"epoch={trainer.current_epoch}-step={trainer.global_step}.ckpt")
        previous, self.best_model_path = self.best_model_path, filepath
        trainer.save_checkpoint(filepath)
        if previous and previous != filepath and trainer.is_global_zero:
            try:  # _remove_checkpoint: fs.rm
                os.remove(previous)
            except FileNotFoundError:
                pass
        # _save_last_checkpoint
        last = os.path.join(self.dirpath, "last.ckpt")
        self.last_model_path = last
        trainer.save_checkpoint(last)


class Trainer:
    def __init__(self, args, rank, world):
        self.args, self.rank, self.world = args, rank, world
        self.is_global_zero = rank == 0
        self.global_step = 0
        self.current_epoch = 0
        self.callback = ModelCheckpoint(args.ckpt_dir, args.every_n_train_steps)

    def dump_checkpoint(self):
        return {"epoch": self.current_epoch, "global_step": self.global_step,
                "pytorch-lightning_version": "2.1.0-style",
                "state_dict": self.module.state_dict(),
                "loops": {"fit_loop": {"epoch_progress": self.current_epoch,
                                       "batch_progress": self.global_step % self.args.batches_per_epoch}},
                "callbacks": {"ModelCheckpoint{'every_n_train_steps': %d}" % self.callback.every:
                              self.callback.state_dict()},
                "optimizer_states": [self.optimizer.state_dict()],
                "lr_schedulers": []}

    def save_checkpoint(self, filepath):
        if self.is_global_zero:
            os.makedirs(os.path.dirname(filepath), exist_ok=True)
            _atomic_save(self.dump_checkpoint(), filepath)
        dist.barrier()

    def fit(self, module, ckpt_path=None):
        self.module = module
        self.optimizer = torch.optim.Adam(module.parameters(), lr=self.args.lr)
        if ckpt_path:
            print(f"Restoring states from the checkpoint path at {ckpt_path}", flush=True)
            ck = torch.load(ckpt_path, map_location="cpu")
            module.load_state_dict(ck["state_dict"])
            self.optimizer.load_state_dict(ck["optimizer_states"][0])
            self.global_step, self.current_epoch = ck["global_step"], ck["epoch"]
            for v in ck["callbacks"].values():
                self.callback.load_state_dict(v)
            print(f"Restored all states from the checkpoint at {ckpt_path} "
                  f"(epoch {self.current_epoch}, global_step {self.global_step})", flush=True)
        model = DDP(module)
        seed, t0 = self.args.seed, time.time()
        while self.global_step < self.args.max_steps:
            self.current_epoch = self.global_step // self.args.batches_per_epoch
            tc.reseed_step(seed, self.global_step, self.rank)
            x, y = tc.batch(seed, self.global_step, self.rank)
            loss = model(x, y)
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.global_step += 1
            if self.rank == 0 and self.global_step % 5 == 0:
                print(f"Epoch {self.current_epoch}: step {self.global_step} loss={loss.item():.4f} "
                      f"{(time.time() - t0) * 1000:.0f}ms", flush=True)
            self.callback.on_train_batch_end(self)


def main():
    args = parse_args()
    rank, world = tc.setup(args.seed)
    module = tc.TinyLM()
    trainer = Trainer(args, rank, world)
    trainer.fit(module, ckpt_path=args.ckpt_path)
    if rank == 0:
        print(f"final sha256 {tc.state_digest(module)} global_step {trainer.global_step}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
