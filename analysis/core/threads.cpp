#include "analysis/core/threads.h"

#include <Eigen/Core>
#include <algorithm>

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace jacond {

void set_threads(int n) {
  n = std::max(1, n);
  openblas_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int get_threads() { return openblas_get_num_threads(); }

}  // namespace jacond
