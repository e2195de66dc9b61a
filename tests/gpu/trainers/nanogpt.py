"""A nanoGPT-style trainer for tests/gpu/ckpt_trainers.sh: a small GPT in plain PyTorch, AdamW,
and the checkpoint habits of nanoGPT's train.py: `torch.save` of the whole state *in place* to
OUT_DIR/ckpt.pt every EVAL_INTERVAL iterations (no temporary name, no rename), and
`--init_from=resume` on the command line to load it again. It knows nothing of muster.

    python3 nanogpt.py --out_dir=DIR [--init_from=resume] [--max_iters=800] [--key=value ...]

Every key of CONFIG below can be set with --key=value (nanoGPT's configurator style).
Under a launcher that sets RANK (torchrun, muster) it joins a process group and wraps the model
in DDP, as nanoGPT does; the tests run one worker.

Differences from nanoGPT, for a test that compares losses across a resume:
  * no data files: a synthetic corpus made from a fixed seed (random 8-token "phrases" strung
    together in random order: inside a phrase the next token is predictable, so the loss falls
    from ln(vocab) towards ~1);
  * the batch of iteration i comes from a generator seeded by (seed, i), so a run resumed at
    iteration i sees the batches the uninterrupted run saw (nanoGPT draws from the global RNG,
    which its checkpoint does not hold);
  * the attention is the explicit softmax(QK^T)V path (nanoGPT's fallback when
    scaled_dot_product_attention is missing): its backward is plain matmuls, deterministic with
    CUBLAS_WORKSPACE_CONFIG; no torch.compile.

Output, one line each, flushed (the loss with 6 decimals):
    start: iter N, pid P, init_from scratch|resume
    iter N: loss X.XXXXXX, time T ms
    step N: train loss X.XXXX, val loss X.XXXX
    saving checkpoint to DIR        (nanoGPT's line, before torch.save)
    saved checkpoint at iter N, B bytes, W ms
    done: iter N
"""

import math
import os
import sys
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

CONFIG = dict(
    # one line a group: this is a table of settings, read across
    out_dir="out",
    init_from="scratch",  # or "resume": load out_dir/ckpt.pt
    eval_interval=200, eval_iters=10, always_save_checkpoint=True, max_iters=800, seed=1337,
    # data
    vocab_size=4096, phrases=512, phrase_len=8, corpus_tokens=1 << 21,
    batch_size=32, block_size=256, gradient_accumulation_steps=1,
    # model
    n_layer=6, n_head=6, n_embd=384, dropout=0.0, bias=False,
    # AdamW, cosine schedule with warmup (nanoGPT's)
    learning_rate=1e-3, weight_decay=0.1, beta1=0.9, beta2=0.99, grad_clip=1.0,
    warmup_iters=50, lr_decay_iters=800, min_lr=1e-4,
    # system
    device="auto",  # cuda when there is one, else cpu
    dtype="auto",  # bfloat16 on a GPU that has it, else float32
    backend="auto",  # nccl on cuda, gloo on cpu
    deterministic=True,
)


def configure(argv):
    cfg = dict(CONFIG)
    for arg in argv:
        if not arg.startswith("--") or "=" not in arg:
            sys.exit(f"nanogpt.py: arguments are --key=value, not {arg!r}")
        key, val = arg[2:].split("=", 1)
        if key not in cfg:
            sys.exit(f"nanogpt.py: unknown config key {key!r}")
        old = cfg[key]
        if isinstance(old, bool):
            cfg[key] = val.lower() in ("1", "true", "yes")
        elif isinstance(old, int):
            cfg[key] = int(val)
        elif isinstance(old, float):
            cfg[key] = float(val)
        else:
            cfg[key] = val
    return cfg


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head, self.n_embd = c["n_head"], c["n_embd"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        t = c["block_size"]
        self.register_buffer("mask", torch.tril(torch.ones(t, t)).view(1, 1, t, t), persistent=False)

    def forward(self, x):
        b, t, e = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(b, t, self.n_head, e // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, e)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        e = c["n_embd"]
        self.ln_1 = nn.LayerNorm(e, elementwise_affine=True)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(e, elementwise_affine=True)
        self.mlp = nn.Sequential(nn.Linear(e, 4 * e, bias=c["bias"]), nn.GELU(),
                                 nn.Linear(4 * e, e, bias=c["bias"]), nn.Dropout(c["dropout"]))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.block_size = c["block_size"]
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["block_size"], c["n_embd"])
        self.drop = nn.Dropout(c["dropout"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"])
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as in GPT-2
        self.apply(self._init)
        for name, p in self.named_parameters():  # scaled init of the residual projections
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, c, device_type):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": c["weight_decay"]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        extra = {}
        if device_type == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames:
            extra["fused"] = True
        return torch.optim.AdamW(groups, lr=c["learning_rate"], betas=(c["beta1"], c["beta2"]), **extra)


def make_corpus(c):
    g = torch.Generator().manual_seed(c["seed"])
    table = torch.randint(c["vocab_size"], (c["phrases"], c["phrase_len"]), generator=g)
    order = torch.randint(c["phrases"], (c["corpus_tokens"] // c["phrase_len"],), generator=g)
    return table[order].reshape(-1)


def get_batch(data, c, it, micro, split, device):
    """The batch of iteration `it` (micro-step `micro`, split 0 = train, 1 = val): a function of
    (seed, it, micro, split) only."""
    g = torch.Generator().manual_seed(((c["seed"] * 1000003 + it) * 131 + micro) * 2 + split)
    n = len(data) - c["block_size"] - 1
    half = n // 2  # train from the first half of the corpus, val from the second
    ix = torch.randint(half, (c["batch_size"],), generator=g) + split * half
    x = torch.stack([data[i:i + c["block_size"]] for i in ix.tolist()])
    y = torch.stack([data[i + 1:i + 1 + c["block_size"]] for i in ix.tolist()])
    if device.startswith("cuda"):
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def get_lr(c, it):
    if it < c["warmup_iters"]:
        return c["learning_rate"] * (it + 1) / (c["warmup_iters"] + 1)
    if it > c["lr_decay_iters"]:
        return c["min_lr"]
    ratio = (it - c["warmup_iters"]) / (c["lr_decay_iters"] - c["warmup_iters"])
    return c["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c["learning_rate"] - c["min_lr"])


def main():
    c = configure(sys.argv[1:])
    device = c["device"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    ddp = int(os.environ.get("RANK", -1)) != -1
    master = True
    if ddp:
        backend = c["backend"] if c["backend"] != "auto" else ("nccl" if device_type == "cuda" else "gloo")
        torch.distributed.init_process_group(backend=backend)
        master = int(os.environ["RANK"]) == 0
        if device_type == "cuda":
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
            torch.cuda.set_device(device)
    if c["deterministic"]:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(c["seed"])
    dtype = c["dtype"]
    if dtype == "auto":
        dtype = "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    ctx = torch.autocast(device_type=device_type, dtype=ptdtype) if ptdtype != torch.float32 else None

    data = make_corpus(c)
    os.makedirs(c["out_dir"], exist_ok=True)
    ckpt_path = os.path.join(c["out_dir"], "ckpt.pt")
    model = GPT(c)
    iter_num, best_val_loss, checkpoint = 0, 1e9, None
    if c["init_from"] == "resume":
        checkpoint = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(checkpoint["model"])
        iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
    elif c["init_from"] != "scratch":
        sys.exit(f"nanogpt.py: init_from must be scratch or resume, not {c['init_from']!r}")
    model.to(device)
    optimizer = model.configure_optimizers(c, device_type)
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
    checkpoint = None
    raw_model = model
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[torch.cuda.current_device()] if device_type == "cuda" else None)
    nparams = sum(p.numel() for p in raw_model.parameters())
    if master:
        print(f"start: iter {iter_num}, pid {os.getpid()}, init_from {c['init_from']}, {nparams} parameters, "
              f"device {device}, dtype {dtype}, torch {torch.__version__}", flush=True)

    def forward(x, y):
        if ctx is None:
            return model(x, y)
        with ctx:
            return model(x, y)

    @torch.no_grad()
    def estimate_loss():
        out = []
        model.eval()
        for split in (0, 1):
            losses = [forward(*get_batch(data, c, iter_num, k, split, device)).item() for k in range(c["eval_iters"])]
            out.append(sum(losses) / len(losses))
        model.train()
        return out

    t0 = time.time()
    while True:
        lr = get_lr(c, iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % c["eval_interval"] == 0 and master:
            train_loss, val_loss = estimate_loss()
            print(f"step {iter_num}: train loss {train_loss:.4f}, val loss {val_loss:.4f}", flush=True)
            if val_loss < best_val_loss or c["always_save_checkpoint"]:
                best_val_loss = min(best_val_loss, val_loss)
                if iter_num > 0:
                    state = {"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                             "model_args": {k: c[k] for k in ("n_layer", "n_head", "n_embd", "block_size",
                                                              "bias", "vocab_size", "dropout")},
                             "iter_num": iter_num, "best_val_loss": best_val_loss, "config": c}
                    print(f"saving checkpoint to {c['out_dir']}", flush=True)
                    ts = time.time()
                    torch.save(state, ckpt_path)  # in place, as nanoGPT does
                    print(f"saved checkpoint at iter {iter_num}, {os.path.getsize(ckpt_path)} bytes, "
                          f"{(time.time() - ts) * 1000:.0f} ms", flush=True)
                    state = None
        if iter_num >= c["max_iters"]:
            break
        gas = c["gradient_accumulation_steps"]
        for micro in range(gas):
            if ddp:
                model.require_backward_grad_sync = micro == gas - 1
            loss = forward(*get_batch(data, c, iter_num, micro, 0, device)) / gas
            loss.backward()
        if c["grad_clip"] != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item() * gas
        t1 = time.time()
        if master:
            print(f"iter {iter_num}: loss {lossf:.6f}, time {(t1 - t0) * 1000:.2f}ms", flush=True)
        t0 = t1
        iter_num += 1
    if master:
        print(f"done: iter {iter_num}", flush=True)
    if ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
