// The heap policy of analysis/core/heap_policy.h. Each test runs in its own process (ctest), so
// mallopt's process-wide setting does not leak into other tests.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/core/heap_policy.h"
#include "analysis/core/scoped_env.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

// AddressSanitizer's allocator replaces glibc's; its mallopt does nothing and returns 0.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool glibc_allocator = false;
#else
constexpr bool glibc_allocator = true;
#endif

bool environment_sets_malloc() {
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(name)) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables && std::strstr(tunables, "glibc.malloc.");
}

}  // namespace

// A 48 MiB block is above glibc's largest dynamic mmap threshold (32 MiB), so by default it is
// mapped and unmapped whatever the process did before. Under the policy it comes from the heap
// (no new mapped block) and, freed, stays there (the heap does not shrink).
TEST(HeapPolicy, FreedBlocksStayInTheHeapForReuse) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  if (environment_sets_malloc()) GTEST_SKIP() << "the environment sets glibc's malloc, which the policy leaves alone";
  if (!glibc_allocator) GTEST_SKIP() << "AddressSanitizer's allocator, not glibc's, serves this process";
  ASSERT_EQ(jacond::retain_freed_heap_memory(), jacond::HeapPolicy::applied);
  const std::size_t bytes = std::size_t{48} << 20;
  static_assert(std::size_t{48} << 20 < jacond::heap_mmap_threshold_bytes);
  const struct mallinfo2 before = mallinfo2();
  char* volatile block = static_cast<char*>(std::malloc(bytes));
  ASSERT_NE(block, nullptr);
  for (std::size_t i = 0; i < bytes; i += 4096) block[i] = 1;  // touched, as a tensor's output is
  const struct mallinfo2 held = mallinfo2();
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(held.hblks, before.hblks) << "the block was mapped, not taken from the heap";
  EXPECT_GE(held.arena, bytes);
  EXPECT_EQ(after.arena, held.arena) << "the freed block was trimmed from the heap";
#else
  GTEST_SKIP() << "mallinfo2 needs glibc 2.33 or later";
#endif
}

// A user's own glibc malloc settings stand: any of the variables glibc reads, or a GLIBC_TUNABLES
// naming glibc.malloc, leaves the policy unapplied. Other tunables do not.
TEST(HeapPolicy, TheEnvironmentsChoiceStands) {
#if defined(__GLIBC__)
  const char* names[] = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                         "GLIBC_TUNABLES"};
  std::vector<std::unique_ptr<jacond::ScopedEnv>> unset;
  for (const char* name : names) unset.push_back(std::make_unique<jacond::ScopedEnv>(name, std::nullopt));
  for (const char* name : names) {
    const std::string value = std::strcmp(name, "GLIBC_TUNABLES") ? "1048576" : "glibc.malloc.trim_threshold=1048576";
    jacond::ScopedEnv set(name, value);
    EXPECT_EQ(jacond::retain_freed_heap_memory(), jacond::HeapPolicy::left_to_environment) << name;
  }
  jacond::ScopedEnv other("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=512");
  EXPECT_EQ(jacond::retain_freed_heap_memory(),
            glibc_allocator ? jacond::HeapPolicy::applied : jacond::HeapPolicy::unavailable);
#else
  EXPECT_EQ(jacond::retain_freed_heap_memory(), jacond::HeapPolicy::unavailable);
#endif
}
