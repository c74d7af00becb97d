#include "analysis/core/lapack.h"

namespace jacond {

LapackError::LapackError(const std::string& routine, long long info)
    : std::runtime_error(routine + " failed: info = " + std::to_string(info)), routine_(routine), info_(info) {}

}  // namespace jacond
