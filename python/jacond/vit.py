"""jacond's Vision Transformer in Python PyTorch: the C++ model (models/vit/vit.h, vit.cpp), op for op.

One Python ViT for the package and the bench scripts: `jacond.vit` is this file, and
experiments/bench/torch_train_route.py loads it by file path (it must not import the compiled
extension), so it imports nothing package-relative; checkpoints are read with safetensors.py,
found next to this file.

What matches what (C++ -> here):

    VisionTransformerImpl      VisionTransformer   timm parameter names (below), fp32
    BlockImpl                  Block               pre/post norm, skip mode, ReZero α, drop path
    AttentionImpl, MlpImpl     Attention, Mlp      fused qkv Linear, exact GELU
    PatchEmbedImpl             PatchEmbed          Conv2d(C, d, p, stride p), row-major grid
    ViTConfig::from_json       ViTConfig.from_json keys of ViTConfig::to_json, missing = default
    parse_skip_kind            parse_skip          also the earlier "sab" / "ffn"
    analysis_skip_mode         ANALYSIS_SKIP       rezero is analysed as "full"
    read_checkpoint, list_checkpoints (models/io/checkpoint.*)   load_checkpoint

Parameters (timm names; d = dim, h = heads, n = 1 + (H/p)(W/p) tokens):

    patch_embed.proj.weight [d, C, p, p], patch_embed.proj.bias [d]
    cls_token [1, 1, d], pos_embed [1, n, d]
    blocks.{l}.norm1.{weight,bias}, blocks.{l}.attn.qkv.{weight,bias} [3d, d] / [3d],
    blocks.{l}.attn.proj.*, blocks.{l}.norm2.*, blocks.{l}.mlp.fc1.*, blocks.{l}.mlp.fc2.*
    blocks.{l}.rezero_attn, blocks.{l}.rezero_mlp [1]          (skip "rezero" only)
    norm.{weight,bias}, head.{weight,bias} [classes, d]

Block, x: tokens [B, n, d], a(·) = attention branch, m(·) = MLP branch (α₁ = α₂ = 1 unless ReZero):

    pre-norm:   x ← [x +] α₁ a(LN1 x);     x ← [x +] α₂ m(LN2 x)
    post-norm:  x ← LN1([x +] α₁ a(x));    x ← LN2([x +] α₂ m(x))

where each residual "[x +]" is kept by the skip mode: full (both), none (neither), no-ffn-skip
(attention's only), no-sab-skip (MLP's only), rezero (both, branches scaled by learned α).
Attention (docs/design.md §2, Eq. 3–4), head h = qkv columns [h·d_h, (h+1)·d_h) of each of Q, K, V:

    A_h = softmax_rows((Q_h K_hᵀ) · s),  s = 1/sqrt(d_h);   SA = Concat_h(A_h V_h) W_Oᵀ + b_O

computed as the C++ forward does, in the same order (matmul, then the scalar product), so fp32
logits agree with `jacond` to rounding. The model is logits = head(norm(x)[:, 0]) (cls token).

Usage:
    model, meta = load_checkpoint("results/train")          # newest complete checkpoint
    logits = model(images)                                  # images [B, 1, 28, 28], normalised
    model.blocks[0].skip, model.blocks[0].norm, model.heads # what an audit hook reads
"""

import dataclasses
import importlib.util
import json
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# Skip modes and norm placement (models/vit/vit.cpp parse_skip_kind, analysis_skip_mode)

SKIP_KINDS = ("none", "full", "no-ffn-skip", "no-sab-skip", "rezero")
# The earlier spellings, named after the residual they keep; still read, as the C++ does.
OLD_SKIP_SPELLINGS = {"sab": "no-ffn-skip", "ffn": "no-sab-skip"}
# The analysis's SkipMode of each kind: ReZero is a full residual (α folded into the weights).
ANALYSIS_SKIP = {"none": "none", "full": "full", "no-ffn-skip": "no-ffn-skip",
                 "no-sab-skip": "no-sab-skip", "rezero": "full"}
NORM_PLACEMENTS = ("pre", "post")


def quote(value, limit=60):
    """repr(value) cut to `limit` characters: file-derived text in a one-line message
    (repr escapes newlines and control characters; models/io/error_text.h does the same in C++)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse_skip(s):
    """The skip kind of a spelling ("sab" -> "no-ffn-skip", ...); ValueError listing the valid ones."""
    s = OLD_SKIP_SPELLINGS.get(s, s)
    if s not in SKIP_KINDS:
        raise ValueError(f"unknown skip mode {quote(s)} (valid: {' | '.join(SKIP_KINDS)})")
    return s


def attention_residual(skip):
    """Whether the attention sub-block keeps its residual (analysis sab_residual)."""
    return ANALYSIS_SKIP[skip] in ("full", "no-ffn-skip")


def mlp_residual(skip):
    """Whether the MLP sub-block keeps its residual (analysis ffn_residual)."""
    return ANALYSIS_SKIP[skip] in ("full", "no-sab-skip")


# ---------------------------------------------------------------------------------------------
# Config (ViTConfig: to_json keys, from_json defaults and validate)

@dataclasses.dataclass
class ViTConfig:
    image_size: int = 28
    in_chans: int = 1
    patch: int = 4
    num_classes: int = 10
    dim: int = 192
    depth: int = 6
    heads: int = 3
    mlp_ratio: float = 4.0
    skip: str = "full"
    norm: str = "pre"
    ln_eps: float = 1e-6
    drop_path: float = 0.0
    init: dict = dataclasses.field(default_factory=dict)  # kept as read; the weights are loaded

    @property
    def hidden(self):
        # llround(dim · mlp_ratio): round half away from zero (the value is positive).
        return int(math.floor(self.dim * self.mlp_ratio + 0.5))

    @property
    def grid(self):
        return self.image_size // self.patch

    @property
    def tokens(self):
        return self.grid * self.grid + 1

    @classmethod
    def from_json(cls, j):
        """ViTConfig::from_json: keys of to_json, a missing key keeps its default; one-line ValueError."""
        if not isinstance(j, dict):
            raise ValueError(f"model config: expected a JSON object, got {type(j).__name__}")
        c = cls()
        for key in ("image_size", "in_chans", "patch", "num_classes", "dim", "depth", "heads"):
            if key in j:
                if not isinstance(j[key], int) or isinstance(j[key], bool):
                    raise ValueError(f"model config: '{key}' must be an integer, got {quote(j[key])}")
                setattr(c, key, j[key])
        for key in ("mlp_ratio", "ln_eps", "drop_path"):
            if key in j:
                if not isinstance(j[key], (int, float)) or isinstance(j[key], bool):
                    raise ValueError(f"model config: '{key}' must be a number, got {quote(j[key])}")
                setattr(c, key, float(j[key]))
        if "skip" in j:
            c.skip = parse_skip(j["skip"] if isinstance(j["skip"], str) else quote(j["skip"]))
        if "norm" in j:
            c.norm = j["norm"]
        if "init" in j:
            if not isinstance(j["init"], dict):
                raise ValueError("model config: 'init' must be an object")
            c.init = dict(j["init"])
        c.validate()
        return c

    def to_json(self):
        """The dict ViTConfig::to_json writes (init as read)."""
        return dataclasses.asdict(self)

    def validate(self):
        """ViTConfig::validate: ValueError naming the first bad field."""
        for key in ("image_size", "in_chans", "patch", "num_classes", "dim", "depth", "heads"):
            if getattr(self, key) <= 0:
                raise ValueError(f"model config: {key} must be positive, got {getattr(self, key)}")
        if self.image_size % self.patch:
            raise ValueError(f"model config: patch {self.patch} does not divide the image size {self.image_size}")
        if self.dim % self.heads:
            raise ValueError(f"model config: heads {self.heads} does not divide dim {self.dim}")
        if not self.mlp_ratio > 0 or self.hidden <= 0:
            raise ValueError("model config: mlp_ratio must be positive")
        if not self.ln_eps > 0:
            raise ValueError("model config: ln_eps must be positive")
        if not 0 <= self.drop_path < 1:
            raise ValueError("model config: drop_path must be in [0, 1)")
        self.skip = parse_skip(self.skip)
        if self.norm not in NORM_PLACEMENTS:
            raise ValueError(f"model config: norm placement must be pre | post, got {quote(self.norm)}")


# ---------------------------------------------------------------------------------------------
# Modules

class Attention(nn.Module):
    """AttentionImpl: x [B, n, d] -> proj(Concat_h(A_h V_h)), A_h = softmax((Q_h K_hᵀ) · s)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = self.num_heads = heads
        self.head_dim = dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)  # s; a Python float, cast to fp32 by the product
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, n, d = x.shape
        # qkv output feature s·d + h·d_h + j -> [3, B, h, n, d_h]: head h owns columns [h·d_h, (h+1)·d_h).
        q, k, v = self.qkv(x).reshape(B, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        a = torch.softmax(scores, -1)
        return self.proj(torch.matmul(a, v).transpose(1, 2).reshape(B, n, d))


class Mlp(nn.Module):
    """MlpImpl: fc2(gelu(fc1 x)), exact (erf) GELU."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """BlockImpl. Attributes read by an audit: `skip` (the analysis's skip mode: rezero -> "full"),
    `skip_kind` (the model's, "rezero" included), `norm` ("pre" | "post"), attn_scale(), mlp_scale()."""

    def __init__(self, cfg, drop_path_rate=0.0):
        super().__init__()
        self.skip_kind = cfg.skip
        self.skip = ANALYSIS_SKIP[cfg.skip]
        self.norm = cfg.norm
        self.attn_residual = attention_residual(cfg.skip)
        self.mlp_residual = mlp_residual(cfg.skip)
        self.drop_path = drop_path_rate
        self.norm1 = nn.LayerNorm(cfg.dim, eps=cfg.ln_eps)
        self.attn = Attention(cfg.dim, cfg.heads)
        self.norm2 = nn.LayerNorm(cfg.dim, eps=cfg.ln_eps)
        self.mlp = Mlp(cfg.dim, cfg.hidden)
        if cfg.skip == "rezero":
            self.rezero_attn = nn.Parameter(torch.zeros(1))
            self.rezero_mlp = nn.Parameter(torch.zeros(1))
        else:
            self.rezero_attn = self.rezero_mlp = None

    def attn_scale(self):
        """α₁ (ReZero), 1 otherwise."""
        return float(self.rezero_attn) if self.rezero_attn is not None else 1.0

    def mlp_scale(self):
        """α₂ (ReZero), 1 otherwise."""
        return float(self.rezero_mlp) if self.rezero_mlp is not None else 1.0

    def _branch(self, b, scale, residual):
        """ReZero's α·b, then drop path (per sample, training only, residual branches only)."""
        out = b * scale if scale is not None else b
        if residual and self.drop_path > 0 and self.training:
            keep = 1.0 - self.drop_path
            mask = torch.empty((b.shape[0], 1, 1), dtype=b.dtype, device=b.device).bernoulli_(keep)
            out = out * mask / keep
        return out

    def forward(self, x):
        if self.norm == "pre":
            a = self._branch(self.attn(self.norm1(x)), self.rezero_attn, self.attn_residual)
            x = x + a if self.attn_residual else a
            m = self._branch(self.mlp(self.norm2(x)), self.rezero_mlp, self.mlp_residual)
            return x + m if self.mlp_residual else m
        a = self._branch(self.attn(x), self.rezero_attn, self.attn_residual)
        x = self.norm1(x + a if self.attn_residual else a)
        m = self._branch(self.mlp(x), self.rezero_mlp, self.mlp_residual)
        return self.norm2(x + m if self.mlp_residual else m)


class PatchEmbed(nn.Module):
    """PatchEmbedImpl: images [B, C, H, W] -> tokens [B, (H/p)(W/p), d], row-major over the grid."""

    def __init__(self, in_chans, dim, patch):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, dim, patch, stride=patch)

    def forward(self, images):
        return self.proj(images).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """VisionTransformerImpl. `config` is a ViTConfig or the dict ViTConfig::to_json writes.

    A fresh model is initialised by timm's rules with torch's generator (reset_parameters), not
    by jacond's --init generators: its weights differ from a fresh C++ model's; load a checkpoint
    (load_checkpoint, load_state) for the same function.
    """

    def __init__(self, config):
        super().__init__()
        cfg = config if isinstance(config, ViTConfig) else ViTConfig.from_json(config)
        cfg.validate()
        self.config = cfg
        self.heads = self.num_heads = cfg.heads
        self.skip = ANALYSIS_SKIP[cfg.skip]
        self.patch_embed = PatchEmbed(cfg.in_chans, cfg.dim, cfg.patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.tokens, cfg.dim))
        # Drop path rate linear in depth (timm), none for skipless blocks or a single block.
        rates = [0.0 if cfg.skip == "none" or cfg.depth == 1 else cfg.drop_path * l / (cfg.depth - 1)
                 for l in range(cfg.depth)]
        self.blocks = nn.ModuleList([Block(cfg, r) for r in rates])
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.ln_eps)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """timm's ViT rules: pos_embed and head.weight trunc_normal(0.02) (cut at ±2), head.bias 0,
        cls_token N(0, 1e-6²), ReZero α 0; blocks, patch conv and LayerNorms keep torch's defaults."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02, a=-2.0, b=2.0)
        nn.init.normal_(self.cls_token, std=1e-6)
        nn.init.trunc_normal_(self.head.weight, std=0.02, a=-2.0, b=2.0)
        nn.init.zeros_(self.head.bias)
        for b in self.blocks:
            if b.rezero_attn is not None:
                b.rezero_attn.zero_()
                b.rezero_mlp.zero_()

    def embed(self, images):
        """[cls; patch tokens] + pos_embed, [B, n, d]."""
        c = self.config
        if images.dim() != 4 or tuple(images.shape[1:]) != (c.in_chans, c.image_size, c.image_size):
            raise ValueError(f"ViT expects images [B, {c.in_chans}, {c.image_size}, {c.image_size}], "
                             f"got {list(images.shape)}")
        tokens = self.patch_embed(images)
        cls = self.cls_token.expand(images.shape[0], 1, c.dim)
        return torch.cat([cls, tokens], 1) + self.pos_embed

    def forward(self, images):
        """images [B, C, H, W] (normalised) -> logits [B, classes]."""
        x = self.embed(images)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])

    def forward_with_block_inputs(self, images):
        """(logits, [tokens entering each block, [B, n, d] detached]) (forward_with_block_inputs)."""
        x = self.embed(images)
        inputs = []
        for b in self.blocks:
            inputs.append(x.detach())
            x = b(x)
        return self.head(self.norm(x)[:, 0]), inputs

    def load_state(self, tensors, source="state"):
        """load_state: every parameter present with its shape, no unknown key, any float dtype
        (copied as fp32). `tensors` maps timm names to arrays or tensors; ValueError naming the key."""
        expected = self.state_dict()
        for key in expected:
            if key not in tensors:
                raise ValueError(f"{source}: missing tensor '{key}'")
        state = {}
        for key, value in tensors.items():
            if key not in expected:
                raise ValueError(f"{source}: unknown tensor {quote(key)} (not a parameter of this ViT)")
            t = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
            if not t.is_floating_point():
                raise ValueError(f"{source}: '{key}' has dtype {t.dtype}, expected a float type")
            if tuple(t.shape) != tuple(expected[key].shape):
                raise ValueError(f"{source}: '{key}' has shape {list(t.shape)}, "
                                 f"expected {list(expected[key].shape)}")
            state[key] = t.to(torch.float32)
        self.load_state_dict(state, strict=True)


# ---------------------------------------------------------------------------------------------
# Checkpoints (models/io/checkpoint.*, checkpoint_meta.*)

CHECKPOINT_FORMAT = "jacond-checkpoint/1"
_STEP_NAME = re.compile(r"step-([0-9]{7,})")
# What loading a model reads (models/io/checkpoint.h CheckpointParts::kModel): optimizer.pt is a
# resume's, and a run whose optimizer states were deleted to save space still has its models.
_CHECKPOINT_FILES = ("meta.json", "model.safetensors")


def _safetensors():
    """safetensors.py next to this file: jacond.safetensors in the package, else loaded by path."""
    if __package__:
        return importlib.import_module(f"{__package__}.safetensors")
    name = "jacond_safetensors"  # the name experiments/bench/package_modules.py gives it: one copy
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def list_checkpoints(run_dir):
    """[(step, dir)] of the complete checkpoints of a run directory, by step: the step-XXXXXXX
    directories (7 or more digits) holding meta.json and model.safetensors (optimizer.pt, which
    only a resume reads, need not be there)."""
    out = []
    if not os.path.isdir(run_dir):
        return out
    for name in os.listdir(run_dir):
        m = _STEP_NAME.fullmatch(name)
        d = os.path.join(run_dir, name)
        if m and os.path.isdir(d) and all(os.path.exists(os.path.join(d, f)) for f in _CHECKPOINT_FILES):
            out.append((int(m.group(1)), d))
    return sorted(out)


def read_meta(meta_path):
    """A checkpoint's meta.json, validated as parse_checkpoint_meta does; one-line ValueError."""
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{meta_path}: malformed JSON: {e}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: not a JSON object")
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{meta_path}: not a {CHECKPOINT_FORMAT} meta.json (format {quote(meta.get('format', 'missing'))})")
    step = meta.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
        raise ValueError(f"{meta_path}: no integer 'step' in [0, 2^63)")
    if not isinstance(meta.get("model"), dict):
        raise ValueError(f"{meta_path}: no 'model' config")
    # A run's step-N directory names its step (read_checkpoint's check, models/io/checkpoint.cpp): a
    # meta.json copied from another step is refused; a copy elsewhere (best/) is not checked.
    named = _STEP_NAME.fullmatch(os.path.basename(os.path.realpath(os.path.dirname(os.path.abspath(meta_path)))))
    if named and int(named.group(1)) != step:
        raise ValueError(f"{meta_path}: step {step}, but its directory is step-{int(named.group(1)):07d}")
    return meta


def _model_config(config, source):
    """The ViTConfig of a checkpoint's model config; ValueError for another architecture."""
    arch = config.get("arch", "vit")
    if arch != "vit":
        raise ValueError(f"{source}: a {quote(arch)} checkpoint, not a ViT")
    try:
        return ViTConfig.from_json(config)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def _load_file(path, config=None, config_source=None):
    """(model, safetensors metadata) of a model.safetensors; the config from `config` (read
    from the file `config_source`) or the file's "config" metadata."""
    tensors, metadata = _safetensors().read(path)
    if config is None:
        if "config" not in metadata:
            raise ValueError(f"{path}: no jacond 'config' metadata (not written by jacond train)")
        try:
            config = json.loads(metadata["config"])
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: malformed 'config' metadata: {e}") from None
        if not isinstance(config, dict):
            raise ValueError(f"{path}: 'config' metadata is not a JSON object")
    model = VisionTransformer(_model_config(config, config_source or path))
    model.load_state(tensors, source=path)
    return model.float().eval(), metadata


def resolve_checkpoint(path):
    """The checkpoint directory or .safetensors file `path` names: itself when it is a file or a
    directory with meta.json, else the newest complete checkpoint of the run directory `path`."""
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file or directory")
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, "meta.json")):
        return path
    checkpoints = list_checkpoints(path)
    if not checkpoints:
        raise ValueError(f"{path}: neither a checkpoint nor a run directory with step-*/ checkpoints")
    return checkpoints[-1][1]


def load_checkpoint(path):
    """(model, meta) of a checkpoint: fp32, eval mode, every parameter loaded (strict).

    path: a checkpoint directory (step-XXXXXXX/ with meta.json and model.safetensors; the config
    is meta.json["model"]), a run directory (its newest complete checkpoint, as list_checkpoints),
    or a .safetensors file with jacond's "config" metadata. meta is meta.json's object for a
    directory; for a file, {"model": config, "step": int, "format": str} from its metadata (step
    and format when present). Bad input: one-line ValueError naming the file and the problem.
    """
    path = resolve_checkpoint(os.fspath(path))
    if not os.path.isdir(path):
        model, metadata = _load_file(path)
        meta = {"model": json.loads(metadata["config"])}
        if "step" in metadata and metadata["step"].isdigit():
            meta["step"] = int(metadata["step"])
        if "format" in metadata:
            meta["format"] = metadata["format"]
        return model, meta
    meta = read_meta(os.path.join(path, "meta.json"))
    weights = os.path.join(path, "model.safetensors")
    if not os.path.isfile(weights):
        raise ValueError(f"{weights}: missing")
    model, _ = _load_file(weights, config=meta["model"], config_source=os.path.join(path, "meta.json"))
    return model, meta
