#include "analysis/core/heap_policy.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace jacond {

namespace {
HeapPolicy in_effect = HeapPolicy::unavailable;
std::size_t mmap_threshold_in_effect = 0;

static_assert(heap_trim_threshold_bytes <= 0x7fffffff, "mallopt takes an int");

// Sets the mmap threshold (64 MiB, else older glibc's 32 MiB) and then the trim threshold; sets
// nothing more once a call is refused (the header says why). Returns the mmap threshold, 0 if none.
std::size_t set_thresholds() {
#if defined(__GLIBC__)
  for (std::size_t bytes : {heap_mmap_threshold_bytes, heap_mmap_threshold_fallback_bytes})
    if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) == 1)
      return mallopt(M_TRIM_THRESHOLD, static_cast<int>(heap_trim_threshold_bytes)) == 1 ? bytes : 0;
#endif
  return 0;
}
}  // namespace

// The settings glibc reads when malloc starts, and the policy's own off switch.
bool environment_sets_heap() {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(name)) return true;
  if (const char* heap = std::getenv("JACOND_HEAP"); heap && std::strcmp(heap, "default") == 0) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (!tunables) return false;
  for (const char* name : {"glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold", "glibc.malloc.top_pad",
                           "glibc.malloc.mmap_max"})
    if (std::strstr(tunables, name)) return true;
  return false;
}

HeapPolicy retain_freed_heap_memory() {
  mmap_threshold_in_effect = 0;
  if (environment_sets_heap()) return in_effect = HeapPolicy::left_to_environment;
  if (!glibc_malloc_serves_this_build) return in_effect = HeapPolicy::unavailable;
  mmap_threshold_in_effect = set_thresholds();
  return in_effect = mmap_threshold_in_effect ? HeapPolicy::applied : HeapPolicy::unavailable;
}

HeapPolicy heap_policy_in_effect() { return in_effect; }
std::size_t heap_mmap_threshold_in_effect() { return mmap_threshold_in_effect; }

std::string describe_heap_policy() {
  switch (in_effect) {
    case HeapPolicy::applied:
      return "kept for reuse (mmap threshold " + std::to_string(mmap_threshold_in_effect >> 20) + " MiB, trim threshold " +
             std::to_string(heap_trim_threshold_bytes >> 30) + " GiB)";
    case HeapPolicy::left_to_environment:
      return "set by the environment";
    case HeapPolicy::unavailable:
      break;
  }
  return "the C library's default";
}

}  // namespace jacond
