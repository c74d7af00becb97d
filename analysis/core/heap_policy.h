// The C library heap policy of the `jacond` process: freed memory is kept for reuse.
//
// Why: a training step allocates and frees the same tensors every time. So do a sweep's grid
// points and the analysis of each layer. glibc's malloc, by default:
//   - maps each block above a dynamic threshold with mmap and unmaps it on free. The threshold
//     starts at 128 KiB and rises to at most 32 MiB as mapped blocks are freed;
//   - trims the heap's free top above twice that threshold. At the end of backward the step's
//     activations are freed together, hundreds of MB, so they are trimmed.
// The next step then faults every page back in. Each fault traps into the kernel, which
// zero-fills a 4 KiB page. This happens on first touch, which is usually the copy of the bias
// into addmm's output. Measured with `jacond bench train` (d 192, depth 6, batch 128, 1 thread,
// this 2-core VM, 2026-11-28), which counts minor page faults over a timed step (getrusage):
//   - glibc's default: about 97 000 faults per step, 43-52 images/s for AdamW;
//   - this policy: about 120 faults per step, 84-97 images/s, with the same ATen operations;
//   - setting only one of the two thresholds: 24 500 (mmap) or 388 000 (trim) faults per step;
//   - Python PyTorch in the same run: 1 300-2 000 faults per step, 70-87 images/s. Why its
//     process is spared was not established (presumably the interpreter's live allocations keep
//     the heap's top from being trimmed).
// `jacond train` (20 steps and the test evaluation) took 97 s against 167 s, with the same losses.
//
// Policy (mallopt; setting either parameter also switches off glibc's dynamic threshold):
//   M_MMAP_THRESHOLD = 64 MiB: blocks up to that size come from the heap. Larger blocks are
//       still mapped and returned at once. Dense analysis matrices are such blocks: K_sa at
//       nd 6400 in fp64 is 328 MB.
//   M_TRIM_THRESHOLD = 1 GiB: up to that much free heap top is kept for the next allocation.
// The cost is resident memory: a process keeps its peak heap of blocks under 64 MiB, capped at
// 1 GiB of free top. LibTorch's CUDA allocator keeps device memory the same way.
//
// Left alone: if the environment already sets glibc's malloc (MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, MALLOC_MMAP_MAX_, or GLIBC_TUNABLES naming
// glibc.malloc), the user's choice stands. Also left alone off glibc. Only the `jacond` executable
// applies this policy. A library has no business setting its host's malloc: the Python module
// loaded into a user's interpreter does not.
//
// Guarded by tests/analysis/core/test_heap_policy.cpp: a 48 MiB block, above glibc's 32 MiB
// dynamic limit, comes from the heap, and its memory stays there after free.
#pragma once

#include <cstddef>

namespace jacond {

enum class HeapPolicy {
  applied,              // the thresholds below are set
  left_to_environment,  // the environment sets glibc's malloc; nothing changed
  unavailable,          // not glibc, or mallopt refused
};

inline constexpr std::size_t heap_mmap_threshold_bytes = std::size_t{64} << 20;
inline constexpr std::size_t heap_trim_threshold_bytes = std::size_t{1} << 30;

/// Applies the policy above, once, at the start of a process (before its threads start).
HeapPolicy retain_freed_heap_memory();

/// What the last retain_freed_heap_memory() call did in this process (unavailable: never called,
/// as in a test executable or the Python module).
HeapPolicy heap_policy_in_effect();

/// What the policy did, in a few words for a log or run.json: "kept for reuse (mmap threshold
/// 64 MiB, trim threshold 1 GiB)", "set by the environment", "the C library's default".
const char* describe(HeapPolicy policy);

}  // namespace jacond
