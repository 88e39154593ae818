"""xent in Hugging Face transformers: one call puts xent's losses under a causal LM.

Usage::

    import xent.transformers
    model = AutoModelForCausalLM.from_pretrained(...)
    xent.transformers.apply_xent(model)          # or apply_xent(LlamaForCausalLM) before
    trainer = Trainer(model=model, ...)          # building it, or apply_xent_to_llama()
    trainer.train()

Two modes, both on by default:

* **Fused linear** (``fused_linear_cross_entropy=True``): in training (``model.train()``,
  grad enabled, labels given) the LM head and the loss run as xent's fused linear
  cross-entropy: the (batch, seq, vocab) logits are never built, and the output's
  ``logits`` is None. The head's weight is read inside the head's own call, so FSDP's
  gathered weight, tied embeddings and a PEFT LoRA adapter on the head (its dropout
  must be 0) all work. The model's final-logit softcapping (Gemma 2 and 3) and logit
  scaling become xent's options.
* **Cross-entropy** (``cross_entropy=True``): wherever the model does build logits with
  labels (evaluation, or training when the fused mode is off), its loss goes through
  ``xent.torch.cross_entropy`` on the logits in their own dtype, with no fp32 copy. In
  training xent writes the gradient over the logits, so ``outputs.logits`` then holds
  the gradient, not the logits (clone them first if you need them).

Both follow transformers' causal-LM conventions: labels shifted inside the loss (or
given pre-shifted as ``shift_labels``), ``ignore_index`` -100, and
``num_items_in_batch`` (Trainer's gradient accumulation: a sum divided by it). One
difference: a batch with no label to predict gives a loss of 0, not NaN.

Trainer: ``apply_xent(model)`` before ``Trainer(model=model, ...)``, or
``Trainer(..., compute_loss_func=xent.transformers.compute_loss_func)`` (the
cross-entropy mode only: Trainer has built the logits by then). TRL's SFTTrainer:
``SFTTrainer(..., compute_loss_func=xent.transformers.compute_loss_func)``; TRL 1.x
otherwise scores SFT batches with its own fused LM head, which replaces the model's
loss.

A model that cannot be patched (a family not listed in ``FAMILIES``, or a forward that
does not call its output embedding exactly once) raises instead of training with the
stock loss.
"""

from __future__ import annotations

import functools
import types
from typing import Dict, Optional, Tuple

import torch

from . import torch as xt

__all__ = [
    "FAMILIES",
    "apply_xent",
    "causal_lm_loss",
    "compute_loss_func",
] + [f"apply_xent_to_{name}" for name in ("llama", "mistral", "qwen2", "qwen3", "gemma2",
                                           "gemma3", "phi3", "granite")]

# model_type -> the causal-LM classes of transformers that apply_xent patches.
FAMILIES: Dict[str, Tuple[str, ...]] = {
    "llama": ("LlamaForCausalLM",),
    "mistral": ("MistralForCausalLM",),
    "qwen2": ("Qwen2ForCausalLM",),
    "qwen3": ("Qwen3ForCausalLM",),
    "gemma2": ("Gemma2ForCausalLM",),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"),
    "phi3": ("Phi3ForCausalLM",),
    "granite": ("GraniteForCausalLM",),  # its logits divided by config.logits_scaling
}
_CLASS_NAMES = {c: family for family, classes in FAMILIES.items() for c in classes}


# ---------------------------------------------------------------------------
# The losses
# ---------------------------------------------------------------------------


def _shifted(labels: torch.Tensor, shift_labels: Optional[torch.Tensor], ignore_index: int):
    """transformers' causal shift: position t predicts label t + 1 (the last
    position predicts nothing), unless the labels come pre-shifted."""
    if shift_labels is not None:
        return shift_labels
    return torch.nn.functional.pad(labels[..., 1:], (0, 1), value=ignore_index)


def _reduce(loss: torch.Tensor, num_items_in_batch):
    if num_items_in_batch is None:
        return loss
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def causal_lm_loss(logits, labels, vocab_size: int, num_items_in_batch=None,
                   ignore_index: int = -100, shift_labels=None, **kwargs) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` through xent: the logits in their own
    dtype (no fp32 copy), the same shift, ignore_index and num_items_in_batch
    rule. In training the gradient is written over ``logits``."""
    target = _shifted(labels, shift_labels, ignore_index).to(logits.device)
    loss = xt.cross_entropy(logits.reshape(-1, vocab_size), target.reshape(-1),
                            ignore_index=ignore_index,
                            reduction="sum" if num_items_in_batch is not None else "mean")
    return _reduce(loss.float(), num_items_in_batch)


def compute_loss_func(outputs, labels, num_items_in_batch=None):
    """Trainer's (and TRL's) ``compute_loss_func``: the causal-LM loss of
    ``outputs.logits`` against ``labels`` through xent."""
    logits = outputs["logits"] if isinstance(outputs, dict) else outputs.logits
    return causal_lm_loss(logits, labels, logits.shape[-1], num_items_in_batch=num_items_in_batch)


# ---------------------------------------------------------------------------
# The fused linear mode: the head computes the loss inside its own call
# ---------------------------------------------------------------------------


class _Pending:
    """What the patched forward hands the head for one call."""

    def __init__(self, labels, shift_labels, num_items_in_batch, ignore_index, softcap, scale):
        self.labels, self.shift_labels = labels, shift_labels
        self.num_items_in_batch, self.ignore_index = num_items_in_batch, ignore_index
        self.softcap, self.scale = softcap, scale
        self.loss = None
        self.calls = 0


def _head_weight(head: torch.nn.Module):
    """The head's effective (weight, bias): a PEFT LoRA head's adapters folded
    in (differentiably), so the fused loss sees what the head's own call does."""
    if hasattr(head, "base_layer") and hasattr(head, "lora_A"):
        base = head.base_layer
        weight, bias = base.weight, base.bias
        if getattr(head, "merged", False) or getattr(head, "disable_adapters", False):
            return weight, bias
        for name in head.active_adapters:
            if name not in head.lora_A:
                continue
            drop = head.lora_dropout[name]
            if isinstance(drop, torch.nn.Dropout) and drop.p > 0 and head.training:
                raise NotImplementedError(
                    "xent.transformers: the LM head's LoRA adapter has dropout "
                    f"{drop.p}; the fused linear loss cannot apply dropout on the adapter's path "
                    "alone. Use lora_dropout=0 for the head, or apply_xent(..., "
                    "fused_linear_cross_entropy=False)")
            a, b = head.lora_A[name].weight, head.lora_B[name].weight
            weight = weight + (b @ a) * head.scaling[name]
        return weight, bias
    if not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise TypeError(f"xent.transformers: the output embedding {type(head).__name__} has no "
                        "weight tensor the fused linear loss can use")
    return head.weight, getattr(head, "bias", None)


def _head_forward(self, hidden_states, *args, **kwargs):
    """Installed as the head module's forward: the fused loss when the patched
    model's forward left a pending call, the head's own forward otherwise."""
    pending = self.__dict__.get("_xent_pending")
    if pending is None:
        return type(self).forward(self, hidden_states, *args, **kwargs)
    pending.calls += 1
    weight, bias = _head_weight(self)
    h = hidden_states
    if pending.scale != 1.0:
        h = h * pending.scale
    target = _shifted(pending.labels, pending.shift_labels, pending.ignore_index)
    target = target.to(h.device)
    if target.shape != h.shape[:-1]:
        raise RuntimeError(
            f"xent.transformers: labels of shape {tuple(target.shape)} do not match the hidden "
            f"states {tuple(h.shape)} at the head (logits_to_keep with labels?)")
    reduction = "sum" if pending.num_items_in_batch is not None else "mean"
    loss = xt.fused_linear_cross_entropy(h.reshape(-1, h.shape[-1]), weight,
                                         target.reshape(-1), bias,
                                         ignore_index=pending.ignore_index,
                                         reduction=reduction, softcap=pending.softcap)
    pending.loss = _reduce(loss, pending.num_items_in_batch)
    # The model's forward goes on with empty logits (its softcap and scaling
    # ops are no-ops on them); the patched forward returns logits=None.
    return hidden_states.new_empty(hidden_states.shape[:-1] + (0,))


def _install_head(head: torch.nn.Module) -> None:
    if head.__dict__.get("_xent_head") is not True:
        head.forward = types.MethodType(_head_forward, head)
        head._xent_head = True


def _logit_options(config) -> Tuple[Optional[float], float]:
    """(softcap, scale) the model applies after its head, from the config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    softcap = getattr(text, "final_logit_softcapping", None)
    scale = 1.0
    if getattr(text, "logit_scale", None) is not None:  # Cohere: multiplies
        scale = float(text.logit_scale)
    elif getattr(text, "logits_scaling", None) is not None:  # Granite: divides
        scale = 1.0 / float(text.logits_scaling)
    return (None if softcap is None else float(softcap)), scale


def _fused_forward(original):
    @functools.wraps(original)
    def forward(self, *args, labels=None, **kwargs):
        shift_labels = kwargs.get("shift_labels")
        if (labels is None and shift_labels is None) or not (self.training and
                                                             torch.is_grad_enabled()):
            return original(self, *args, labels=labels, **kwargs)
        head = self.get_output_embeddings()
        if head is None:
            raise RuntimeError(f"xent.transformers: {type(self).__name__} has no output "
                               "embedding for the fused linear loss")
        _install_head(head)
        softcap, scale = _logit_options(self.config)
        kwargs.pop("shift_labels", None)
        pending = _Pending(labels, shift_labels, kwargs.get("num_items_in_batch"),
                           kwargs.get("ignore_index", -100), softcap, scale)
        head._xent_pending = pending
        try:
            out = original(self, *args, labels=None, **kwargs)
        finally:
            head._xent_pending = None
        if pending.calls != 1:
            raise RuntimeError(
                f"xent.transformers: {type(self).__name__}.forward called its output embedding "
                f"{pending.calls} times (expected once): this version of transformers changed the "
                "forward, and the fused linear loss cannot apply. Use apply_xent(..., "
                "fused_linear_cross_entropy=False) or compute_loss_func")
        out["loss"] = pending.loss
        out["logits"] = None
        return out

    forward._xent_original = original
    return forward


# ---------------------------------------------------------------------------
# Patching
# ---------------------------------------------------------------------------


def _loss_property():
    def get(self):
        return self.__dict__.get("_loss_function", causal_lm_loss)

    def set_(self, value):
        self.__dict__["_loss_function"] = value

    return property(get, set_)


def _resolve(model_or_class):
    """(the transformers class, the instance or None)."""
    if isinstance(model_or_class, type):
        return model_or_class, None
    model = model_or_class
    if hasattr(model, "get_base_model"):  # a PEFT model: patch the transformers model inside
        model = model.get_base_model()
    return type(model), model


def _check_family(cls) -> str:
    for klass in cls.__mro__:
        if klass.__name__ in _CLASS_NAMES:
            return _CLASS_NAMES[klass.__name__]
    known = ", ".join(sorted(_CLASS_NAMES))
    raise ValueError(
        f"xent.transformers has no patch for {cls.__name__} (patched: {known}). For another "
        "causal LM pass compute_loss_func=xent.transformers.compute_loss_func to Trainer, or "
        "call xent.torch.fused_linear_cross_entropy from your own forward.")


def apply_xent(model_or_class, cross_entropy: bool = True,
               fused_linear_cross_entropy: bool = True):
    """Patch a causal LM (an instance, also inside a PEFT model) or its class
    (every model built from it afterwards) to use xent's losses. Returns what
    it was given. Raises ValueError for a family it cannot patch."""
    cls, model = _resolve(model_or_class)
    _check_family(cls)
    if model is None:
        if cross_entropy:
            cls.loss_function = _loss_property()
        if fused_linear_cross_entropy and not hasattr(cls.forward, "_xent_original"):
            cls.forward = _fused_forward(cls.forward)
        return model_or_class
    if cross_entropy:
        model.loss_function = causal_lm_loss
    if fused_linear_cross_entropy:
        current = model.__dict__.get("forward")
        if current is None or not hasattr(getattr(current, "__func__", current), "_xent_original"):
            base = type(model).forward
            base = getattr(base, "_xent_original", base)
            model.forward = types.MethodType(_fused_forward(base), model)
    return model_or_class


def _family_patch(family: str):
    def apply(model=None, cross_entropy: bool = True, fused_linear_cross_entropy: bool = True):
        import transformers

        if model is not None:
            cls, _ = _resolve(model)
            if _check_family(cls) != family:
                raise ValueError(f"apply_xent_to_{family}: {cls.__name__} is not a {family} model")
            return apply_xent(model, cross_entropy, fused_linear_cross_entropy)
        for name in FAMILIES[family]:
            cls = getattr(transformers, name, None)
            if cls is None:
                raise ValueError(f"apply_xent_to_{family}: this transformers "
                                 f"({transformers.__version__}) has no {name}")
            apply_xent(cls, cross_entropy, fused_linear_cross_entropy)
        return None

    apply.__name__ = f"apply_xent_to_{family}"
    apply.__doc__ = (f"apply_xent for {family} models: the given model, or (model=None) the "
                     f"classes {', '.join(FAMILIES[family])} before any is built.")
    return apply


apply_xent_to_llama = _family_patch("llama")
apply_xent_to_mistral = _family_patch("mistral")
apply_xent_to_qwen2 = _family_patch("qwen2")
apply_xent_to_qwen3 = _family_patch("qwen3")
apply_xent_to_gemma2 = _family_patch("gemma2")
apply_xent_to_gemma3 = _family_patch("gemma3")
apply_xent_to_phi3 = _family_patch("phi3")
apply_xent_to_granite = _family_patch("granite")
