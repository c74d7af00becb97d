"""The PyTorch user's route to training the benchmark ViT: the same model in Python PyTorch.

Run by `jacond bench train` as a subprocess, with the same threads:

    python3 torch_train_route.py --dim 192 --depth 6 --heads 3 --patch 4 --batch 128 \
        --steps 20 --warmup 3 --threads 1 --skip full [--device cuda]

The model is jacond's ViT in Python, python/jacond/vit.py (the C++ model op for op, timm names;
loaded by file path, since `import jacond` would need the compiled extension): pre-norm blocks,
fused qkv Linear, exact GELU, LayerNorm eps 1e-6, cls token + learned position embedding, conv
patch embedding, final norm, linear head; --skip full | none | no-ffn-skip | no-sab-skip (or the
earlier sab | ffn) keeps the residual of both sub-blocks, neither, only the attention's, only the
MLP's, as `jacond train --skip`. fp32, trained with torch.optim.AdamW(lr 1e-3, betas (0.9, 0.999),
wd 0.05 on matrices only: timm's rule, as jacond's AdamW) and cross-entropy on [batch, 1, 28, 28] images. Data are random tensors generated once (throughput
does not depend on pixel values), so the timing is forward + backward + optimizer step only.

--device cuda puts the model and the optimizer state on the GPU; the batch is copied there from the
host inside every timed step, as a training loop's data loader hands it over and as `jacond bench
train` times its own route; loss.item() ends every step, so a step is timed to its end on the
device.

--nproc N (CPU) trains the same global batch data-parallel, the way a PyTorch user would:
torch.multiprocessing.spawn starts N processes, each joins a Gloo process group over loopback,
wraps the model in DistributedDataParallel and trains on its batch/N images with --threads
threads; rank 0 times the steps (each ends with loss.item() after the gradient all-reduce).

Prints ONE JSON line: {"images_per_s", "step_s", "optimizer_step_s", "aten_ops", "page_faults_per_step",
"steps", "batch", "threads", "nproc", "torch_version", "device"} (device: the GPU's name, or "cpu";
aten_ops: count_ops's {"model": {name: count}, "optimizer": {...}} of one more step, null with --nproc;
page_faults_per_step: the process's minor page faults over a timed step, getrusage's ru_minflt).
"""

import argparse
import json
import os
import resource
import socket
import sys
import time

import torch
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import package_modules  # noqa: E402

vit = package_modules.load("vit")  # python/jacond/vit.py


def build_model(a):
    """jacond's ViT of `jacond bench train`'s shape: 28×28 Fashion-MNIST-sized inputs, 10 classes,
    MLP ratio 4, pre-norm, LayerNorm eps 1e-6 (the ViTConfig defaults)."""
    return vit.VisionTransformer({"image_size": 28, "in_chans": 1, "num_classes": 10, "dim": a.dim, "depth": a.depth,
                                  "heads": a.heads, "patch": a.patch, "mlp_ratio": 4.0, "skip": a.skip, "norm": "pre",
                                  "ln_eps": 1e-6})


def param_groups(model):
    """timm's weight-decay rule, as `jacond train`'s AdamW (models/train/trainer.cpp, decays): decay on
    matrices only, not on biases, LayerNorms, pos_embed, cls_token."""
    decay, rest = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and name not in ("pos_embed", "cls_token") else rest).append(p)
    return [{"params": decay}, {"params": rest, "weight_decay": 0.0}]


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


def count_ops(model, opt, x, y, dev):
    """The ATen operations of one more (untimed) step by name, nested ones included, as torch.profiler
    records them on every thread (on a GPU, backward runs on the device's thread): {"model": the
    forward + cross-entropy + backward, "optimizer": opt.step()}. `jacond bench train` counts its own
    step the same way (RecordFunction) and prints where the two differ: on a GPU each is a kernel
    launch or a few, which is what bounds a small model's step."""
    from torch.profiler import ProfilerActivity, profile

    def names(prof):
        counts = {}
        for e in prof.events():
            if e.name.startswith("aten::"):
                counts[e.name] = counts.get(e.name, 0) + 1
        return counts

    opt.zero_grad(set_to_none=True)  # as jacond's step: backward writes fresh gradients (torch 1.x zeroes by default)
    xd = x.to(dev)
    with profile(activities=[ProfilerActivity.CPU]) as p_model:
        F.cross_entropy(model(xd), y).backward()
    with profile(activities=[ProfilerActivity.CPU]) as p_opt:
        opt.step()
    return {"model": names(p_model), "optimizer": names(p_opt)}


def train(rank, a, port=None, result=None):
    """Times a.steps steps after a.warmup; with a.nproc > 1 this is one DDP rank."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: this torch has no CUDA device available")
    dev = torch.device(a.device)
    model = build_model(a).to(dev).train()
    local_batch = a.batch // a.nproc
    if a.nproc > 1:
        import torch.distributed as dist
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(param_groups(getattr(model, "module", model)), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.05)
    x = torch.randn(local_batch, 1, 28, 28)  # on the host: copied to the device in every step
    y = torch.randint(0, 10, (local_batch,)).to(dev)

    on_gpu = dev.type == "cuda"
    step_s, optimizer_s, page_faults = [], [], []
    for k in range(-a.warmup, a.steps):  # k < 0: warm-up
        # As `jacond bench train` times its AdamW route (bench_train.cpp, bench_train_timing.h): on a
        # GPU the odd timed steps time opt.step() between synchronisations and the even ones the whole
        # step, unsynchronised. This route is AdamW only, whose steps all cost the same: its window is
        # one step (jacond's SOAP alternates in windows of its refresh period instead).
        time_optimizer, time_step = (not on_gpu or k % 2 == 1), (not on_gpu or k % 2 == 0)
        faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)  # the step count_ops counts, and jacond takes
        loss = F.cross_entropy(model(x.to(dev)), y)
        loss.backward()
        if on_gpu and time_optimizer:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        opt.step()
        if on_gpu and time_optimizer:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        loss.item()
        if k < 0:
            continue
        if time_step:
            step_s.append(time.perf_counter() - t0)
            page_faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0)
        if time_optimizer:
            optimizer_s.append(t2 - t1)
    dt = sum(step_s) / len(step_s)
    ops = count_ops(model, opt, x, y, dev) if a.nproc == 1 else None
    out = {"images_per_s": a.batch / dt, "step_s": dt, "optimizer_step_s": sum(optimizer_s) / len(optimizer_s) if optimizer_s else None,
           "aten_ops": ops, "page_faults_per_step": sum(page_faults) / len(page_faults),
           "steps": a.steps, "batch": a.batch,
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
