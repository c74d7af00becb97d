// Explicit thread control: OpenBLAS (which also runs Eigen's large products, EIGEN_USE_BLAS)
// and Eigen's own parallel loops. Call once at start-up; the CLI's --threads lands here.
#pragma once

namespace jacond {
void set_threads(int n);
int get_threads();
}  // namespace jacond
