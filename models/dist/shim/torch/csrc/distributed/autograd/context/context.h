// Stand-in for a LibTorch header that Debian's libtorch-dev 1.13 does not install.
//
// c10d's reducer.hpp (the engine of DistributedDataParallel, used by models/dist/data_parallel.cpp)
// includes torch/csrc/distributed/autograd/context/context.h, which Debian leaves out with the
// rest of distributed autograd (RPC). reducer.hpp needs only two names from it: the type of a
// gradient callback (checked by a static_assert to be std::function<bool(at::Tensor&)>) and
// ContextPtr, held through a std::shared_ptr and a pointer, whose layout does not depend on the
// class. Nothing here is defined or called: the Reducer's code is LibTorch's own, compiled into
// libtorch_cpu.so. models/CMakeLists.txt adds this folder to the include path only when the
// LibTorch in use lacks the real header (a full LibTorch, e.g. the CUDA one, brings its own).
#pragma once

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
