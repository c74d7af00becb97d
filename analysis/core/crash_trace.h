// A native backtrace on stderr when the process dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGABRT), then the death itself: the exit status stays the signal's (139 for SIGSEGV).
//
// Why: a crash far from any check (a library's exit-time destructor, a driver call) otherwise
// leaves "Segmentation fault" and nothing else, and on the GPU machine, lent for minutes a session,
// there is no debugger to rerun it under. The first H200 run (reports/gpu) had four such deaths.
//
// How: glibc's backtrace() and backtrace_symbols_fd(), which write straight to the descriptor
// (no malloc, so usable in a handler once backtrace() has been called once outside it: its first
// call loads libgcc_s). Frames in shared libraries print as library(symbol+offset) or
// library(+offset); an executable's own functions have names where it exports them (ENABLE_EXPORTS,
// -rdynamic). The handler then puts back the disposition it replaced (Python's faulthandler, the
// default) and raises the signal again, so the previous handler runs and the status is unchanged.
//
// Not installed in sanitizer builds: AddressSanitizer's own report is better.
// Guarded by tests/analysis/core/test_crash_trace.cpp (death tests: the line, a frame, the signal).
#pragma once

namespace jacond {

/// Installs the handler for the fatal signals, naming `program` in its first line:
/// "PROGRAM: fatal signal 11 (SIGSEGV, segmentation fault); native backtrace:". Where the handler is
/// already ours only the name changes; where another was installed since, ours goes in front of it.
void install_crash_trace(const char* program);

}  // namespace jacond
