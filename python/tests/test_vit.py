"""The pure-Python side of the package against the C++ it mirrors: python/jacond/vit.py (the ViT,
load_checkpoint), data.py (Fashion-MNIST, normalize_images) and safetensors.py (the reader),
checked on runs and files the `jacond` binary writes.

    JACOND_BIN=build/experiments/jacond PYTHONPATH=build/python /usr/bin/python3 -m pytest -q python/tests/test_vit.py
"""

import csv
import gzip
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from jacond import data, safetensors, vit

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# Fixtures: the binary, the data, tiny training runs

# A tiny model trained briefly with a high learning rate, so its weights are far enough from the
# init that a wrong op in the Python forward moves the test loss well past the tolerance.
TRAIN_ARGS = ["--dim", "16", "--depth", "2", "--heads", "2", "--patch", "7", "--batch", "32",
              "--data-limit", "640", "--test-limit", "200", "--threads", "1", "--steps", "20",
              "--warmup-steps", "2", "--lr", "0.01", "--eval-every", "10", "--checkpoint-every", "10",
              "--print-every", "10", "--track-every", "0"]
TEST_IMAGES = 200
EVAL_CHUNK = 500  # models/train/trainer.cpp evaluate(): cross-entropy summed per chunk of 500
# (skip, norm) of the runs; the ids name them in the test report.
RUNS = [("full", "pre"), ("none", "pre"), ("rezero", "pre"), ("full", "post")]
RUN_IDS = [f"{s}-{n}" for s, n in RUNS]


@pytest.fixture(scope="module")
def fashion_dir():
    if not Path(data.DEFAULT_DIR, "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"Fashion-MNIST is not installed in {data.DEFAULT_DIR} (Debian: dataset-fashion-mnist)")
    return data.DEFAULT_DIR


def run_jacond(binary, *args):
    r = subprocess.run([binary, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, f"jacond {' '.join(map(str, args))} exited {r.returncode}:\n{r.stderr[-2000:]}"
    return r


@pytest.fixture(scope="module")
def trained(jacond_bin, fashion_dir, tmp_path_factory):
    """trained(skip, norm) -> the run directory of a tiny `jacond train` (made once per module)."""
    runs = {}

    def get(skip, norm):
        if (skip, norm) not in runs:
            out = tmp_path_factory.mktemp(f"run-{skip}-{norm}")
            run_jacond(jacond_bin, "train", *TRAIN_ARGS, "--skip", skip, "--norm", norm, "--out", out)
            runs[skip, norm] = out
        return runs[skip, norm]

    return get


@pytest.fixture(scope="module")
def test_split(fashion_dir):
    return data.fashion_mnist("test", limit=TEST_IMAGES)


def eval_rows(run):
    """{step: (test_loss, test_acc)} of a run's eval.csv."""
    with open(run / "eval.csv") as f:
        return {int(r["step"]): (float(r["test_loss"]), float(r["test_acc"])) for r in csv.DictReader(f)}


def evaluate(model, images, labels):
    """models/train/trainer.cpp evaluate(): Σ cross-entropy (fp32 per chunk of 500, summed in
    double) / N and the fraction of argmax hits."""
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for b in range(0, len(labels), EVAL_CHUNK):
            logits = model(data.normalize_images(images[b:b + EVAL_CHUNK]))
            loss_sum += F.cross_entropy(logits, labels[b:b + EVAL_CHUNK], reduction="sum").item()
            correct += int((logits.argmax(1) == labels[b:b + EVAL_CHUNK]).sum())
    return loss_sum / len(labels), correct / len(labels)


write_safetensors = safetensors.write


# ---------------------------------------------------------------------------------------------
# The model against jacond's own evaluation

# Tolerance of the test loss. Measured: |Python − jacond| = 0.0 for every run here, at steps 10
# and 20, with 1 and 2 torch threads: the same LibTorch (libtorch_cpu.so.1.13, behind both
# /usr/bin/python3's torch and the binary) runs the same fp32 ops in the same order. A different
# build may block its reductions differently: the fp32 sum of 200 losses (≈ 440) has an ulp of
# 3.05e-5, i.e. 1.5e-7 in the mean, so 1e-6 allows a few ulps of reordering. Model errors are
# far larger on these runs: LayerNorm eps 1e-5 instead of 1e-6 moves the loss by up to 5e-6, a
# logit scale 1/sqrt(d) instead of 1/sqrt(d_h) by 5e-5 .. 2e-3, a mean 0.2861 instead of 0.2860
# by 1e-5.
LOSS_TOL = 1e-6


@pytest.mark.parametrize("skip,norm", RUNS, ids=RUN_IDS)
@pytest.mark.parametrize("step", [10, 20])
def test_checkpoint_reproduces_jacond_test_loss_and_accuracy(trained, test_split, skip, norm, step):
    run = trained(skip, norm)
    # Step 20 through the run directory (its newest checkpoint), step 10 through its own directory.
    model, meta = vit.load_checkpoint(run if step == 20 else run / f"step-{step:07d}")
    assert meta["step"] == step
    assert not model.training and all(p.dtype == torch.float32 for p in model.parameters())
    loss, acc = evaluate(model, *test_split)
    jacond_loss, jacond_acc = eval_rows(run)[step]
    assert acc == jacond_acc
    assert abs(loss - jacond_loss) <= LOSS_TOL, f"loss {loss!r} vs jacond's {jacond_loss!r}"


@pytest.mark.parametrize("skip,norm", RUNS, ids=RUN_IDS)
def test_blocks_expose_the_analysis_skip_mode_and_norm(trained, skip, norm):
    model, meta = vit.load_checkpoint(trained(skip, norm))
    assert meta["model"]["skip"] == skip and meta["model"]["norm"] == norm
    assert model.heads == model.num_heads == 2
    for block in model.blocks:
        assert block.skip == ("full" if skip == "rezero" else skip)
        assert block.skip_kind == skip
        assert block.norm == norm
        if skip == "rezero":  # α trained away from its init 0, and read back
            assert block.attn_scale() != 0 and block.attn_scale() == float(block.rezero_attn)
        else:
            assert block.attn_scale() == block.mlp_scale() == 1.0


# jacond audit reports σ of X_in, the fp32 tokens entering each block on the probe image (the
# C++ forward), analysed in fp64; here the Python forward's block inputs. Measured: identical σ's.
# If the tokens differed by a few fp32 ulps (‖ΔX‖ ≲ 1e-6 ‖X‖), Weyl bounds each |Δσ| by ‖ΔX‖₂,
# hence the tolerance 1e-6 σ_max on both ends. Pre-norm only: the analysis has no post-norm block.
@pytest.mark.parametrize("skip", ["full", "none", "rezero"])
def test_block_inputs_match_jacond_audit(jacond_bin, trained, tmp_path, skip):
    ckpt = trained(skip, "pre") / "step-0000020"
    run_jacond(jacond_bin, "audit", ckpt, "--matrices", "X_in", "--probe-size", "1", "--threads", "1",
               "--out", tmp_path)
    with open(tmp_path / "audit.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["matrix"] == "X_in" and r["probe"] == "0"]
    model, _ = vit.load_checkpoint(ckpt)
    with torch.no_grad():
        _, inputs = model.forward_with_block_inputs(data.probe_images(1))
    assert sorted(int(r["layer"]) for r in rows) == list(range(len(model.blocks)))
    for r in rows:
        s = np.linalg.svd(inputs[int(r["layer"])][0].double().numpy(), compute_uv=False)
        tol = 1e-6 * float(r["sigma_max"])
        assert abs(s[0] - float(r["sigma_max"])) <= tol, f"layer {r['layer']}: σ_max"
        assert abs(s[-1] - float(r["sigma_min"])) <= tol, f"layer {r['layer']}: σ_min"


def test_old_skip_spellings_and_rezero_map_to_the_analysis_modes():
    base = {"dim": 8, "depth": 1, "heads": 2, "patch": 7}
    for spelling, kind, attn, mlp in [("sab", "no-ffn-skip", True, False), ("ffn", "no-sab-skip", False, True),
                                      ("none", "none", False, False), ("rezero", "rezero", True, True)]:
        block = vit.VisionTransformer({**base, "skip": spelling}).blocks[0]
        assert (block.skip_kind, block.attn_residual, block.mlp_residual) == (kind, attn, mlp)
        assert block.skip == vit.ANALYSIS_SKIP[kind]
    with pytest.raises(ValueError, match=r"unknown skip mode 'sideways' \(valid: none \| full"):
        vit.VisionTransformer({**base, "skip": "sideways"})
    with pytest.raises(ValueError, match="norm placement must be pre | post"):
        vit.VisionTransformer({**base, "norm": "middle"})


# ---------------------------------------------------------------------------------------------
# load_checkpoint: what it resolves, and its one-line errors

def test_run_directory_resolves_to_the_newest_complete_checkpoint(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained("full", "pre"), run)
    # models/io/checkpoint.cpp list_checkpoints(kModel): step-XXXXXXX (7+ digits) with meta.json and
    # model.safetensors; optimizer.pt, a resume's, may have been deleted.
    shutil.copytree(run / "step-0000020", run / "step-123")  # not a checkpoint name
    (run / "step-0000020" / "model.safetensors").unlink()    # incomplete
    (run / "step-0000010" / "optimizer.pt").unlink()         # a model all the same
    assert vit.load_checkpoint(run)[1]["step"] == 10
    assert [s for s, _ in vit.list_checkpoints(run)] == [10]


def state_file(run, tmp_path, mutate_tensors=None, config=None, with_config=True):
    """A .safetensors copy of the run's step-20 model, tensors and "config" metadata changed."""
    tensors, metadata = safetensors.read(run / "step-0000020" / "model.safetensors")
    tensors = {k: np.array(v) for k, v in tensors.items()}
    if mutate_tensors:
        mutate_tensors(tensors)
    meta = {"step": metadata["step"]}
    if with_config:
        meta["config"] = json.dumps(config) if config is not None else metadata["config"]
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors, meta)
    return path


def shrink_fc1(tensors):
    tensors["blocks.1.mlp.fc1.weight"] = tensors["blocks.1.mlp.fc1.weight"][:63]


def bad_config(**changes):
    """The tiny runs' model config with `changes`."""
    return {"dim": 16, "depth": 2, "heads": 2, "patch": 7, "skip": "full", "norm": "pre", **changes}


ERROR_CASES = {
    "missing path": (lambda run, tmp: tmp / "nowhere", r"nowhere: no such file or directory"),
    "empty directory": (lambda run, tmp: tmp, r"neither a checkpoint nor a run directory"),
    "no config metadata": (lambda run, tmp: state_file(run, tmp, with_config=False),
                           r"model.safetensors: no jacond 'config' metadata"),
    "wrong-shape key": (lambda run, tmp: state_file(run, tmp, shrink_fc1),
                        r"'blocks\.1\.mlp\.fc1\.weight' has shape \[63, 16\], expected \[64, 16\]"),
    "missing key": (lambda run, tmp: state_file(run, tmp, lambda t: t.pop("head.bias")),
                    r"missing tensor 'head\.bias'"),
    "unknown key": (lambda run, tmp: state_file(run, tmp, lambda t: t.update(extra=np.zeros(1, np.float32))),
                    r"unknown tensor 'extra'"),
    "unknown skip mode": (lambda run, tmp: state_file(run, tmp, config=bad_config(skip="sideways")),
                          r"unknown skip mode 'sideways'"),
    "not a ViT": (lambda run, tmp: state_file(run, tmp, config=bad_config(arch="convmixer")),
                  r"a 'convmixer' checkpoint, not a ViT"),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_load_checkpoint_errors_are_one_line_value_errors(trained, tmp_path, case):
    make_path, message = ERROR_CASES[case]
    path = make_path(trained("full", "pre"), tmp_path)
    with pytest.raises(ValueError, match=message) as e:
        vit.load_checkpoint(path)
    assert "\n" not in str(e.value)


def test_checkpoint_meta_json_is_validated(trained, tmp_path):
    ckpt = tmp_path / "step-0000020"
    shutil.copytree(trained("full", "pre") / "step-0000020", ckpt)
    meta = json.loads((ckpt / "meta.json").read_text())
    (ckpt / "meta.json").write_text(json.dumps({**meta, "format": "other/9"}))
    with pytest.raises(ValueError, match=r"meta\.json: not a jacond-checkpoint/1 meta\.json"):
        vit.load_checkpoint(ckpt)
    (ckpt / "meta.json").write_text(json.dumps({**meta, "model": {**meta["model"], "heads": 3}}))
    with pytest.raises(ValueError, match=r"meta\.json: model config: heads 3 does not divide dim 16"):
        vit.load_checkpoint(ckpt)


def test_a_meta_json_whose_step_is_not_its_directorys_is_refused(trained, tmp_path):
    # As read_checkpoint (tests/models/test_checkpoint.cpp, AMetaJsonWhoseStepIsNotItsDirectorysIsRefused).
    source = trained("full", "pre") / "step-0000020"
    ckpt = tmp_path / "step-0000030"
    shutil.copytree(source, ckpt)
    with pytest.raises(ValueError, match=r"meta\.json: step 20, but its directory is step-0000030$"):
        vit.load_checkpoint(ckpt)
    best = tmp_path / "best"  # a copy out of its run keeps its meta's step
    shutil.copytree(source, best)
    assert vit.load_checkpoint(best)[1]["step"] == 20
    assert vit.load_checkpoint(source)[1]["step"] == 20


# ---------------------------------------------------------------------------------------------
# safetensors: the reader on what jacond writes, and back to jacond

def test_safetensors_round_trip_through_jacond(jacond_bin, trained, tmp_path):
    run = trained("full", "pre")
    ckpt = run / "step-0000020"
    tensors, metadata = safetensors.read(ckpt / "model.safetensors")
    # What models/io/checkpoint.cpp writes: fp32 timm-named state, format, step and config.
    assert metadata["format"] == "jacond-checkpoint/1" and metadata["step"] == "20"
    assert json.loads(metadata["config"]) == json.loads((ckpt / "meta.json").read_text())["model"]
    model, _ = vit.load_checkpoint(ckpt)
    assert {k: list(v.shape) for k, v in model.state_dict().items()} == {k: list(v.shape) for k, v in tensors.items()}
    assert all(v.dtype == np.float32 for v in tensors.values())

    # Written back by Python and read by the reader: the same arrays and metadata.
    copy = tmp_path / "copy.safetensors"
    write_safetensors(copy, tensors, metadata)
    again, again_meta = safetensors.read(copy)
    assert again_meta == metadata and again.keys() == tensors.keys()
    assert all(np.array_equal(again[k], tensors[k]) for k in tensors)

    # ... and by jacond: its data-free audit of the copy equals the one of the checkpoint.
    def audit(path, out):
        run_jacond(jacond_bin, "audit", path, "--data-free", "--threads", "1", "--out", out)
        with open(out / "audit.csv") as f:
            return [{k: v for k, v in r.items() if k not in ("checkpoint", "seconds")} for r in csv.DictReader(f)]

    original = audit(ckpt, tmp_path / "a")
    assert original and audit(copy, tmp_path / "b") == original


def test_safetensors_reader_rejects_a_truncated_file(trained, tmp_path):
    blob = (trained("full", "pre") / "step-0000020" / "model.safetensors").read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(blob[:-4])
    with pytest.raises(ValueError, match=r"cut\.safetensors: tensor .* outside the data buffer"):
        safetensors.read(path)


def safetensors_blob(header, data=b""):
    """A safetensors file of `header` (a JSON object, or the JSON text itself) and `data`."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def one_tensor(shape, data_offsets=(0, 8), dtype="F64"):
    return {"a": {"dtype": dtype, "shape": shape, "data_offsets": list(data_offsets)}}


MALFORMED_SAFETENSORS = {
    "shape_bool": safetensors_blob(one_tensor([True]), b"\0" * 8),                  # was a TypeError
    "offsets_bool": safetensors_blob(one_tensor([1], (False, 8)), b"\0" * 8),       # was read as [0, 8]
    "int64_wraps_to_0": safetensors_blob(one_tensor([2**62, 4], (0, 0))),           # was a bare ValueError
    "int64_wraps_to_0_too": safetensors_blob(one_tensor([2**32, 2**32], (0, 0))),   # was a bare ValueError
    "past_int64": safetensors_blob(one_tensor([2**70], (0, 0))),                    # was an OverflowError
    "empty_but_too_large": safetensors_blob(one_tensor([0, 2**62], (0, 0))),        # was a bare ValueError
    "33_dimensions": safetensors_blob(one_tensor([1] * 33), b"\0" * 8),             # was a bare ValueError
    "dtype_a_list": safetensors_blob(one_tensor([1], dtype=["F64"]), b"\0" * 8),    # was a TypeError
    "nested_100k_deep": safetensors_blob(b"[" * 100000 + b"]" * 100000),           # was a RecursionError
    "metadata_0": safetensors_blob({"__metadata__": 0}),                             # was read as {}
    "metadata_empty_list": safetensors_blob({"__metadata__": []}),                   # was read as {}
    "metadata_null": safetensors_blob({"__metadata__": None}),                       # was read as {}
    "metadata_not_strings": safetensors_blob({"__metadata__": {"k": 1}}),            # was read as {"k": "1"}
}


@pytest.mark.parametrize("case", MALFORMED_SAFETENSORS)
def test_safetensors_reader_refuses_a_malformed_file_with_a_one_line_error(tmp_path, case):
    """Any malformed file is a SafetensorsError '<path>: <problem>' on one line, not whatever
    Python or numpy raised on the way."""
    path = tmp_path / f"{case}.safetensors"
    path.write_bytes(MALFORMED_SAFETENSORS[case])
    with pytest.raises(safetensors.SafetensorsError) as error:
        safetensors.read(path)
    message = str(error.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message


def test_safetensors_reader_reads_empty_tensors_scalars_and_metadata(tmp_path):
    path = tmp_path / "ok.safetensors"
    header = {"__metadata__": {}, "a": {"dtype": "F64", "shape": [0, 3], "data_offsets": [0, 0]},
              "b": {"dtype": "I8", "shape": [], "data_offsets": [0, 1]}}
    path.write_bytes(safetensors_blob(header, b"\x07"))
    tensors, metadata = safetensors.read(path)
    assert tensors["a"].shape == (0, 3) and tensors["b"].shape == () and int(tensors["b"]) == 7 and metadata == {}
    safetensors.write(path, {"x": np.arange(3.0)}, {"step": 6})
    tensors, metadata = safetensors.read(path)
    assert metadata == {"step": "6"} and tensors["x"].tolist() == [0.0, 1.0, 2.0]


# ---------------------------------------------------------------------------------------------
# Data: the IDX reader and the normalisation

def cpp_constant(name):
    """A `inline constexpr double NAME = value;` of models/data/fashion_mnist.h."""
    text = (REPO / "models" / "data" / "fashion_mnist.h").read_text()
    return float(re.search(rf"constexpr double {name} = ([0-9.eE+-]+);", text).group(1))


def test_normalize_images_is_the_cpp_expression():
    # The constants are the C++ header's, and every u8 value maps as the C++ expression does in
    # fp32: (float32(x) / 255 − mean) / std, each operation rounded to fp32 in that order.
    assert (data.MEAN, data.STD) == (cpp_constant("kFashionMnistMean"), cpp_constant("kFashionMnistStd"))
    pixels = torch.arange(256, dtype=torch.uint8).reshape(4, 1, 8, 8)
    got = data.normalize_images(pixels)
    f32 = np.float32
    expected = (pixels.numpy().astype(f32) / f32(255.0) - f32(data.MEAN)) / f32(data.STD)
    assert got.dtype == torch.float32 and got.shape == pixels.shape
    assert np.array_equal(got.numpy(), expected)
    assert got[0, 0, 0, 0].item() == pytest.approx(-0.2860 / 0.3530, rel=1e-6)


def test_fashion_mnist_split_and_probe(fashion_dir):
    images, labels = data.fashion_mnist("test", limit=5)
    assert images.dtype == torch.uint8 and tuple(images.shape) == (5, 1, 28, 28)
    assert labels.dtype == torch.int64 and labels.tolist() == [9, 2, 1, 1, 6]  # t10k's first labels
    all_images, _ = data.fashion_mnist("test")
    assert all_images.shape[0] == 10000 and torch.equal(all_images[:5], images)
    assert torch.equal(data.probe_images(3), data.normalize_images(images[:3]))
    with pytest.raises(ValueError, match="split must be train or test"):
        data.fashion_mnist("valid")


def test_idx_files_plain_or_gzip_and_their_errors(fashion_dir, tmp_path):
    images, labels = data.fashion_mnist("test", limit=3)
    # The C++ opens the .gz names and reads their content gzip or plain: write plain IDX there.
    idx = struct.pack(">IIII", 0x803, 3, 28, 28) + images.numpy().tobytes()
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(idx)
    labels_idx = struct.pack(">II", 0x801, 3) + bytes(labels.tolist())
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(labels_idx))
    x, y = data.fashion_mnist("test", data_dir=tmp_path)
    assert torch.equal(x, images) and torch.equal(y, labels)

    labels_path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    header = struct.pack(">II", 0x801, 3)  # u8 labels, 3 of them
    cases = [(struct.pack(">II", 0x803, 3) + b"\x01\x02\x03", r"bad IDX magic 0x00000803, expected 0x0+801"),
             (header + b"\x01\x02", r"truncated: expected 3 data bytes, got 2"),
             (header + b"\x01\x02\x03\x04", "trailing bytes"),
             (header + b"\x01\x0a\x03", r"label 10 at index 1 is outside \[0, 10\)"),
             (gzip.compress(header + b"\x01\x02\x03")[:-6], "gzip error")]
    for blob, message in cases:
        labels_path.write_bytes(blob)
        with pytest.raises(ValueError, match=message) as e:
            data.fashion_mnist("test", data_dir=tmp_path)
        assert str(labels_path) in str(e.value) and "\n" not in str(e.value)
    labels_path.unlink()
    with pytest.raises(FileNotFoundError, match=r"t10k-labels-idx1-ubyte\.gz: file not found"):
        data.fashion_mnist("test", data_dir=tmp_path)
