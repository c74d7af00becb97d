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

const char* const heap_variables[] = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                                      "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES", "JACOND_HEAP"};

// Every variable the policy reads, unset for one scope.
struct NoHeapVariables {
  std::vector<std::unique_ptr<jacond::ScopedEnv>> unset;
  NoHeapVariables() {
    for (const char* name : heap_variables) unset.push_back(std::make_unique<jacond::ScopedEnv>(name, std::nullopt));
  }
};

}  // namespace

// A block above glibc's largest dynamic mmap threshold (32 MiB) is mapped and unmapped by default,
// whatever the process did before. Under the policy it comes from the heap (no new mapped block)
// and, freed, stays there (the heap does not shrink). 48 MiB where the 64 MiB threshold was taken;
// on an older glibc that took 32 MiB, 24 MiB (then a fresh process's dynamic threshold, 128 KiB
// until a mapped block is freed, is what the policy is told apart from).
TEST(HeapPolicy, FreedBlocksStayInTheHeapForReuse) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  if (!jacond::glibc_malloc_serves_this_build) GTEST_SKIP() << "a sanitizer's allocator, not glibc's, serves this build";
  const NoHeapVariables clean;
  ASSERT_EQ(jacond::retain_freed_heap_memory(), jacond::HeapPolicy::applied);
  const std::size_t bytes =
      std::size_t{jacond::heap_mmap_threshold_in_effect() == jacond::heap_mmap_threshold_bytes ? 48u : 24u} << 20;
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
  EXPECT_EQ(jacond::describe_heap_policy().rfind("kept for reuse (mmap threshold ", 0), 0u) << jacond::describe_heap_policy();
#else
  GTEST_SKIP() << "mallinfo2 needs glibc 2.33 or later";
#endif
}

// A user's own threshold settings stand: any of the variables glibc reads, a GLIBC_TUNABLES naming
// one of the four thresholds, or JACOND_HEAP=default leaves the policy unapplied. Other tunables
// (arena_max) and other JACOND_HEAP values do not.
TEST(HeapPolicy, TheEnvironmentsChoiceStands) {
  const NoHeapVariables clean;
  const std::vector<std::pair<const char*, std::string>> user_settings = {
      {"MALLOC_MMAP_THRESHOLD_", "1048576"},
      {"MALLOC_TRIM_THRESHOLD_", "1048576"},
      {"MALLOC_TOP_PAD_", "1048576"},
      {"MALLOC_MMAP_MAX_", "0"},
      {"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576"},
      {"GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=1048576"},
      {"JACOND_HEAP", "default"}};
  for (const auto& [name, value] : user_settings) {
    jacond::ScopedEnv set(name, value);
    EXPECT_EQ(jacond::retain_freed_heap_memory(), jacond::HeapPolicy::left_to_environment) << name << "=" << value;
    EXPECT_EQ(jacond::describe_heap_policy(), "set by the environment");
    EXPECT_EQ(jacond::heap_mmap_threshold_in_effect(), 0u);
  }
  const auto expected = jacond::glibc_malloc_serves_this_build ? jacond::HeapPolicy::applied : jacond::HeapPolicy::unavailable;
  for (const auto& [name, value] : std::vector<std::pair<const char*, std::string>>{
           {"GLIBC_TUNABLES", "glibc.malloc.arena_max=2"}, {"JACOND_HEAP", "keep"}}) {
    jacond::ScopedEnv set(name, value);
    EXPECT_EQ(jacond::retain_freed_heap_memory(), expected) << name << "=" << value;
  }
}
