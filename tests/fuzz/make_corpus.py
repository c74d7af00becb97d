#!/usr/bin/env python3
"""Writes the fuzz seed corpus tests/fuzz/corpus/<target>/ (committed; rerun after a format
change): a few small valid files per parser, written here from the format descriptions in
models/io/safetensors.h, models/data/idx.h and models/io/checkpoint.h (not with jacond's own
writers, so a writer bug cannot shape the seeds), and a few malformed ones that reach the
checks past the first few bytes. Standard library only."""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- safetensors: u64 LE header length, JSON header (space-padded), data buffer ------------
def safetensors(tensors, metadata=None, pad=True, raw_header=None):
    header, data, off = {}, b"", 0
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        data += blob
        off += len(blob)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def st_seeds():
    f32 = struct.pack("<6f", 1, -2, 0.5, 3, 4, 5)
    put("fuzz_safetensors", "valid_f32.safetensors", safetensors({"x": ("F32", [2, 3], f32)}))
    put("fuzz_safetensors", "valid_all_dtypes.safetensors", safetensors({
        "a.f64": ("F64", [2], struct.pack("<2d", 1.5, -0.0)),
        "b.f32": ("F32", [], struct.pack("<f", 7.0)),
        "c.f16": ("F16", [1, 2], struct.pack("<2H", 0x3C00, 0x7C00)),
        "d.bf16": ("BF16", [2], struct.pack("<2H", 0x3F80, 0x7FC0)),
        "e.i64": ("I64", [1], struct.pack("<q", -3)),
        "f.i32": ("I32", [2], struct.pack("<2i", 5, -6)),
        "g.u8": ("U8", [3], b"\x00\x7f\xff"),
        "h.empty": ("F32", [0, 4], b""),
    }, metadata={"format": "jacond", "step": "12"}))
    put("fuzz_safetensors", "valid_empty.safetensors", safetensors({}))
    put("fuzz_safetensors", "valid_unpadded.safetensors",
        safetensors({"blocks.0.attn.qkv.weight": ("U8", [2, 2], b"\x01\x02\x03\x04")}, pad=False))
    # Malformed: overlap, hole, wrong byte count, bad dtype, invalid UTF-8 and controls in a
    # name, nested shape, truncated data, header length past the end.
    put("fuzz_safetensors", "bad_overlap.safetensors", safetensors({}, raw_header=
        b'{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},'
        b'"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}}') + bytes(20))
    put("fuzz_safetensors", "bad_hole.safetensors", safetensors({}, raw_header=
        b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        b'"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}') + bytes(20))
    put("fuzz_safetensors", "bad_count.safetensors", safetensors({}, raw_header=
        b'{"x":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}') + bytes(20))
    put("fuzz_safetensors", "bad_dtype.safetensors", safetensors({}, raw_header=
        b'{"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}') + bytes(2))
    put("fuzz_safetensors", "bad_utf8_name.safetensors", safetensors({}, raw_header=
        b'{"x\xff\x1b[31m":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}') + bytes(4))
    put("fuzz_safetensors", "bad_escaped_controls.safetensors", safetensors({}, raw_header=
        b'{"\\u001b[2J\\u0000\\u00e9":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}}') + bytes(4))
    put("fuzz_safetensors", "bad_nested_shape.safetensors", safetensors({}, raw_header=
        b'{"x":{"dtype":"F32","shape":[[[["\xc3\xa9"]]]],"data_offsets":[0,4]}}') + bytes(4))
    put("fuzz_safetensors", "bad_truncated.safetensors",
        safetensors({"x": ("F32", [2, 3], f32)})[:-5])
    put("fuzz_safetensors", "bad_header_length.safetensors", struct.pack("<Q", 1000) + b"{}      ")
    # A NUL after valid JSON (nlohmann stopped there), a zero extent beside extents whose product
    # overflows int64, an empty tensor inside another.
    put("fuzz_safetensors", "bad_nul_in_header.safetensors", safetensors({}, raw_header=
        b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}\x00garbage') + bytes(8))
    put("fuzz_safetensors", "bad_numel_overflow.safetensors", safetensors({}, raw_header=
        b'{"x":{"dtype":"F64","shape":[2,9223372036854775807,0],"data_offsets":[0,0]}}'))
    put("fuzz_safetensors", "bad_empty_inside.safetensors", safetensors({}, raw_header=
        b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
        b'"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}') + bytes(8))


# --- IDX: big-endian magic 0x0000080<rank>, u32 dims, u8 data; gzip or plain -----------------
def idx(rank, dims, data):
    return struct.pack(">I", 0x800 | rank) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def gz(b):
    return gzip.compress(b, mtime=0)


def idx_seeds():
    images = idx(3, [2, 3, 3], range(18))
    labels = idx(1, [4], [0, 9, 3, 1])
    put("fuzz_idx", "images.idx", images)
    put("fuzz_idx", "labels.idx", labels)
    put("fuzz_idx", "images.idx.gz", gz(images))
    put("fuzz_idx", "labels.idx.gz", gz(labels))
    put("fuzz_idx", "labels_two_members.idx.gz", gz(labels[:6]) + gz(labels[6:]))
    put("fuzz_idx", "bad_label_value.idx", idx(1, [3], [0, 10, 2]))
    put("fuzz_idx", "bad_trailing.idx", labels + b"\x00")
    put("fuzz_idx", "bad_truncated.idx.gz", gz(images)[:-9])
    put("fuzz_idx", "bad_trailing_garbage.idx.gz", gz(labels) + b"junk")
    put("fuzz_idx", "labels_zero_padded.idx.gz", gz(labels[:6]) + bytes(5) + gz(labels[6:]) + bytes(11))
    put("fuzz_idx", "bad_zero_padding_then_garbage.idx.gz", gz(labels) + bytes(4) + b"junk")
    put("fuzz_idx", "bad_huge_dims.idx", idx(3, [1 << 17, 1 << 17, 1 << 30], []))
    put("fuzz_idx", "bad_magic.idx", idx(2, [2, 2], range(4)))


# --- checkpoint meta.json, as write_checkpoint and the trainer write it ---------------------
def meta_seeds():
    full = {
        "epoch": 1, "format": "jacond-checkpoint/1", "step": 120,
        "model": {"depth": 2, "dim": 8, "heads": 2, "patch": 7, "image": 28, "skip": "none"},
        "train": {"lr": 0.001, "batch": 64, "probe_size": 1, "keep": 3},
        "rng": {"augment": "12 34 56", "torch": "manual_seed(layer_seed(seed, step)) before each step"},
        "metrics": {"train_loss": 2.3, "test_loss": None, "test_acc": None},
    }
    put("fuzz_checkpoint_meta", "valid_full.json", (json.dumps(full, indent=2) + "\n").encode())
    put("fuzz_checkpoint_meta", "valid_minimal.json",
        b'{"format":"jacond-checkpoint/1","step":0,"model":{}}')
    put("fuzz_checkpoint_meta", "bad_format_type.json", b'{"format":1,"step":0,"model":{}}')
    put("fuzz_checkpoint_meta", "bad_step.json",
        b'{"format":"jacond-checkpoint/1","step":18446744073709551615,"model":{}}')
    put("fuzz_checkpoint_meta", "bad_negative_step.json",
        b'{"format":"jacond-checkpoint/1","step":-1,"model":{}}')
    put("fuzz_checkpoint_meta", "bad_utf8.json", b'{"format":"jacond-checkpoint/1\xff\x1b[31m","step":0}')
    put("fuzz_checkpoint_meta", "bad_truncated.json", b'{"format": "jacond-checkpoint/1", "step": ')
    put("fuzz_checkpoint_meta", "bad_deep.json", b'{"format":' + b"[" * 200 + b"]" * 200 + b"}")
    put("fuzz_checkpoint_meta", "bad_nul.json", b'{"format":"jacond-checkpoint/1","step":0,"model":{}}\x00junk')


if __name__ == "__main__":
    shutil.rmtree(OUT, ignore_errors=True)
    st_seeds()
    idx_seeds()
    meta_seeds()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"make_corpus: wrote {OUT} ({total} bytes)")
