// A set of named tensors in timm key convention (docs/design.md §6), e.g. "blocks.0.attn.qkv.weight".
// This header holds only the alias and what it needs, so that any unit can include it cheaply.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace jacond::models {

/// timm-named tensors. at::Tensor and torch::Tensor are the same type.
using TensorMap = std::map<std::string, at::Tensor>;

}  // namespace jacond::models
