"""jacond.audit(model, images) and jacond.audit_state_dict(state): `jacond audit` from Python.

audit runs the model's own forward pass (eval mode, no gradients) with a forward pre-hook on each
block that keeps the tokens entering it, X_ℓ [m, n, d]; then, per layer and per image, the block's
weights (Block.from_timm of the model's state_dict, fp32 -> fp64) and X_ℓ[i] go to the core's
block_reports, exactly what `jacond audit` does in C++ (models/track/conditioning.cpp). The
DataFrame has audit.csv's columns: checkpoint, step, probe, layer, then the report columns.

What a model must look like: `model.blocks` a sequence of blocks with timm parameter names
(blocks.{l}.norm1, .attn.qkv, .attn.proj, .norm2, .mlp.fc1, .mlp.fc2), as timm's
VisionTransformer and jacond.vit.VisionTransformer. Per block it reads, when present:
  block.skip   the residuals (full | none | no-ffn-skip | no-sab-skip; default full, as timm)
  block.norm   "pre" (default) or "post"
  rezero_attn / rezero_mlp (ReZero's α₁, α₂) and ls1.gamma / ls2.gamma (timm's LayerScale):
               folded into W^O, b_O, W_2, b_2 by Block.from_timm (x + g∘(hW + b) = x + h(W diag g)
               + g∘b), analysed as a full block; any other blocks.{l}.* parameter (timm's
               attn.q_norm, ...) is a ValueError, not a silently different block
  attn.scale   the logit scale s of softmax(s · Q_h K_hᵀ) (timm's and jacond.vit's attribute), the
               Block's logit_scale; without one, 1/sqrt(d_h). One that is not a finite positive
               number is a ValueError naming the block
  norm1.eps, norm2.eps   the LayerNorms' ε (default 1e-6; ln_eps= overrides both): the Block has
               one ε, so two different ones are a ValueError naming the block
The number of heads comes from `heads=`, else model.num_heads / model.heads, else
block.attn.num_heads / block.attn.heads.
"""

import math
import re
import sys

import numpy as np

from . import _jacond
from .safetensors import _quote  # repr cut short: one-line messages


def _heads_of(model, heads):
    from . import _integer

    if heads is not None:
        return _integer(heads, "heads", 1)
    for owner in (model, model.blocks[0].attn if len(model.blocks) else None):
        for name in ("num_heads", "heads"):
            value = getattr(owner, name, None)
            if isinstance(value, int):
                return value
    raise ValueError("cannot tell the number of heads: pass heads=")


def _numpy_state(state):
    from . import as_fp64

    return {k: as_fp64(v, k) for k, v in state.items()}


def _logit_scale_of(block_module, layer):
    """The attention's logit scale s (softmax(s · Q_h K_hᵀ)): block.attn.scale, timm's and
    jacond.vit's multiplier of Q Kᵀ, which is the Block's logit_scale; 0 (the Block's 1/sqrt(d_h))
    without one. ValueError naming the block for a scale that is not a finite positive number."""
    from . import _real

    missing = object()
    value = getattr(getattr(block_module, "attn", None), "scale", missing)
    if value is missing:
        return 0.0
    try:
        s = _real(value, "attn.scale")
    except TypeError:
        s = None
    if s is None or not math.isfinite(s) or s <= 0:
        raise ValueError(f"blocks.{layer}.attn.scale must be a finite positive number (the logit scale), "
                         f"got {_quote(value)}")
    return s


def _ln_eps_of(block_module, layer, ln_eps):
    """The LayerNorms' ε: ln_eps when given, else norm1.eps (norm2.eps when only it has one; 1e-6
    when neither has). The Block has one ε for both: different ones are a ValueError naming the block."""
    if ln_eps is not None:
        return ln_eps
    eps = [getattr(getattr(block_module, name, None), "eps", None) for name in ("norm1", "norm2")]
    eps = [e for e in eps if e is not None]
    if len(eps) == 2 and eps[0] != eps[1]:
        raise ValueError(f"blocks.{layer}: norm1.eps {_quote(eps[0])} and norm2.eps {_quote(eps[1])} differ; "
                         "the analysed block has one LayerNorm eps (pass ln_eps= to analyse both with one)")
    return eps[0] if eps else 1e-6


def _block_of(state, layer, heads, ln_eps, logit_scale):
    """Block `layer` for analysis; from_timm folds ReZero's α and LayerScale's γ into the weights
    (analysis/jacobians/timm_layout.h) and refuses parameters the paper's block does not have.
    logit_scale: the model's s of softmax(s · Q_h K_hᵀ), 0 for 1/sqrt(d_h)."""
    return _jacond.Block.from_timm(state, layer=layer, heads=heads, logit_scale=logit_scale, ln_eps=ln_eps)


def _progress(total, enabled, desc):
    """A tqdm bar (python3-tqdm; the notebook widget when ipywidgets is there, else text), or one
    line per step on stderr without tqdm; nothing when disabled."""
    if not enabled:
        return None
    try:
        import importlib.util

        if importlib.util.find_spec("ipywidgets") is not None:
            from tqdm.auto import tqdm
        else:
            from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit="block")
    except ImportError:
        return _LineProgress(total, desc)


class _LineProgress:
    def __init__(self, total, desc):
        self.total, self.desc, self.done = total, desc, 0

    def update(self, k=1):
        self.done += k
        print(f"{self.desc}: {self.done}/{self.total}", file=sys.stderr, flush=True)

    def close(self):
        pass


def _capture_block_inputs(model, images):
    """Tokens entering each block, [m, n, d] per block, from one eval-mode forward pass."""
    import torch

    inputs = [None] * len(model.blocks)  # copies: a block with an in-place residual (x += ...) overwrites its input
    hooks = [b.register_forward_pre_hook(lambda module, args, l=l: inputs.__setitem__(l, args[0].detach().clone()))
             for l, b in enumerate(model.blocks)]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(images)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    missing = [l for l, x in enumerate(inputs) if x is None]
    if missing:
        raise ValueError(f"blocks {missing} did not run in the model's forward pass")
    return inputs


def audit(model, images, *, heads=None, method="auto", matrices=None, lanczos_seconds=30.0, certify="none",
          threads=None, checkpoint="", step=-1, ln_eps=None, progress=True, device="cpu"):
    """Per-layer conditioning of a timm-style ViT at `images` ([m, C, H, W], already normalised),
    as `jacond audit`: a DataFrame with audit.csv's columns (checkpoint and step are the values
    given). method, matrices, lanczos_seconds, certify and device (cpu | cuda: where the dense
    exact routes run) as `jacond audit`'s flags; threads sets the core's threads (None:
    unchanged; see set_threads before calling audit from several Python threads). progress: a
    progress bar over the blocks (tqdm)."""
    from . import _check_strings, _matrix_selection, _real, _warn_not_converged, set_threads

    if not hasattr(model, "blocks"):
        raise ValueError("model has no `blocks`: jacond.audit takes a timm-style VisionTransformer")
    _check_strings(method=method, certify=certify, device=device)
    lanczos_seconds = _real(lanczos_seconds, "lanczos_seconds")
    ln_eps = None if ln_eps is None else _real(ln_eps, "ln_eps")
    matrices = _matrix_selection(matrices)
    if matrices is not None:
        known = set(_jacond.block_matrix_names())
        unknown = [m for m in matrices if m not in known]
        if unknown:
            raise ValueError(f"unknown matrix '{unknown[0]}' (one of {', '.join(_jacond.block_matrix_names())})")
    if threads is not None:
        set_threads(threads)
    _jacond.device_description(device)  # a bad or unusable device fails before the forward pass
    heads = _heads_of(model, heads)
    # Each block's ε and logit scale, checked before the forward pass: (ln_eps, logit_scale) per layer.
    options = [(_ln_eps_of(b, l, ln_eps), _logit_scale_of(b, l)) for l, b in enumerate(model.blocks)]
    inputs = _capture_block_inputs(model, images)
    state = _numpy_state(model.state_dict())
    reports, prefix = [], []
    bar = _progress(len(model.blocks) * int(images.shape[0]), progress, "jacond audit")
    try:
        for l, block_module in enumerate(model.blocks):
            block = _block_of(state, l, heads, *options[l])
            skip = getattr(block_module, "skip", "full")
            norm = getattr(block_module, "norm", "pre")
            X = inputs[l].double().cpu().numpy()
            for i in range(X.shape[0]):
                rs = _jacond.block_reports(block, np.asfortranarray(X[i]), skip=skip, method=method, matrices=matrices,
                                           lanczos_seconds=lanczos_seconds, certify=certify, norm=norm,
                                           device=device)
                _warn_not_converged(rs, f"layer {l}, image {i}: ")
                reports += rs
                prefix += [[checkpoint, step, i, l]] * len(rs)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return _audit_frame(reports, prefix)


def _audit_frame(reports, prefix):
    """audit.csv's columns, as jacond.read_csv reads the CLI's audit.csv (checkpoint a string
    column, also when it is "")."""
    from . import reports_frame

    return reports_frame(reports, (["checkpoint", "step", "probe", "layer"], prefix))


def audit_state_dict(state, *, heads, layers=None, checkpoint="", step=-1, ln_eps=1e-6):
    """Data-free audit of a timm-named state dict (`jacond audit --data-free`): per layer, W_VO,
    W_VO_h, W_QK_h per head and every weight matrix, as a DataFrame with audit.csv's columns
    (probe "none"). layers: which (None: every blocks.{l} present)."""
    if not hasattr(state, "items"):
        raise ValueError("state must be a mapping of timm names to arrays (a state_dict)")
    state = _numpy_state(state)
    if layers is None:
        layers = sorted({int(m.group(1)) for k in state for m in [re.match(r"blocks\.(\d+)\.", k)] if m})
        if not layers:
            raise ValueError("state has no blocks.{l}.* keys")
    reports, prefix = [], []
    for l in layers:
        rs = _jacond.weight_reports(_jacond.Block.from_timm(state, layer=l, heads=heads, ln_eps=ln_eps,
                                                            fold_branch_scales=False))  # the stored weights
        reports += rs
        prefix += [[checkpoint, step, "none", l]] * len(rs)
    return _audit_frame(reports, prefix)
