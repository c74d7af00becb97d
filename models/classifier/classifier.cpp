#include "models/classifier/classifier.h"

#include <set>
#include <sstream>
#include <stdexcept>

namespace jacond::models {

TensorMap module_state(const torch::nn::Module& module) {
  TensorMap out;
  for (const auto& p : module.named_parameters()) out[p.key()] = p.value().detach().to(torch::kCPU);
  for (const auto& b : module.named_buffers()) out[b.key()] = b.value().detach().to(torch::kCPU);
  return out;
}

namespace {

void copy_checked(const std::string& key, torch::Tensor& target, const TensorMap& tensors) {
  auto it = tensors.find(key);
  if (it == tensors.end()) throw std::invalid_argument("model state: missing tensor '" + key + "'");
  const at::Tensor& t = it->second;
  const bool floating = target.is_floating_point();
  if (!t.defined() || t.is_floating_point() != floating)
    throw std::invalid_argument("model state: '" + key + "' is not " + (floating ? "a floating-point" : "an integer") +
                                " tensor");
  if (t.sizes() != target.sizes()) {
    std::ostringstream os;
    os << "model state: '" << key << "' has shape " << t.sizes() << ", expected " << target.sizes();
    throw std::invalid_argument(os.str());
  }
  if (floating && !torch::isfinite(t).all().item<bool>())
    throw std::invalid_argument("model state: '" + key + "' contains NaN or inf");
  target.copy_(t.to(target.dtype()));
}

}  // namespace

void load_module_state(torch::nn::Module& module, const TensorMap& tensors) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : module.named_parameters()) copy_checked(p.key(), p.value(), tensors), used.insert(p.key());
  for (auto& b : module.named_buffers()) copy_checked(b.key(), b.value(), tensors), used.insert(b.key());
  for (const auto& kv : tensors)
    if (!used.count(kv.first))
      throw std::invalid_argument("model state: unexpected tensor '" + kv.first + "' (config mismatch?)");
}

}  // namespace jacond::models
