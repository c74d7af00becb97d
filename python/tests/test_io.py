"""File I/O of the Python module against the C++ rules it mirrors: jacond.safetensors (the writer's
layout and durability, the reader's rejections) and jacond.data's IDX decoder (the same accept /
reject, with the same messages, as models/data/idx.cpp on the same bytes as
tests/models/test_fashion_mnist.cpp).

Run in-tree by ctest (python.pytest): PYTHONPATH=<build>/python /usr/bin/python3 -m pytest python/tests.
"""

import json
import os
import stat
import struct

import numpy as np
import pytest

from jacond import data, safetensors


def header_of(path):
    """(N, header dict) of a safetensors file, read from its bytes (not through the reader)."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    return n, json.loads(blob[8:8 + n])


def write_raw(path, header_text, data_bytes):
    """A safetensors file from header text (space-padded to a multiple of 8) and data bytes."""
    text = header_text.encode() if isinstance(header_text, str) else header_text
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data_bytes)


# ---------------------------------------------------------------------------------------------
# safetensors: the writer
# ---------------------------------------------------------------------------------------------

def test_write_keeps_every_tensor_aligned_to_its_element_size(tmp_path):
    # In name order an F64 after an F16[3] started 6 bytes into the data: zero-copy loaders
    # (torch.frombuffer on an mmap: "storage_offset() must be divisible by 8") refuse it. Every
    # tensor must start at a file offset (8 + N + begin) that its element size divides, as in the
    # C++ writer (test_safetensors.cpp, WriterKeepsEveryTensorAlignedToItsElementSize).
    tensors = {"a": np.array([1, 2, 3], np.float16), "b": np.array([4.0, 5.0]),
               "c": np.array([6], np.uint8), "d": np.array([7], np.float32), "e": np.array([8], np.int64)}
    path = tmp_path / "aligned.safetensors"
    safetensors.write(path, tensors, {"k": "v"})
    n, header = header_of(path)
    assert (8 + n) % 8 == 0
    for name, a in tensors.items():
        begin = header[name]["data_offsets"][0]
        assert (8 + n + begin) % a.dtype.itemsize == 0, f"{name} at data offset {begin}"
    assert [k for k in header if k != "__metadata__"] == sorted(tensors)  # header keys: name order
    back, meta = safetensors.read(path)
    assert meta == {"k": "v"}
    for name, a in tensors.items():
        assert back[name].dtype == a.dtype and np.array_equal(back[name], a), name


def test_write_lays_out_the_data_as_the_cpp_writer(tmp_path):
    # The tensors of test_safetensors.cpp's WriterOutputMatchesSpecLayout: b (F64), a (F32), h (F16)
    # in the data buffer, by element size then name, whatever order they are given in.
    path = tmp_path / "order.safetensors"
    safetensors.write(path, {"h": np.array([1.0, -2.0, 65504.0], np.float16),
                             "a": np.array([1.0, -2.5], np.float32), "b": np.array([0.1])})
    _, header = header_of(path)
    assert {k: v["data_offsets"] for k, v in header.items()} == {"b": [0, 8], "a": [8, 16], "h": [16, 22]}


def test_write_refuses_what_the_cpp_reader_cannot_read(tmp_path):
    # bool, int8 and int16 are safetensors dtypes (BOOL, I8, I16) that models/io/safetensors.cpp
    # does not read: written, `jacond block --tokens` refused the file. A tensor named
    # "__metadata__" made a header whose metadata entry is an array: unreadable by both readers.
    path = tmp_path / "w.safetensors"
    for dtype, label in ((np.bool_, "BOOL"), (np.int8, "I8"), (np.int16, "I16")):
        with pytest.raises(safetensors.SafetensorsError) as e:
            safetensors.write(path, {"x": np.zeros(2), "extra": np.zeros(2, dtype)})
        message = str(e.value)
        assert f"({label}), which jacond's C++ reader cannot read" in message and "\n" not in message, message
    with pytest.raises(safetensors.SafetensorsError, match="a tensor may not be named '__metadata__'"):
        safetensors.write(path, {"x": np.zeros(2), "__metadata__": np.zeros(2)})
    assert list(tmp_path.iterdir()) == []
    for dtype in (np.float64, np.float32, np.float16, np.int64, np.int32, np.uint8):  # the C++ reader's
        safetensors.write(path, {"x": np.arange(3).astype(dtype)})
        assert safetensors.read(path)[0]["x"].dtype == dtype


def test_reader_reads_bf16_as_float32(tmp_path):
    # BF16 (torch's bfloat16 checkpoints), which the C++ reader reads, was "unsupported dtype": its
    # 16 bits are the top half of a float32, here of values bf16 holds exactly.
    values = np.array([[1.0, -2.0, 0.15625], [256.0, -0.0, np.inf], [3.0e-39, 1.5, -1e30]], np.float32)
    values = (values.view(np.uint32) & 0xFFFF0000).view(np.float32)  # exact in bf16
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    path = tmp_path / "bf16.safetensors"
    header = {"b": {"dtype": "BF16", "shape": [3, 3], "data_offsets": [0, 18]},
              "f": {"dtype": "F64", "shape": [1], "data_offsets": [24, 32]}}
    write_raw(path, json.dumps(header), bits.tobytes() + bytes(6) + np.array([0.5]).tobytes())
    with pytest.raises(safetensors.SafetensorsError, match="starts at 24, expected 18"):
        safetensors.read(path)  # the layout rules hold for BF16's 2-byte elements too
    header["f"]["data_offsets"] = [18, 26]
    write_raw(path, json.dumps(header), bits.tobytes() + np.array([0.5]).tobytes())
    tensors, _ = safetensors.read(path)
    assert tensors["b"].dtype == np.float32 and tensors["b"].shape == (3, 3)
    np.testing.assert_array_equal(tensors["b"], values)
    assert np.signbit(tensors["b"][1, 1]) and tensors["f"].tolist() == [0.5]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_failed_write_leaves_no_temporary_file_and_the_old_file(tmp_path, monkeypatch, failing):
    # A write that raises after the temporary file exists (here: its fsync, or the rename) must
    # remove it; it used to stay behind as *.tmp-<pid>. The destination keeps its old content.
    path = tmp_path / "w.safetensors"
    safetensors.write(path, {"old": np.zeros(2)})
    before = path.read_bytes()

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="No space left"):
        safetensors.write(path, {"new": np.ones(1000)})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]
    assert path.read_bytes() == before


def test_write_fsyncs_the_file_and_then_its_directory(tmp_path, monkeypatch):
    # Without the file's fsync the rename can expose unwritten data after a crash; without the
    # directory's, the rename itself may not survive one.
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    safetensors.write(tmp_path / "w.safetensors", {"x": np.zeros(3)})
    assert synced == ["file", "dir"]


# ---------------------------------------------------------------------------------------------
# safetensors: the reader rejects what the C++ reader rejects (the files of test_safetensors.cpp)
# ---------------------------------------------------------------------------------------------

X_F32 = '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'


@pytest.mark.parametrize("header, data_bytes, problem", [
    # RejectsNulByteInHeader: "{valid}\0garbage" (nlohmann stopped at the NUL and accepted it).
    (X_F32.encode() + b"\0garbage", bytes(8), "not valid UTF-8 JSON"),
    # RejectsAByteOrderMark: nlohmann skipped a UTF-8 BOM (read the file this reader refuses).
    (b"\xef\xbb\xbf" + X_F32.encode(), bytes(8), "Unexpected UTF-8 BOM"),
    # RejectsShapeWhoseElementCountOverflowsInt64: one zero extent, the others past int64.
    ('{"x":{"dtype":"F64","shape":[2,9223372036854775807,0],"data_offsets":[0,0]}}', b"",
     "too large for an array"),
    # RejectsEmptyTensorInsideAnother: an empty tensor at [4, 4) inside a at [0, 8).
    ('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
     '"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}', bytes(8), "overlap or hole"),
    # NaN and Infinity are not JSON (nlohmann refuses them; Python's json.loads read them), here in
    # an entry's extra key, which both readers otherwise ignore.
    ('{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"scale":NaN}}', bytes(8), "NaN is not a JSON value"),
    ('{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"scale":-Infinity}}', bytes(8),
     "-Infinity is not a JSON value"),
    # An escaped unpaired UTF-16 surrogate (nlohmann refuses it; json.loads made a str no UTF-8
    # holds), in a metadata value and in a tensor name.
    ('{"__metadata__":{"k":"\\ud800"},' + X_F32[1:], bytes(8), "unpaired UTF-16 surrogate \\ud800"),
    ('{"\\udc00":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', bytes(8), "unpaired UTF-16 surrogate"),
])
def test_reader_rejects_what_the_cpp_reader_rejects(tmp_path, header, data_bytes, problem):
    path = tmp_path / "bad.safetensors"
    write_raw(path, header, data_bytes)
    with pytest.raises(safetensors.SafetensorsError) as e:
        safetensors.read(path)
    assert str(e.value).startswith(f"{path}: ") and problem in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------
# IDX: the same bytes as tests/models/test_fashion_mnist.cpp, the same verdicts and messages
# ---------------------------------------------------------------------------------------------

# G: gzip (zlib, mtime 0) of the label file {0x801, 5} + five 3s; G1, G2: of its first 7 and last
# 6 bytes. The hex is the same in test_fashion_mnist.cpp.
G = bytes.fromhex("1f8b08000000000002036360e06064606060650601005434cfef0d000000")
G1 = bytes.fromhex("1f8b08000000000002036360e0606460600000daf3a01507000000")
G2 = bytes.fromhex("1f8b080000000000020363650601000e59780406000000")
LABELS = struct.pack(">II", 0x801, 5) + b"\x03" * 5


def idx_bytes(words, payload, value=1):
    """Raw IDX: big-endian header words then `payload` data bytes (test_fashion_mnist.cpp's)."""
    return struct.pack(f">{len(words)}I", *words) + bytes([value]) * payload


def idx_error(tmp_path, blob, rank):
    """The message read_idx raises on a file holding `blob`, without the path; '' if it reads."""
    path = tmp_path / "mem.idx"
    path.write_bytes(blob)
    try:
        data.read_idx(str(path), rank)
    except ValueError as e:
        assert str(e).startswith(f"{path}: "), e
        return str(e)[len(f"{path}: "):]
    return ""


def test_gzip_decoding_agrees_with_cpp(tmp_path):
    # GzipZeroPaddingIsSkippedAsByPythonAndOtherTrailingBytesAreErrors: zero bytes after a member
    # are skipped by both decoders; any other byte after a member is an error in both, with the
    # C++ messages (Python's gzip.decompress said "Not a gzipped file (b'ju')").
    for ok in (G, G + bytes(16), G1 + bytes(4) + G2, G + bytes(200000)):
        assert idx_error(tmp_path, ok, 1) == ""
        assert data.read_idx(str(tmp_path / "mem.idx"), 1).tolist() == [3] * 5
    assert idx_error(tmp_path, G + bytes(4) + b"junk", 1) == "trailing bytes after the gzip data"
    assert idx_error(tmp_path, G + b"junk", 1) == "trailing bytes after the gzip data"
    assert idx_error(tmp_path, G + bytes(3) + b"\x1f", 1) == "gzip error: truncated data (unexpected end of file)"
    assert idx_error(tmp_path, G[:-4], 1) == "gzip error: truncated data (unexpected end of file)"
    assert idx_error(tmp_path, LABELS + bytes(4), 1) == "trailing bytes after the IDX data"
    bad_crc = bytearray(G)
    bad_crc[-8] ^= 0x5A
    assert idx_error(tmp_path, bytes(bad_crc), 1) == "gzip error: incorrect data check"  # zlib's message, as in C++


def test_idx_dimension_cap_agrees_with_cpp(tmp_path):
    # DimensionProductThatWouldWrapIsRejected and DimensionCapIsCheckedDimensionByDimensionAsInPython:
    # 2^17 * 2^17 * 2^30 wrapped to 0 in np.prod(uint64) and met numpy's reshape error, without the
    # path; [2^20, 2^20, 0] passes 2^34 at the second dimension, before the zero is read.
    too_large = "IDX dimensions too large (more than 2^34 elements)"
    assert idx_error(tmp_path, idx_bytes([0x803, 1 << 17, 1 << 17, 1 << 30], 0), 3) == too_large
    assert idx_error(tmp_path, idx_bytes([0x803, 1 << 20, 1 << 20, 0], 0), 3) == too_large
    assert idx_error(tmp_path, idx_bytes([0x803, 0, 1 << 20, 1 << 20], 0), 3) == "IDX dimension 0 is zero"
    assert idx_error(tmp_path, idx_bytes([0x803, 1 << 14, 1 << 10, 1 << 10], 4), 3) == \
        "truncated: expected 17179869184 data bytes, got 4"
    assert data.parse_idx(idx_bytes([0x803, 2, 3, 1], 6, 5), 3).shape == (2, 3, 1)
