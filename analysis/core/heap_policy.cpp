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

// glibc reads these when malloc starts (their tunable names are glibc.malloc.*).
bool environment_sets_malloc() {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(name)) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables && std::strstr(tunables, "glibc.malloc.");
}
}  // namespace

HeapPolicy retain_freed_heap_memory() {
  if (environment_sets_malloc()) return in_effect = HeapPolicy::left_to_environment;
#if defined(__GLIBC__)
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, static_cast<int>(heap_mmap_threshold_bytes)) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, static_cast<int>(heap_trim_threshold_bytes)) == 1;
  return in_effect = mmap_set && trim_set ? HeapPolicy::applied : HeapPolicy::unavailable;
#else
  return in_effect = HeapPolicy::unavailable;
#endif
}

HeapPolicy heap_policy_in_effect() { return in_effect; }

const char* describe(HeapPolicy policy) {
  switch (policy) {
    case HeapPolicy::applied:
      return "kept for reuse (mmap threshold 64 MiB, trim threshold 1 GiB)";
    case HeapPolicy::left_to_environment:
      return "set by the environment";
    case HeapPolicy::unavailable:
      break;
  }
  return "the C library's default";
}

}  // namespace jacond
