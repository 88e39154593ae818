"""xent.transformers: tiny random models of every patched family against the
stock transformers model, in both modes.

The models are built from configs here (no downloads). For each family and
mode: the loss and every parameter's gradient of one step equal the stock
model's (with and without num_items_in_batch), 20 SGD steps give the same
losses, evaluation returns the same logits and loss, and greedy generation
the same tokens. CPU always; CUDA (bf16) on a GPU.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import xent.transformers as xtf  # noqa: E402
from torch_helpers import requires_cuda  # noqa: E402

V, H = 257, 64


def _config(family):
    common = dict(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "mistral":
        return transformers.MistralConfig(**common, sliding_window=None)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "qwen3":
        return transformers.Qwen3Config(**common, head_dim=16)
    if family == "gemma2":
        return transformers.Gemma2Config(**common, head_dim=16, final_logit_softcapping=5.0,
                                         attn_implementation="eager")
    if family == "gemma3":
        return transformers.Gemma3TextConfig(**common, head_dim=16, final_logit_softcapping=5.0)
    if family == "phi3":
        return transformers.Phi3Config(**common)
    if family == "granite":  # logit scaling: the logits divided by 4
        return transformers.GraniteConfig(**common, logits_scaling=4.0)
    raise KeyError(family)


def _model(family, seed, device, dtype):
    torch.manual_seed(seed)
    cfg = _config(family)
    cls = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
           "qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
           "gemma2": transformers.Gemma2ForCausalLM, "gemma3": transformers.Gemma3ForCausalLM,
           "phi3": transformers.Phi3ForCausalLM,
           "granite": transformers.GraniteForCausalLM}[family]
    return cls(cfg).to(device=device, dtype=dtype)


def _batch(rng, device, b=2, t=24):
    ids = torch.from_numpy(rng.integers(3, V, (b, t))).to(device)
    labels = ids.clone()
    labels[0, :5] = -100  # a prompt that is not trained on
    return ids, labels


FAMILIES = list(xtf.FAMILIES)
MODES = {"fused": dict(cross_entropy=False, fused_linear_cross_entropy=True),
         "cross_entropy": dict(cross_entropy=True, fused_linear_cross_entropy=False)}
DEVS = [("cpu", torch.float32), pytest.param("cuda", torch.bfloat16, marks=requires_cuda)]


def _tol(dtype):
    return (2e-5, 2e-5) if dtype == torch.float32 else (3e-2, 3e-2)


def _close(a, b, dtype, what):
    rtol, atol = _tol(dtype)
    a, b = a.detach().double(), b.detach().double()
    scale = b.abs().max().item() or 1.0
    err = (a - b).abs().max().item()
    assert err <= atol * scale + rtol * 0, f"{what}: max error {err:.3e} (scale {scale:.3e})"


@pytest.mark.parametrize("device,dtype", DEVS)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("family", FAMILIES)
def test_step_matches_stock(rng, seed, family, mode, device, dtype):
    stock = _model(family, seed, device, dtype)
    ours = copy.deepcopy(stock)
    xtf.apply_xent(ours, **MODES[mode])
    stock.train(), ours.train()
    ids, labels = _batch(rng, device)
    for num_items in (None, torch.tensor(30, device=device)):
        kw = {} if num_items is None else {"num_items_in_batch": num_items}
        a = stock(input_ids=ids, labels=labels, **kw)
        b = ours(input_ids=ids, labels=labels, **kw)
        if mode == "fused":
            assert b.logits is None
        _close(b.loss, a.loss, dtype, f"{family} {mode} loss (num_items={num_items})")
        a.loss.backward()
        b.loss.backward()
        for (name, p), q in zip(stock.named_parameters(), ours.parameters()):
            if p.grad is None:
                assert q.grad is None, name
                continue
            _close(q.grad, p.grad, dtype, f"{family} {mode} grad {name}")
        stock.zero_grad(), ours.zero_grad()


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("family", FAMILIES)
def test_training_loop_and_generation(rng, seed, family, mode):
    stock = _model(family, seed, "cpu", torch.float32)
    ours = copy.deepcopy(stock)
    xtf.apply_xent(ours, **MODES[mode])
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (stock, ours)]
    data = [_batch(rng, "cpu") for _ in range(2)]
    batches = [data[i % 2] for i in range(20)]  # learnable: two batches seen ten times
    for m, opt in zip((stock, ours), opts):
        m.train()
        m.losses = []
        for ids, labels in batches:
            loss = m(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            m.losses.append(loss.item())
    np.testing.assert_allclose(ours.losses, stock.losses, rtol=1e-4, atol=1e-5)
    assert ours.losses[-1] < ours.losses[0]
    # evaluation and generation on the same parameters: the stock model's logits,
    # loss and tokens
    ours.load_state_dict(stock.state_dict())
    stock.eval(), ours.eval()
    ids, labels = _batch(rng, "cpu")
    with torch.no_grad():
        a, b = stock(input_ids=ids, labels=labels), ours(input_ids=ids, labels=labels)
    assert b.logits is not None
    torch.testing.assert_close(b.logits, a.logits)
    assert abs(a.loss.item() - b.loss.item()) <= 1e-4 * abs(a.loss.item())
    prompt = ids[:1, :6]
    g_a = stock.generate(prompt, max_new_tokens=8, do_sample=False)
    g_b = ours.generate(prompt, max_new_tokens=8, do_sample=False)
    assert torch.equal(g_a, g_b)


def test_class_patch_and_family_functions(rng, seed):
    cls = transformers.Qwen2ForCausalLM
    saved_forward = cls.forward
    try:
        xtf.apply_xent_to_qwen2()
        assert hasattr(cls.forward, "_xent_original")
        m = _model("qwen2", seed, "cpu", torch.float32)
        ids, labels = _batch(rng, "cpu")
        out = m(input_ids=ids, labels=labels)
        assert out.logits is None and out.loss.requires_grad
        xtf.apply_xent_to_qwen2()  # twice: not wrapped twice
        assert not hasattr(cls.forward._xent_original, "_xent_original")
        with pytest.raises(ValueError, match="not a qwen2"):
            xtf.apply_xent_to_qwen2(_model("llama", seed, "cpu", torch.float32))
    finally:
        cls.forward = saved_forward
        if "loss_function" in cls.__dict__:
            del cls.loss_function


def test_unknown_family_fails_loudly():
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match="no patch for GPT2LMHeadModel"):
        xtf.apply_xent(transformers.GPT2LMHeadModel(cfg))


def test_tied_embeddings_and_lora_head(rng, seed):
    peft = pytest.importorskip("peft")
    cfg = _config("llama")
    cfg.tie_word_embeddings = True
    torch.manual_seed(seed)
    base = transformers.LlamaForCausalLM(cfg)
    assert base.lm_head.weight is base.model.embed_tokens.weight
    lcfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                           target_modules=["q_proj", "v_proj", "lm_head"])
    stock = peft.get_peft_model(copy.deepcopy(base), lcfg)
    ours = peft.get_peft_model(copy.deepcopy(base), lcfg)
    ours.load_state_dict(stock.state_dict())
    for m in (stock, ours):  # non-zero B matrices, so the adapters matter
        for n, p in m.named_parameters():
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(1))
    xtf.apply_xent(ours)
    stock.train(), ours.train()
    ids, labels = _batch(rng, "cpu")
    a, b = stock(input_ids=ids, labels=labels), ours(input_ids=ids, labels=labels)
    assert b.logits is None
    _close(b.loss, a.loss, torch.float32, "LoRA loss")
    a.loss.backward()
    b.loss.backward()
    for (n, p), q in zip(stock.named_parameters(), ours.parameters()):
        if p.requires_grad:
            _close(q.grad, p.grad, torch.float32, f"LoRA grad {n}")


def test_compute_loss_func_matches_stock(rng, seed):
    stock = _model("llama", seed, "cpu", torch.float32)
    ids, labels = _batch(rng, "cpu")
    out = stock(input_ids=ids)
    ref = stock.loss_function(out.logits.detach().clone(), labels, V)
    got = xtf.compute_loss_func(type(out)(logits=out.logits.detach().clone()), labels)
    assert abs(got.item() - ref.item()) <= 1e-5 * ref.item()
    got = xtf.compute_loss_func({"logits": out.logits.detach().clone()}, labels,
                                num_items_in_batch=torch.tensor(17))
    ref = stock.loss_function(out.logits.detach().clone(), labels, V, num_items_in_batch=17)
    assert abs(got.item() - ref.item()) <= 1e-5 * ref.item()


def _fsdp_worker(rank, world, path, out):
    import pickle

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    result = {}
    stock = ours = a = b = None
    try:
        torch.manual_seed(0)
        stock = transformers.LlamaForCausalLM(_config("llama"))
        ours = copy.deepcopy(stock)
        mesh = init_device_mesh("cpu", (world,))
        for layer in ours.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(ours, mesh=mesh)  # the head's weight is sharded over the ranks
        xtf.apply_xent(ours)
        ids = torch.randint(3, V, (2, 16), generator=torch.Generator().manual_seed(1))
        a = stock(input_ids=ids, labels=ids)
        b = ours(input_ids=ids, labels=ids)
        a.loss.backward()
        b.loss.backward()
        result["loss"] = (b.loss.item(), a.loss.item(), b.logits is None)
        worst = 0.0
        for (n, p), q in zip(stock.named_parameters(), ours.parameters()):
            g = q.grad.full_tensor() if hasattr(q.grad, "full_tensor") else q.grad
            worst = max(worst, (g - p.grad).abs().max().item() / max(p.grad.abs().max().item(),
                                                                     1e-30))
        result["worst_grad"] = worst
    except Exception:
        import traceback
        result["exception"] = traceback.format_exc()
    with open(f"{out}.{rank}", "wb") as f:
        pickle.dump(result, f)
    # Tear down together and with nothing left in flight: a rank that destroys
    # its group while the other still talks to it, or with FSDP's tensors still
    # held by gloo's threads, can abort at exit (seen once in CI).
    del stock, ours, a, b
    import gc
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def test_fsdp_sharded_head(tmp_path):
    """FSDP2 (fully_shard) over 2 CPU ranks with gloo: the head's weight is
    gathered inside its own call, where the fused linear loss reads it; loss
    and every gradient match the unsharded stock model."""
    import pickle

    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    pytest.importorskip("torch.distributed.fsdp")
    out = str(tmp_path / "out")
    mp.start_processes(_fsdp_worker, args=(2, str(tmp_path / "init"), out), nprocs=2,
                       join=True, start_method="spawn")
    for r in range(2):
        with open(f"{out}.{r}", "rb") as f:
            res = pickle.load(f)
        assert "exception" not in res, res.get("exception")
        got, want, logits_none = res["loss"]
        assert logits_none and abs(got - want) <= 1e-5 * abs(want)
        assert res["worst_grad"] < 1e-5, res


@pytest.mark.parametrize("mode", list(MODES))
def test_shift_labels_given(rng, seed, mode):
    """Pre-shifted labels (context or sequence parallelism) are scored as given."""
    stock = _model("llama", seed, "cpu", torch.float32)
    ours = copy.deepcopy(stock)
    xtf.apply_xent(ours, **MODES[mode])
    stock.train(), ours.train()
    ids, labels = _batch(rng, "cpu")
    shifted = torch.roll(labels, -1, dims=1)
    shifted[:, -1] = -100
    shifted[1, 3] = -100
    a = stock(input_ids=ids, labels=labels, shift_labels=shifted)
    b = ours(input_ids=ids, labels=labels, shift_labels=shifted)
    _close(b.loss, a.loss, torch.float32, f"{mode} loss with shift_labels")
    a.loss.backward()
    b.loss.backward()
    for (name, p), q in zip(stock.named_parameters(), ours.parameters()):
        _close(q.grad, p.grad, torch.float32, f"{mode} grad {name} with shift_labels")
