"""nanoGPT-style training (karpathy/nanoGPT train.py), reduced to what matters for checkpoints:

  * configuration by `--key=value` arguments overriding the globals below (configurator.py);
  * DDP when RANK is set (torchrun's environment), gloo here;
  * every `eval_interval` iterations the master process evaluates and, with
    `always_save_checkpoint`, does `torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))`:
    one file, rewritten in place (no temporary name, no rename);
  * `--init_from=resume` reads out_dir/ckpt.pt and continues from its iter_num; without it the
    run starts from scratch, whatever out_dir holds. A resumed run evaluates and saves again at
    once (iter_num is a multiple of eval_interval), as nanoGPT does.

Unlike nanoGPT the data and the dropout are functions of the iteration (see trainer_common), so a
resumed run is bit-identical to one that never stopped. Rank 0 prints
`final sha256 <hex> iter_num <n>` at the end.
"""
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_common as tc  # noqa: E402

# -----------------------------------------------------------------------------
# default config values (nanoGPT names)
out_dir = "out"
eval_interval = 10
eval_iters = 2
always_save_checkpoint = True
init_from = "scratch"  # 'scratch' or 'resume'
n_layer = 2
n_embd = tc.D_MODEL
dropout = 0.1
learning_rate = 1e-3
max_iters = 200
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.95
seed = 1337
iter_sleep = 0.0  # seconds after each iteration (not in nanoGPT: pacing for tests)
# -----------------------------------------------------------------------------
# configurator.py: --key=value overrides a global of the same name, with its type
for arg in sys.argv[1:]:
    if not arg.startswith("--") or "=" not in arg:
        sys.exit(f"unknown argument {arg!r} (expected --key=value)")
    key, val = arg[2:].split("=", 1)
    if key not in globals():
        sys.exit(f"Unknown config key: {key}")
    cur = globals()[key]
    if isinstance(cur, bool):
        val = val in ("True", "true", "1")
    else:
        val = type(cur)(val)
    print(f"Overriding: {key} = {val}", flush=True)
    globals()[key] = val
config = {k: globals()[k] for k in ("out_dir", "eval_interval", "max_iters", "learning_rate", "seed")}
# -----------------------------------------------------------------------------

rank, world = tc.setup(seed)
master_process = rank == 0
if master_process:
    os.makedirs(out_dir, exist_ok=True)

iter_num = 0
best_val_loss = 1e9
model_args = dict(n_layer=n_layer, d=n_embd, dropout=dropout)
if init_from == "scratch":
    print("Initializing a new model from scratch", flush=True)
    model = tc.TinyLM(**model_args)
    checkpoint = None
elif init_from == "resume":
    print(f"Resuming training from {out_dir}", flush=True)
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    checkpoint = torch.load(ckpt_path, map_location="cpu")
    model_args = checkpoint["model_args"]
    model = tc.TinyLM(**model_args)
    model.load_state_dict(checkpoint["model"])
    iter_num = checkpoint["iter_num"]
    best_val_loss = checkpoint["best_val_loss"]
    torch.set_rng_state(checkpoint["rng_state"])
else:
    sys.exit(f"init_from={init_from!r}: only 'scratch' and 'resume' here")

optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(beta1, beta2),
                              weight_decay=weight_decay)
if checkpoint is not None:
    optimizer.load_state_dict(checkpoint["optimizer"])
checkpoint = None  # free up memory
raw_model = model
model = DDP(model)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split, base in (("train", 10_000_000), ("val", 20_000_000)):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = tc.batch(seed, base + k, 0)
            losses[k] = raw_model(X, Y).item()
        out[split] = losses.mean().item()
    model.train()
    return out


t0 = time.time()
while True:
    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}",
              flush=True)
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses["val"]
            if iter_num > 0:
                checkpoint = {
                    "model": raw_model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "model_args": model_args,
                    "iter_num": iter_num,
                    "best_val_loss": best_val_loss,
                    "config": config,
                    "rng_state": torch.get_rng_state(),
                }
                print(f"saving checkpoint to {out_dir}", flush=True)
                torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))
                checkpoint = None

    tc.reseed_step(seed, iter_num, rank)
    X, Y = tc.batch(seed, iter_num, rank)
    loss = model(X, Y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if master_process and iter_num % 5 == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}, {(time.time() - t0) * 1000:.0f}ms",
              flush=True)
    if iter_sleep > 0:
        time.sleep(iter_sleep)
    iter_num += 1
    if iter_num > max_iters:
        break

if master_process:
    print(f"final sha256 {tc.state_digest(raw_model)} iter_num {iter_num}", flush=True)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
