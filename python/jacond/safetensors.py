"""jacond's safetensors reader (docs/design.md §6): numpy only, for the package and the bench scripts.

This is `jacond.safetensors` (the package reads checkpoints with it, python/jacond/vit.py) and is
also loaded by file path, with no package around it, by experiments/bench/torch_dense_route.py and
scipy_svds_route.py (which must not import the compiled extension): so it imports nothing
package-relative. The C++ side is models/io/safetensors.cpp; each reads what the other writes, and
this reads any other safetensors file of the dtypes below.

Debian packages no python3-safetensors, so this reads the format directly:

    [0, 8)       u64 little-endian N: byte length of the JSON header
    [8, 8+N)     UTF-8 JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]},
                 ..., "__metadata__": {str: str}}   (may be padded with trailing spaces)
    [8+N, EOF)   data buffer; a tensor's bytes are [begin, end) relative to its start,
                 row-major (C order), little-endian.

Usage:
    tensors, metadata = read("weights.safetensors")   # {name: np.ndarray}, {str: str}
    write("tokens.safetensors", {"tokens": X})         # e.g. tokens for `jacond block --tokens`

The arrays are writable views into one bytearray read from the file (no per-tensor copy), except
BF16 tensors, which numpy has no type for: they come back as float32 arrays of the same values.
Values are not judged (NaN/inf come back as stored). The header is read as strictly as the C++
reader reads it: NaN / Infinity (not JSON) and unpaired UTF-16 surrogates ("\\ud800") are refused.
"""

import errno
import json
import math
import os
import struct
import sys

import numpy as np

# safetensors dtype name -> numpy little-endian dtype of the stored elements. BF16 has no numpy
# type: its elements are read as uint16 and widened to float32 (a bf16 is the top half of an fp32).
# The 8-bit floats are rejected.
DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

# The dtypes of the C++ reader (models/io/safetensors.cpp, parse_dtype). write() writes only these
# (of them, the ones numpy has: not BF16), so every file it writes is one `jacond` reads; I16, I8
# and BOOL are read here (other tools' files) but refused on write.
CPP_DTYPES = ("F64", "F32", "F16", "BF16", "I64", "I32", "U8")
WRITE_DTYPES = {DTYPES[name]: name for name in CPP_DTYPES if name != "BF16"}

METADATA_KEY = "__metadata__"


# The most dimensions an array has in every numpy this runs with (1.x: 32; 2.x: 64).
MAX_DIMS = 32


class SafetensorsError(ValueError):
    """Any problem with a file; the message is one line: '<path>: <problem>'."""


def _quote(value, limit=60):
    """repr(value) cut to `limit` characters: file-derived values in a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_count(value):
    """A JSON integer >= 0 (not a bool, which Python counts as an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read(path):
    """Returns ({name: np.ndarray}, {metadata key: value}) of the file at `path`."""
    with open(path, "rb") as f:
        blob = bytearray(f.read())

    def fail(problem):
        raise SafetensorsError(f"{path}: {problem}")

    if len(blob) < 8:
        fail(f"file is {len(blob)} bytes, shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", bytes(blob[:8]))
    if header_len > len(blob) - 8:
        fail(f"header length {header_len} exceeds the file ({len(blob)} bytes)")
    try:
        header = json.loads(bytes(blob[8:8 + header_len]).decode("utf-8"), parse_constant=_not_json)
    except RecursionError:
        fail("header is not a safetensors header (JSON nested too deeply)")
    except _NotJson as e:
        fail(f"header is not valid JSON ({e})")
    except ValueError as e:  # UnicodeDecodeError, json.JSONDecodeError
        fail(f"header is not valid UTF-8 JSON ({e})")
    surrogate = _lone_surrogate(header)
    if surrogate is not None:
        fail(f"header is not valid JSON (unpaired UTF-16 surrogate \\u{ord(surrogate):04x} in a string)")
    if not isinstance(header, dict):
        fail("header is not a JSON object")

    metadata = header.pop(METADATA_KEY, {})  # as the C++ reader: an object of strings when present
    if not isinstance(metadata, dict):
        fail(f"__metadata__ is not an object of strings (got {_quote(metadata)})")
    for key, value in metadata.items():
        if not isinstance(value, str):
            fail(f"__metadata__ {_quote(key)}: value {_quote(value)} is not a string")

    data = memoryview(blob)[8 + header_len:]
    tensors = {}
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            fail(f"tensor {name!r}: entry needs dtype, shape and data_offsets")
        dtype_name = info["dtype"]
        if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
            fail(f"tensor {name!r}: unsupported dtype {_quote(dtype_name)} "
                 f"(supported: {', '.join(DTYPES)})")
        dtype = DTYPES[dtype_name]
        itemsize = 4 if dtype_name == "BF16" else dtype.itemsize  # of the array returned
        shape = info["shape"]
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(_is_count(s) and s <= np.iinfo(np.intp).max for s in shape)):
            fail(f"tensor {name!r}: bad shape {_quote(shape)} (at most {MAX_DIMS} integer extents in [0, 2^63))")
        offsets = info["data_offsets"]
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
            fail(f"tensor {name!r}: bad data_offsets {_quote(offsets)}")
        begin, end = offsets
        if not begin <= end <= len(data):
            fail(f"tensor {name!r}: data_offsets [{begin}, {end}] outside the data buffer "
                 f"({len(data)} bytes)")
        count = math.prod(shape)  # a Python int: no wrap-around (an int64 product of [2**62, 4] is 0)
        if end - begin != count * dtype.itemsize:
            fail(f"tensor {name!r}: {end - begin} bytes for shape {_quote(shape)} of {dtype_name} "
                 f"(expected {count * dtype.itemsize})")
        # An empty tensor's other extents are free of the bytes, but numpy refuses a shape whose
        # nonzero extents span more than its largest size ([0, 2**62] of F64).
        if math.prod(s for s in shape if s) * itemsize > np.iinfo(np.intp).max:
            fail(f"tensor {name!r}: shape {_quote(shape)} of {dtype_name} is too large for an array")
        elements = np.frombuffer(data[begin:end], dtype=dtype)
        if dtype_name == "BF16":  # the bf16 bits as the upper half of a float32: exact
            elements = (elements.astype("<u4") << 16).view("<f4")
        tensors[name] = elements.reshape(shape)
        spans.append((begin, end, name))

    # The byte ranges must tile the data buffer: no overlap, no hole.
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            fail(f"tensor {name!r}: starts at {begin}, expected {position} "
                 "(overlap or hole in the data buffer)")
        position = end
    if position != len(data):
        fail(f"tensors cover {position} of {len(data)} data bytes")
    return tensors, metadata


def write(path, tensors, metadata=None):
    """Writes {name: array} (and optional {str: str} metadata) at `path`. Arrays keep their dtype
    (one the C++ reader reads: float64, float32, float16, int64, int32, uint8) and C order; another
    dtype (bool, int8, int16 ...) or a tensor named "__metadata__" is a SafetensorsError, as neither
    would read back in `jacond`. Through a temporary name and a rename, so a reader never sees half
    a file; the file and then its directory are fsync'ed, and on any failure the temporary file is
    removed (the destination is left as it was).

    Layout, as models/io/safetensors.cpp writes it: the header (keys in name order) is padded with
    spaces so that the data starts at a multiple of 8, and the data holds the tensors by element
    size descending, then name (HF's writer does the same). Every tensor then starts at a file
    offset that is a multiple of its element size, which zero-copy loaders need (torch: "storage_
    offset() must be divisible by 8"); name order put an F64 after an F16[3] at an odd offset."""
    names = WRITE_DTYPES
    arrays = {}
    for name in sorted(tensors):
        if name == METADATA_KEY:  # the header's metadata entry: the file would not read back
            raise SafetensorsError(f"{path}: a tensor may not be named {METADATA_KEY!r} (the header's metadata key)")
        a = np.ascontiguousarray(tensors[name])
        if a.dtype.newbyteorder("<") not in names:
            known = {dtype: label for label, dtype in DTYPES.items() if label not in names.values()}
            label = known.get(a.dtype.newbyteorder("<"))
            raise SafetensorsError(f"{path}: tensor {name!r} has dtype {a.dtype}"
                                   + (f" ({label}), which jacond's C++ reader cannot read" if label else "")
                                   + f"; write one of {', '.join(str(d) for d in names)}")
        arrays[name] = a.astype(a.dtype.newbyteorder("<"), copy=False)
    header, offset = {}, 0
    order = sorted(arrays, key=lambda name: (-arrays[name].dtype.itemsize, name))
    for name in order:
        a = arrays[name]
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    header = dict(sorted(header.items()))
    if metadata:
        header[METADATA_KEY] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for name in order:
                f.write(arrays[name].reshape(-1).view(np.uint8))
            f.flush()
            os.fsync(f.fileno())  # the data on disk before the rename can expose it
        os.replace(temporary, path)
    except BaseException:
        # A failed write (disk full, a bad path, an interrupt) leaves no *.tmp-<pid> behind.
        try:
            os.remove(temporary)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(os.path.dirname(os.path.abspath(path)))


class _NotJson(ValueError):
    """A header value the JSON grammar has no place for (Python's json reads NaN and Infinity)."""


def _not_json(constant):
    raise _NotJson(f"{constant} is not a JSON value")


def _lone_surrogate(value):
    """The first unpaired UTF-16 surrogate in a string (key or value) of a parsed JSON value, or
    None. json.loads turns an escaped lone surrogate ("\\udc00") into a str that is not UTF-8;
    the C++ reader (nlohmann) refuses it. Iterative: the nesting is as deep as json.loads allowed."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                return v[e.start]
    return None


def _fsync_directory(directory):
    """fsync of a directory, so that a rename into it survives a crash (POSIX; elsewhere a
    directory cannot be opened for it and there is nothing to do). EINVAL means the filesystem
    has no directory fsync: nothing more to flush."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def main(argv):
    """`python3 safetensors.py FILE...`: lists each tensor's name, dtype and shape."""
    for path in argv[1:]:
        tensors, metadata = read(path)
        print(path)
        for name, array in sorted(tensors.items()):
            print(f"  {name:40s} {str(array.dtype):8s} {list(array.shape)}")
        for key, value in sorted(metadata.items()):
            print(f"  __metadata__.{key} = {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
