// Linked into every test executable (tests/CMakeLists.txt): a test process that dies of a signal
// prints its native backtrace first (analysis/core/crash_trace.h), so a crash seen once, on a GPU
// machine lent for minutes, says where it happened.
#include <errno.h>

#include "analysis/core/crash_trace.h"

namespace {
const bool installed = (jacond::install_crash_trace(program_invocation_short_name), true);
}  // namespace
