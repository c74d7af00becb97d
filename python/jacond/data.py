"""Fashion-MNIST as jacond reads it: the C++ data path (models/data/fashion_mnist.*, idx.*) in Python.

Torch and numpy only, no package-relative imports (the file can be loaded by path).

What matches what (C++ -> here):

    load_fashion_mnist(dir, split, limit)   fashion_mnist(split, limit, data_dir)
    read_idx, check_idx_split               read_idx, _check_split
    normalize_images                        normalize_images     (x/255 − mean)/std, fp32
    jacond audit's probe batch              probe_images(m)      (Token Graying "none")

Files (Debian's dataset-fashion-mnist): DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, the
names the C++ opens; the content may be gzip (starts 1f 8b; several members are read as their
concatenation, zero bytes after a member are skipped) or plain IDX. IDX, big-endian: magic u32
0x00000803 (u8 images, 3 dims) or 0x00000801 (u8 labels, 1 dim), one u32 per dimension (each >= 1,
at most 2^34 elements in all), then the u8 data row-major and nothing after it.

Normalisation, in fp32 and in this order (the C++ expression, same torch ops):
    x = (float32(pixel) / 255 − 0.2860) / 0.3530
(mean and std of the training split, models/data/fashion_mnist.h).
"""

import os
import struct
import zlib

import numpy as np
import torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"  # kFashionMnistDir
MAX_ELEMENTS = 1 << 34  # kIdxMaxElements (models/data/idx.h): 16 Gi; Fashion-MNIST's train images are 47 Mi
MEAN = 0.2860  # kFashionMnistMean
STD = 0.3530   # kFashionMnistStd
_STEMS = {"train": "train", "test": "t10k"}


def read_idx(path, rank):
    """The u8 array of an IDX file (gzip or plain) with `rank` dims; one-line FileNotFoundError
    for a missing file, ValueError '<path>: <problem>' for a malformed one."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: file not found (install Debian's dataset-fashion-mnist, or pass data_dir)")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory, not an IDX file")
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:2] == b"\x1f\x8b":
        blob = _gunzip(blob, path)
    return parse_idx(blob, rank, path)


def _gunzip(blob, name):
    """The decompressed bytes of gzip data, by the rules of the C++ decoder (models/data/idx.cpp),
    with the same zlib checks (header, CRC-32, length) and the same messages: several members are
    read as their concatenation; zero bytes after a member are skipped (padding, as gzip -d and
    gzip.decompress do); any other byte after a member that does not start one is an error, as is
    a member cut short."""
    out, rest = [], blob
    while rest:
        member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip wrapper only, as inflateInit2(15 + 16)
        try:
            out.append(member.decompress(rest))
        except zlib.error as e:  # "Error -3 while decompressing data: <zlib's msg>": the C++ shows zlib's msg
            raise ValueError(f"{name}: gzip error: {str(e).split('while decompressing data: ')[-1]}") from None
        if not member.eof:
            raise ValueError(f"{name}: gzip error: truncated data (unexpected end of file)")
        rest = member.unused_data.lstrip(b"\x00")
        if rest and rest[0] != 0x1f:
            raise ValueError(f"{name}: trailing bytes after the gzip data")
    return b"".join(out)


def parse_idx(blob, rank, name="<memory>"):
    """The decoded IDX bytes `blob` as a numpy u8 array of `rank` dims (errors name `name`)."""
    if len(blob) < 4:
        raise ValueError(f"{name}: truncated: no IDX magic")
    (magic,) = struct.unpack(">I", blob[:4])
    expected = 0x800 | rank
    if magic != expected:
        raise ValueError(f"{name}: bad IDX magic 0x{magic:08x}, expected 0x{expected:08x} (u8 data, {rank} dims)")
    # Dimension by dimension, in the C++ decoder's order (parse_stream), so that both give the same
    # first error. The count is capped as there: np.prod(dims, uint64) wrapped (2^17 * 2^17 * 2^30
    # = 2^64 -> 0) and the header then met numpy's reshape error, without the path.
    dims, total = [], 1
    for k in range(rank):
        if len(blob) < 8 + 4 * k:
            raise ValueError(f"{name}: truncated IDX header")
        (d,) = struct.unpack(">I", blob[4 + 4 * k:8 + 4 * k])
        if d == 0:
            raise ValueError(f"{name}: IDX dimension {k} is zero")
        dims.append(d)
        total *= d  # a Python int: no wrap-around
        if total > MAX_ELEMENTS:
            raise ValueError(f"{name}: IDX dimensions too large (more than 2^34 elements)")
    data = blob[4 + 4 * rank:]
    if len(data) < total:
        raise ValueError(f"{name}: truncated: expected {total} data bytes, got {len(data)}")
    if len(data) > total:
        raise ValueError(f"{name}: trailing bytes after the IDX data")
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def _check_split(images, images_path, labels, labels_path):
    """check_idx_split: the same count N, every label in [0, 10)."""
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{labels_path}: label count {labels.shape[0]} != image count {images.shape[0]} "
                         f"in {images_path}")
    bad = np.flatnonzero(labels > 9)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{labels_path}: label {labels[i]} at index {i} is outside [0, 10)")


def fashion_mnist(split="test", limit=0, data_dir=DEFAULT_DIR):
    """(images u8 [N, 1, 28, 28], labels int64 [N]) of split "train" or "test" (t10k);
    limit > 0 keeps the first `limit` examples (load_fashion_mnist)."""
    if split not in _STEMS:
        raise ValueError(f"Fashion-MNIST split must be train or test, got {split!r}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    stem = os.path.join(os.fspath(data_dir), _STEMS[split])
    images_path, labels_path = f"{stem}-images-idx3-ubyte.gz", f"{stem}-labels-idx1-ubyte.gz"
    images = read_idx(images_path, 3)
    labels = read_idx(labels_path, 1)
    _check_split(images, images_path, labels, labels_path)
    N, H, W = images.shape
    n = N if limit == 0 else min(limit, N)
    x = torch.from_numpy(images[:n].reshape(n, 1, H, W).copy())
    y = torch.from_numpy(labels[:n].astype(np.int64))
    return x, y


def normalize_images(images):
    """u8 images [B, 1, H, W] -> float32 (x/255 − mean)/std, the C++ normalize_images: each
    operation rounds to fp32 in the same order (the scalars are cast to fp32 by torch)."""
    images = torch.as_tensor(images)
    return (images.to(torch.float32) / 255.0 - MEAN) / STD


def probe_images(m, data_dir=DEFAULT_DIR):
    """The probe batch `jacond audit` / `jacond train` tracking use with Token Graying "none":
    normalize_images(first m test images), float32 [m, 1, 28, 28]."""
    if m < 1:
        raise ValueError(f"probe size must be >= 1, got {m}")
    images, _ = fashion_mnist("test", limit=m, data_dir=data_dir)
    if images.shape[0] < m:
        raise ValueError(f"probe size {m} exceeds the {images.shape[0]} test images")
    return normalize_images(images)
