#!/usr/bin/env python3
"""Fine-tune a tiny Llama-shaped model with Hugging Face's Trainer and xent's losses.

    python3 examples/hf_trainer_tiny.py               # about half a minute on a CPU
    python3 examples/hf_trainer_tiny.py --stock       # the same run with transformers' loss

The model is built from a config (random weights, nothing downloaded) and learns a
synthetic language: each sequence counts upwards from a random start, modulo the
vocabulary, so the next token is always the previous one plus one. One line,
apply_xent(model), puts xent's fused linear loss under training (the logits are never
built) and its cross-entropy under evaluation; Trainer shows its progress bar as usual.
The script prints the first and last training losses and the evaluation loss, and exits
with an error if the model did not learn.
"""

import argparse
import sys
import tempfile

import torch
import transformers

import xent.transformers


class Counting(torch.utils.data.Dataset):
    """Sequences s, s+1, s+2, ... (mod V); labels are the inputs (the model shifts them)."""

    def __init__(self, n, length, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        starts = torch.randint(0, vocab, (n, 1), generator=g)
        self.ids = (starts + torch.arange(length)) % vocab

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i].clone()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-steps", type=int, default=120)
    ap.add_argument("--stock", action="store_true", help="transformers' own loss (no xent)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)

    vocab = 96
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    if not args.stock:
        xent.transformers.apply_xent(model)  # the one line

    with tempfile.TemporaryDirectory() as out:
        training = transformers.TrainingArguments(
            output_dir=out, max_steps=args.max_steps, per_device_train_batch_size=16,
            gradient_accumulation_steps=2, learning_rate=3e-3, warmup_steps=10,
            logging_steps=10, report_to=[], save_strategy="no", use_cpu=not torch.cuda.is_available(),
            disable_tqdm=args.quiet, dataloader_num_workers=0, seed=0)
        trainer = transformers.Trainer(model=model, args=training,
                                       train_dataset=Counting(2048, 32, vocab, 1),
                                       eval_dataset=Counting(128, 32, vocab, 2))
        result = trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        evaluation = trainer.evaluate()
    print(f"training loss: first logged {losses[0]:.3f}, last {losses[-1]:.3f} "
          f"(train_loss {result.training_loss:.3f}); evaluation loss {evaluation['eval_loss']:.3f}")
    if not losses[-1] < 0.5 * losses[0]:
        print("the model did not learn the synthetic language", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
