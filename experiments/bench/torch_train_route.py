"""The PyTorch user's route to training the benchmark ViT: the same model in Python PyTorch.

Run by `jacond bench train` as a subprocess, with the same threads:

    python3 torch_train_route.py --dim 192 --depth 6 --heads 3 --patch 4 --batch 128 \
        --steps 20 --warmup 3 --threads 1 --skip full [--device cuda]

The model is written the way timm writes a ViT (pre-norm blocks, fused qkv Linear, exact GELU,
LayerNorm eps 1e-6, cls token + learned position embedding, conv patch embedding, final norm,
linear head; --skip full | none | sab | ffn keeps the residual of both sub-blocks, neither, only
the attention's, only the MLP's, as `jacond train --skip`), fp32, trained with torch.optim.AdamW(lr 1e-3, betas (0.9, 0.999), wd 0.05) and
cross-entropy on [batch, 1, 28, 28] images. Data are random tensors generated once (throughput
does not depend on pixel values), so the timing is forward + backward + optimizer step only.

--device cuda puts the model, the optimizer state and the batch on the GPU; loss.item() ends every
step, so a step is timed to its end on the device.

--nproc N (CPU) trains the same global batch data-parallel, the way a PyTorch user would:
torch.multiprocessing.spawn starts N processes, each joins a Gloo process group over loopback,
wraps the model in DistributedDataParallel and trains on its batch/N images with --threads
threads; rank 0 times the steps (each ends with loss.item() after the gradient all-reduce).

Prints ONE JSON line: {"images_per_s", "step_s", "steps", "batch", "threads", "nproc",
"torch_version", "device"} (device: the GPU's name, or "cpu").
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, n, d = x.shape
        q, k, v = self.qkv(x).reshape(B, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1) * self.head_dim ** -0.5, dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, n, d))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, skip):
        super().__init__()
        self.attn_residual = skip in ("full", "sab", "no-ffn-skip")  # "sab"/"ffn": the earlier spellings
        self.mlp_residual = skip in ("full", "ffn", "no-sab-skip")
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        a = self.attn(self.norm1(x))
        x = x + a if self.attn_residual else a
        m = self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x + m if self.mlp_residual else m


class ViT(nn.Module):
    def __init__(self, dim, depth, heads, patch, skip="full", image=28, chans=1, classes=10, mlp_ratio=4.0):
        super().__init__()
        self.patch = nn.Conv2d(chans, dim, patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.ModuleList([Block(dim, heads, int(dim * mlp_ratio), skip) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x)[:, 0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip", choices=["full", "none", "no-ffn-skip", "no-sab-skip", "sab", "ffn"], default="full")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--nproc", type=int, default=1, help="data-parallel ranks (DDP on Gloo, CPU)")
    a = p.parse_args()
    if a.nproc > 1:
        if a.device != "cpu" or a.batch % a.nproc:
            raise ValueError("--nproc needs --device cpu and a --batch divisible by it")
        with socket.socket() as s:  # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = torch.multiprocessing.get_context("spawn")
        result = ctx.SimpleQueue()
        torch.multiprocessing.spawn(train, args=(a, port, result), nprocs=a.nproc, join=True)
        print(json.dumps(result.get()))
        return
    print(json.dumps(train(0, a)))


def train(rank, a, port=None, result=None):
    """Times a.steps steps after a.warmup; with a.nproc > 1 this is one DDP rank."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: this torch has no CUDA device available")
    dev = torch.device(a.device)
    model = ViT(a.dim, a.depth, a.heads, a.patch, a.skip).to(dev)
    local_batch = a.batch // a.nproc
    if a.nproc > 1:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05)
    x = torch.randn(local_batch, 1, 28, 28).to(dev)
    y = torch.randint(0, 10, (local_batch,)).to(dev)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t0
    out = {"images_per_s": a.steps * a.batch / dt, "step_s": dt / a.steps, "steps": a.steps, "batch": a.batch,
           "threads": torch.get_num_threads(), "nproc": a.nproc, "torch_version": torch.__version__,
           "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"}
    if a.nproc > 1:
        import torch.distributed as dist
        dist.barrier()
        if rank == 0:
            result.put(out)
        dist.destroy_process_group()
    return out


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line on stderr, exit 1
        print(f"torch_train_route: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
