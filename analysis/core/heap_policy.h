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
//   - glibc's default (JACOND_HEAP=default): about 97 000 faults per step, 43-52 images/s for AdamW;
//   - this policy: 120-180 faults per step over 20 timed steps, 84-97 images/s, with the same
//     ATen operations;
//   - setting only one of the two thresholds: 24 500 (mmap) or 388 000 (trim) faults per step;
//   - Python PyTorch in the same runs: 1 300-3 400 faults per step, 70-88 images/s. Why its
//     process is spared was not established (presumably the interpreter's live allocations keep
//     the heap's top from being trimmed).
// `jacond train` (20 steps and the test evaluation) took 97 s against 167 s, with the same losses.
//
// Policy (mallopt; setting either parameter also switches off glibc's dynamic threshold):
//   M_MMAP_THRESHOLD = 64 MiB: blocks up to that size come from the heap. Larger blocks are
//       still mapped and returned at once. Dense analysis matrices are such blocks: K_sa at
//       nd 6400 in fp64 is 328 MB. Older glibc refuses more than 32 MiB (HEAP_MAX_SIZE / 2 on
//       64-bit, the limit mallopt(3) documents); 32 MiB is taken there. The mmap threshold is set
//       first, and if even 32 MiB is refused nothing else is set: a trim threshold alone would
//       freeze the mmap threshold at 128 KiB, which is worse than the default (388 000 faults a
//       step, measured).
//   M_TRIM_THRESHOLD = 1 GiB: up to that much free heap top is kept for the next allocation.
// The cost is resident memory: a process keeps its peak heap of blocks under 64 MiB, capped at
// 1 GiB of free top. LibTorch's CUDA allocator keeps device memory the same way.
//
// Left alone when:
//   - the environment sets the thresholds itself: MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_,
//     MALLOC_TOP_PAD_, MALLOC_MMAP_MAX_, or GLIBC_TUNABLES naming glibc.malloc.mmap_threshold,
//     trim_threshold, top_pad or mmap_max. Other tunables, such as arena_max, do not count;
//   - JACOND_HEAP=default, the off switch, which keeps glibc's default behaviour;
//   - the C library is not glibc, or a sanitizer's allocator serves the build (its mallopt does
//     nothing).
// Only the `jacond` executable applies this policy. A library has no business setting its host's
// malloc: the Python module loaded into a user's interpreter does not.
//
// Guarded by tests/analysis/core/test_heap_policy.cpp: a 48 MiB block, above glibc's 32 MiB
// dynamic limit, comes from the heap, and its memory stays there after free.
#pragma once

#include <cstddef>
#include <cstdlib>  // defines __GLIBC__ on glibc
#include <string>

// A sanitizer's allocator, not the C library's, serves this build (its mallopt does nothing).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define JACOND_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define JACOND_SANITIZER_ALLOCATOR 1
#endif
#endif

namespace jacond {

#if defined(__GLIBC__) && !defined(JACOND_SANITIZER_ALLOCATOR)
inline constexpr bool glibc_malloc_serves_this_build = true;
#else
inline constexpr bool glibc_malloc_serves_this_build = false;
#endif

enum class HeapPolicy {
  applied,              // the thresholds are set (heap_mmap_threshold_in_effect says which mmap one)
  left_to_environment,  // the environment sets them, or JACOND_HEAP=default; nothing changed
  unavailable,          // not glibc's malloc, or mallopt refused
};

inline constexpr std::size_t heap_mmap_threshold_bytes = std::size_t{64} << 20;
inline constexpr std::size_t heap_mmap_threshold_fallback_bytes = std::size_t{32} << 20;  // older glibc's limit
inline constexpr std::size_t heap_trim_threshold_bytes = std::size_t{1} << 30;

/// Whether the environment sets the thresholds or says JACOND_HEAP=default (the policy then stands
/// aside; the header comment lists the variables).
bool environment_sets_heap();

/// Applies the policy above, once, at the start of a process (before its threads start).
HeapPolicy retain_freed_heap_memory();

/// What the last retain_freed_heap_memory() call did in this process (unavailable: never called,
/// as in a test executable or the Python module), and the mmap threshold it set (0 unless applied).
HeapPolicy heap_policy_in_effect();
std::size_t heap_mmap_threshold_in_effect();

/// What the policy did in this process, in a few words for a log or run.json: "kept for reuse
/// (mmap threshold 64 MiB, trim threshold 1 GiB)", "set by the environment", "the C library's
/// default".
std::string describe_heap_policy();

}  // namespace jacond
