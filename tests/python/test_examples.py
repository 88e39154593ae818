"""The examples run as part of the test command, and xent under TRL's SFTTrainer.

examples/hf_trainer_tiny.py fine-tunes a tiny model with Trainer and
apply_xent on a synthetic data set (it exits non-zero if the model did not
learn). The SFTTrainer test trains the same kind of model with and without
compute_loss_func=xent.transformers.compute_loss_func and compares the
logged losses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_hf_trainer_example_learns():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import xent

    env = dict(os.environ)
    src = os.path.join(REPO, "python")
    if os.path.abspath(xent.__file__).startswith(src + os.sep):  # the same xent as this process
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # the CPU run the example documents
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "hf_trainer_tiny.py"),
                        "--quiet"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "training loss: first logged" in r.stdout


def _sft_losses(compute_loss_func):
    import datasets
    import torch
    import transformers
    import trl
    from tokenizers import Tokenizer, models, pre_tokenizers

    v = 96
    vocab = {f"t{i}": i for i in range(v)}
    vocab.update({"[PAD]": v, "[EOS]": v + 1})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[PAD]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]",
                                               eos_token="[EOS]")
    cfg = transformers.LlamaConfig(vocab_size=v + 2, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   pad_token_id=v, eos_token_id=v + 1)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": ((torch.randint(0, v, (1,), generator=g) + torch.arange(24)) % v)
             .tolist()} for _ in range(256)]
    with tempfile.TemporaryDirectory() as d:
        args = trl.SFTConfig(output_dir=d, max_steps=20, per_device_train_batch_size=16,
                             learning_rate=3e-3, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, logging_steps=5, seed=0)
        trainer = trl.SFTTrainer(model=model, args=args,
                                 train_dataset=datasets.Dataset.from_list(rows),
                                 processing_class=tok, compute_loss_func=compute_loss_func)
        trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_sft_trainer_with_xent_loss_matches_stock():
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    import xent.transformers as xtf

    ours = _sft_losses(xtf.compute_loss_func)
    stock = _sft_losses(None)
    assert len(ours) == len(stock) == 4
    for a, b in zip(ours, stock):
        assert abs(a - b) <= 2e-3 * abs(b), (ours, stock)
    assert ours[-1] < ours[0]
