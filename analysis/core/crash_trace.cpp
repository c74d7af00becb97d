#include "analysis/core/crash_trace.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <array>

namespace jacond {
namespace {

constexpr std::array<int, 5> kFatalSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction previous[NSIG];
const char* program_name = "jacond";

void write_text(const char* s) {
  const ssize_t ignored = write(STDERR_FILENO, s, strlen(s));
  (void)ignored;
}

void write_number(int v) {
  char digits[12];
  int k = sizeof digits;
  digits[--k] = '\0';
  do digits[--k] = static_cast<char>('0' + v % 10); while ((v /= 10) > 0 && k > 0);
  write_text(digits + k);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV, segmentation fault";
    case SIGBUS: return "SIGBUS, bus error";
    case SIGFPE: return "SIGFPE, arithmetic exception";
    case SIGILL: return "SIGILL, illegal instruction";
    case SIGABRT: return "SIGABRT, aborted";
    default: return "?";
  }
}

// Only async-signal-safe calls (write, backtrace after its warm-up, sigaction, raise).
void on_fatal_signal(int sig) {
  write_text(program_name);
  write_text(": fatal signal ");
  write_number(sig);
  write_text(" (");
  write_text(signal_name(sig));
  write_text("); native backtrace:\n");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  sigaction(sig, &previous[sig], nullptr);  // the handler before ours, or the default: it ends the process
  raise(sig);
}

}  // namespace

void install_crash_trace(const char* program) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)program;
#else
  program_name = program;
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc_s now, not inside the handler
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  // The handler puts the previous disposition back itself. SA_ONSTACK: where the thread has an
  // alternate signal stack (Python's faulthandler makes one), a stack overflow's SIGSEGV is handled
  // there; on the overflowed stack this handler would fault again, and the process die silently.
  action.sa_flags = SA_ONSTACK;
  for (const int sig : kFatalSignals) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler == on_fatal_signal) continue;  // ours already
    sigaction(sig, &action, &previous[sig]);
  }
#endif
}

}  // namespace jacond
