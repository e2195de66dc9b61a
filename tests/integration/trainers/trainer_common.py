"""What the trainer-style scripts of this folder share: the model, the data, the seeding and the
final digest. Nothing here knows about muster; each script writes and finds its checkpoints the
way the trainer it imitates does (nanoGPT, HF Trainer, torch.distributed.checkpoint, Lightning).

Determinism: a run resumed from a checkpoint ends with the same weights, bit for bit, as one
that never stopped:
  * the batch of optimizer step S on rank R is a function of (seed, S, R) only;
  * dropout is reseeded from (seed, S, R) before each step;
  * one thread, torch.use_deterministic_algorithms(True);
  * with two ranks a gradient all-reduce adds two numbers, whatever the bucket layout.
"""
import hashlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn

VOCAB = 2048
D_MODEL = 256
SEQ = 8
BATCH = 2


class Block(nn.Module):
    def __init__(self, d, dropout):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.proj(torch.nn.functional.gelu(self.fc(self.ln(x)))))


class TinyLM(nn.Module):
    """A next-token model: embedding, MLP blocks, untied head. ~2.1 M parameters at the
    defaults (8.4 MB of float32; with Adam's two moments a checkpoint is ~25 MB)."""

    def __init__(self, vocab=VOCAB, d=D_MODEL, n_layer=2, dropout=0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(SEQ, d)
        self.blocks = nn.ModuleList([Block(d, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def setup(seed):
    """gloo process group from torchrun's environment (env://); returns (rank, world)."""
    torch.set_num_threads(1)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception:  # noqa: BLE001 - older torch: the CPU kernels used here are deterministic
        pass
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)  # the same initial weights on every rank (DDP broadcasts rank 0's)
    return rank, world


def batch(seed, step, rank):
    """The batch of optimizer step `step` on `rank`: a function of (seed, step, rank) only.
    Tokens follow strided runs plus 5 % noise: something to learn."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    stride = torch.randint(1, 7, (BATCH, 1), generator=g)
    seq = (start + stride * torch.arange(SEQ + 1)) % VOCAB
    noise = torch.rand(BATCH, SEQ + 1, generator=g) < 0.05
    seq = torch.where(noise, torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g), seq)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def reseed_step(seed, step, rank):
    """Dropout inside step `step` draws the same numbers in every run."""
    torch.manual_seed((seed + 17 * rank) * 1_000_003 + step)


def state_digest(model):
    """SHA-256 of a state_dict (a DDP module unwrapped): names and bytes, in sorted order."""
    if hasattr(model, "module"):
        model = model.module
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def env_rank():
    return int(os.environ.get("RANK", "0"))
