// analysis/core/crash_trace.h: a fatal signal prints one line naming the program and the signal,
// then native frames, then dies of the same signal (or hands it to the handler it replaced).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "analysis/core/crash_trace.h"

namespace {

// A frame through a function of this executable, so the trace has something of ours to show.
__attribute__((noinline)) void crash_here(int sig) {
  raise(sig);
  std::abort();  // not reached: raise delivers before it returns
}

void previous_handler(int) {
  const char said[] = "previous handler ran\n";
  const ssize_t ignored = write(STDERR_FILENO, said, sizeof said - 1);
  (void)ignored;
  _exit(7);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kTraceInstalled = false;  // the sanitizer's own report instead (crash_trace.h)
#else
constexpr bool kTraceInstalled = true;
#endif

TEST(CrashTrace, SegvPrintsTheProgramTheSignalAndFramesThenDiesOfIt) {
  if (!kTraceInstalled) GTEST_SKIP() << "sanitizer build: crash_trace is not installed";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        jacond::install_crash_trace("probe");
        crash_here(SIGSEGV);
      },
      testing::KilledBySignal(SIGSEGV),
      "probe: fatal signal 11 \\(SIGSEGV, segmentation fault\\); native backtrace:\n.*\\[0x[0-9a-f]+\\]");
}

TEST(CrashTrace, AbortIsTracedToo) {
  if (!kTraceInstalled) GTEST_SKIP() << "sanitizer build: crash_trace is not installed";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        jacond::install_crash_trace("probe");
        std::abort();
      },
      testing::KilledBySignal(SIGABRT), "probe: fatal signal 6 \\(SIGABRT, aborted\\); native backtrace:");
}

// Python's faulthandler, or a sanitizer's, was there first: it still runs, after the trace.
TEST(CrashTrace, TheHandlerItReplacedRunsAfterTheTrace) {
  if (!kTraceInstalled) GTEST_SKIP() << "sanitizer build: crash_trace is not installed";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGSEGV, previous_handler);
        jacond::install_crash_trace("probe");
        crash_here(SIGSEGV);
      },
      testing::ExitedWithCode(7), "probe: fatal signal 11 .*previous handler ran");
}

// A stack overflow, where the thread has an alternate signal stack (Python's faulthandler sets one
// up): the trace runs there and hands over to the previous handler. Without SA_ONSTACK the handler
// ran on the exhausted stack, faulted again, and the process died with nothing printed (a review:
// `import jacond` silenced faulthandler's report of a C stack overflow).
__attribute__((noinline)) int recurse(volatile int depth) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(depth);
  if (depth < 0) return 0;               // never: a base case, for the compiler
  return recurse(depth + 1) + pad[0];  // not a tail call: every frame stays
}

// As faulthandler: an alternate stack, and previous_handler on it for SIGSEGV.
void install_handler_on_an_alternate_stack() {
  static char alternate[1 << 16];
  stack_t ss{};
  ss.ss_sp = alternate;
  ss.ss_size = sizeof alternate;
  sigaltstack(&ss, nullptr);
  struct sigaction onstack {};
  onstack.sa_handler = previous_handler;
  onstack.sa_flags = SA_ONSTACK;
  sigaction(SIGSEGV, &onstack, nullptr);
}

TEST(CrashTrace, AStackOverflowIsTracedOnTheAlternateStack) {
  if (!kTraceInstalled) GTEST_SKIP() << "sanitizer build: crash_trace is not installed";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_handler_on_an_alternate_stack();
        jacond::install_crash_trace("probe");
        recurse(0);
      },
      testing::ExitedWithCode(7), "probe: fatal signal 11 .*previous handler ran");
}

}  // namespace
