"""experiments/bench/train_gemm_bound.py (README "Benchmarks: training"): the GEMMs it times are
those of a real training step. Oracle: torch.profiler's flop count of the mm, addmm and bmm calls in
one forward + backward of jacond's Python ViT (python/jacond/vit.py, the model `jacond bench train`
trains in PyTorch), less the head's three products, equals depth x the script's block total."""
import importlib.util
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bound = load("experiments/bench/train_gemm_bound.py", "train_gemm_bound")
vit = load("python/jacond/vit.py", "jacond_vit")


def profiled_gemm_flops(dim, depth, heads, patch, batch):
    model = vit.VisionTransformer({"image_size": 28, "in_chans": 1, "num_classes": 10, "dim": dim, "depth": depth,
                                   "heads": heads, "patch": patch, "mlp_ratio": 4.0, "skip": "full", "norm": "pre",
                                   "ln_eps": 1e-6})
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        F.cross_entropy(model(x), y).backward()
    return sum(e.flops for e in prof.events() if e.name in ("aten::mm", "aten::addmm", "aten::bmm"))


def test_the_timed_gemms_are_a_training_steps():
    dim, depth, heads, patch, batch = 16, 2, 2, 7, 8
    tokens = (28 // patch) ** 2 + 1
    per_block = sum(bound.flops(left, right) * times for _, left, right, times in bound.block_gemms(dim, heads, tokens, batch))
    head = 3 * 2 * batch * dim * 10  # the classifier's forward, ∂X and ∂W products
    assert profiled_gemm_flops(dim, depth, heads, patch, batch) == depth * per_block + head


def test_it_prints_the_bound_with_the_threads_it_was_given():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments/bench/train_gemm_bound.py"), "--dim", "16",
                          "--depth", "1", "--heads", "2", "--patch", "7", "--batch", "4", "--threads", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert ", 1 thread(s);" in out, out
    assert "GEMM-only bound:" in out and "images/s" in out, out
