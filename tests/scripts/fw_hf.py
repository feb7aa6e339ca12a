"""A tiny Hugging Face Trainer job on the CPU: ``fw_hf.py OUT_DIR MODE[,MODE...] [full]``; a RESULT line per mode and rank.

A one-layer GPT-2 built from a config (no download), synthetic tokens. Modes:
``none`` (plain Trainer), ``callback`` (collector.hf.StallwatchCallback). ``full``
adds evaluate() and predict() after train(). Under torchrun each rank trains on its shard.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from fw_common import result
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging

warnings.filterwarnings("ignore")
logging.set_verbosity_error()
OUT, MODES = sys.argv[1], sys.argv[2].split(",")
FULL = "full" in sys.argv[3:]
WORKERS = int(next((a.split("=")[1] for a in sys.argv[3:] if a.startswith("workers=")), "0"))
DB = os.path.join(OUT, "hf.sqlite")


class Tokens(Dataset):  # type: ignore[type-arg]
    """Item i: 8 tokens from a generator seeded by i; remembers which items this process loaded."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, []  # type: ignore[var-annotated]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.seen.append(i)
        ids = torch.randint(0, 32, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


for mode in MODES:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=32, n_positions=8))
    args = TrainingArguments(
        output_dir=os.path.join(OUT, mode),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_train_epochs=2,
        learning_rate=0.01,
        seed=0,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=WORKERS,
        ddp_backend="gloo" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else None,
    )
    callbacks = []
    if mode == "callback":
        from collector.hf import StallwatchCallback

        callbacks.append(StallwatchCallback(DB, gpu_hz=0, host_hz=0))
    train, held_out = Tokens(64), Tokens(16)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=held_out, callbacks=callbacks)
    loss = trainer.train().training_loss
    if FULL:
        trainer.evaluate()
        trainer.predict(held_out)
    result(mode, args.process_index, model, train.seen, loss)
