"""A Hugging Face Trainer job for tests/gpu/ckpt_trainers.sh: transformers' own Trainer and
TrainingArguments on a small GPT-2 built from GPT2Config (nothing downloaded: no tokenizer, no
weights; synthetic token data from a fixed seed). The Trainer writes its checkpoints as usual:
OUTPUT_DIR/checkpoint-N/ every --save_steps steps, trainer_state.json last. It knows nothing of
muster.

    python3 hf_gpt2.py --output_dir DIR [--resume_from_checkpoint DIR/checkpoint-N] [--max_steps 600]

--resume_from_checkpoint is handed to trainer.train(resume_from_checkpoint=...), which restores
the model, optimizer, scheduler and RNG states and skips the batches already seen.
Under a launcher that sets LOCAL_RANK (torchrun, muster) TrainingArguments joins a process group
and the Trainer wraps the model in DDP; the tests run one worker.

For a loss comparison across a resume: dropout 0, eager attention (plain matmuls and softmax,
deterministic with CUBLAS_WORKSPACE_CONFIG), cudnn deterministic,
torch.use_deterministic_algorithms(True, warn_only=True), the model built after set_seed(seed).

Output, one line each, flushed (the loss of each optimizer step with 6 decimals, as computed by
Trainer.training_step, not the rounded figure of the Trainer's own log):
    start: step N, pid P, resume_from PATH|none, ...
    step N loss X.XXXXXX time T ms
    saved checkpoint-N
    done: step N
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,  # noqa: E402
                          TrainingArguments)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--output_dir", required=True)
    p.add_argument("--resume_from_checkpoint", default=None)
    p.add_argument("--max_steps", type=int, default=600)
    p.add_argument("--save_steps", type=int, default=150)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--block_size", type=int, default=128)
    p.add_argument("--samples", type=int, default=8192, help="sequences in the data set (one epoch)")
    p.add_argument("--vocab_size", type=int, default=4096)
    p.add_argument("--n_layer", type=int, default=6)
    p.add_argument("--n_head", type=int, default=6)
    p.add_argument("--n_embd", type=int, default=384)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--cpu", action="store_true", help="train on the CPU (use_cpu)")
    return p.parse_args()


class PhraseData(torch.utils.data.Dataset):
    """SAMPLES sequences of BLOCK tokens from a corpus of random 8-token phrases strung together
    in random order (the next token inside a phrase is predictable, so the loss falls)."""

    def __init__(self, a):
        g = torch.Generator().manual_seed(a.seed)
        table = torch.randint(a.vocab_size, (512, 8), generator=g)
        order = torch.randint(512, ((a.samples * a.block_size) // 8 + 1,), generator=g)
        corpus = table[order].reshape(-1)
        self.x = corpus[: a.samples * a.block_size].view(a.samples, a.block_size).clone()

    def __len__(self):
        return self.x.size(0)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class LossTrainer(Trainer):
    """The Trainer, remembering the loss of the last training step for the printer."""

    last_loss = float("nan")

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.last_loss = loss.detach().float().item()
        return loss


class Printer(TrainerCallback):
    def __init__(self):
        self.trainer = None
        self.t0 = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            t = time.time()
            print(f"step {state.global_step} loss {self.trainer.last_loss:.6f} time {(t - self.t0) * 1000:.2f} ms",
                  flush=True)
            self.t0 = t

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            print(f"saved checkpoint-{state.global_step}", flush=True)


def training_args(a):
    """TrainingArguments with the keywords this transformers version has (4.x and 5.x differ)."""
    cuda = torch.cuda.is_available() and not a.cpu
    want = dict(
        output_dir=a.output_dir, max_steps=a.max_steps, per_device_train_batch_size=a.batch_size,
        learning_rate=a.learning_rate, lr_scheduler_type="cosine", warmup_steps=30, weight_decay=0.1,
        max_grad_norm=1.0, save_strategy="steps", save_steps=a.save_steps, save_only_model=False,
        logging_strategy="steps", logging_steps=a.save_steps, report_to="none", disable_tqdm=True,
        seed=a.seed, data_seed=a.seed, dataloader_num_workers=0, eval_strategy="no",
        evaluation_strategy="no", bf16=cuda and torch.cuda.is_bf16_supported(), use_cpu=not cuda,
        no_cuda=not cuda, save_safetensors=True, overwrite_output_dir=False)
    known = getattr(TrainingArguments, "__dataclass_fields__", {})
    kw = {k: v for k, v in want.items() if k in known}
    if "use_cpu" in kw:
        kw.pop("no_cuda", None)  # deprecated where use_cpu exists
    if "eval_strategy" in kw:
        kw.pop("evaluation_strategy", None)
    return TrainingArguments(**kw)


def main():
    a = parse()
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    start = 0
    if a.resume_from_checkpoint:
        with open(os.path.join(a.resume_from_checkpoint, "trainer_state.json")) as f:
            start = json.load(f)["global_step"]
    args = training_args(a)
    transformers.set_seed(a.seed)
    cfg = GPT2Config(vocab_size=a.vocab_size, n_positions=a.block_size, n_embd=a.n_embd, n_layer=a.n_layer,
                     n_head=a.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                     bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    try:
        cfg._attn_implementation = "eager"
    except Exception:  # noqa: BLE001 (versions where it is read-only: the keyword above did it)
        pass
    model = GPT2LMHeadModel(cfg)
    printer = Printer()
    trainer = LossTrainer(model=model, args=args, train_dataset=PhraseData(a), callbacks=[printer])
    printer.trainer = trainer
    if args.process_index == 0:
        print(f"start: step {start}, pid {os.getpid()}, resume_from {a.resume_from_checkpoint or 'none'}, "
              f"{sum(p.numel() for p in model.parameters())} parameters, transformers {transformers.__version__}, "
              f"torch {torch.__version__}, device {args.device}, bf16 {args.bf16}, "
              f"attn {getattr(model.config, '_attn_implementation', '?')}, world {args.world_size}", flush=True)
    trainer.train(resume_from_checkpoint=a.resume_from_checkpoint)
    if args.process_index == 0:
        print(f"done: step {trainer.state.global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
