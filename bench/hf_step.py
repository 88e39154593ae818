#!/usr/bin/env python3
"""hf_step.py - one training step of a 1B-shaped Hugging Face model on the GPU with the
stock loss, xent's cross-entropy and xent's fused linear loss: peak memory and time.

The model is LlamaForCausalLM built from a config shaped like Llama 3.2 1B (hidden 2048,
16 layers, 32 heads, 8 KV heads, intermediate 8192, V = 128256, tied embeddings),
random-initialised in bf16, with BT = 8192 tokens (batch 4 x 2048). A step is forward with
labels and backward (no optimizer); .grad is reset between steps. Peak memory is
torch.cuda.max_memory_allocated() over one step, after reset, with the model and its
inputs already allocated; "over model" subtracts what was allocated before the step.

    python3 bench/hf_step.py [--batch 4 --seq 2048] [--out bench/results/h200-hf-step.csv]
"""

import argparse
import copy
import csv
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import source_tree  # noqa: E402

source_tree.use_xent()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default=None, help="CSV of the results")
    args = ap.parse_args(argv)
    import torch
    import transformers

    import xent.transformers as xtf

    if not torch.cuda.is_available():
        print("hf_step.py: no GPU; nothing measured")
        return 0
    cfg = transformers.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                   num_hidden_layers=args.layers, num_attention_heads=32,
                                   num_key_value_heads=8, max_position_embeddings=args.seq,
                                   tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in base.parameters())
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device="cuda")
    labels = ids.clone()
    labels[:, :16] = -100
    print(f"hf_step.py  {time.strftime('%Y-%m-%d %H:%M:%S')}  {torch.cuda.get_device_name()}  "
          f"torch {torch.__version__}  transformers {transformers.__version__}")
    print(f"LlamaForCausalLM, {n_params / 1e9:.2f} B parameters (bf16), BT = "
          f"{args.batch} x {args.seq} = {args.batch * args.seq}, V = {cfg.vocab_size}")
    print(f"{'loss':<28}{'step ms':>9}{'peak GiB':>10}{'over model GiB':>16}{'loss value':>12}")
    rows = []
    for name, kw in (("transformers (stock)", None),
                     ("xent cross-entropy", dict(cross_entropy=True,
                                                 fused_linear_cross_entropy=False)),
                     ("xent fused linear", dict(cross_entropy=True,
                                                fused_linear_cross_entropy=True))):
        model = copy.deepcopy(base)
        if kw is not None:
            xtf.apply_xent(model, **kw)
        model.train()
        times, peak, over, loss_v = [], 0, 0, 0.0
        for i in range(args.warmup + args.iters):
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
            peak = torch.cuda.max_memory_allocated()
            over = peak - before
            loss_v = loss.item()
            del loss
        times.sort()
        med = times[len(times) // 2]
        print(f"{name:<28}{med:>9.1f}{peak / 2**30:>10.2f}{over / 2**30:>16.2f}{loss_v:>12.4f}")
        rows.append({"loss": name, "step_ms": f"{med:.2f}", "peak_gib": f"{peak / 2**30:.3f}",
                     "over_model_gib": f"{over / 2**30:.3f}", "loss_value": f"{loss_v:.5f}",
                     "bt": args.batch * args.seq, "vocab": cfg.vocab_size,
                     "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                     "transformers": transformers.__version__})
        del model
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
