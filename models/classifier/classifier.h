// What `jacond train` needs of a model: images in, logits out, its parameters by name, and its
// state as a TensorMap (checkpoints). The ViT (models/vit/vit.h) and the ConvMixer control
// (models/classifier/convmixer.h) implement it; the trainer holds a std::shared_ptr<ClassifierImpl>
// and asks for the ViT (std::dynamic_pointer_cast) only where the analysis needs its blocks.
#pragma once

#include <torch/torch.h>

#include "models/io/tensor_map.h"

namespace jacond::models {

class ClassifierImpl : public torch::nn::Module {
 public:
  /// images [B, C, H, W] -> logits [B, classes].
  virtual torch::Tensor forward(const torch::Tensor& images) = 0;
  /// Every parameter (and persistent buffer) by name, as CPU tensors.
  virtual TensorMap state() const = 0;
  /// Copies `tensors` in; every entry must be present with its shape, unknown keys are an error.
  /// Throws std::invalid_argument (one line naming the key).
  virtual void load_state(const TensorMap& tensors) = 0;
};

/// The module's parameters and buffers by name (detached CPU copies sharing storage when possible).
TensorMap module_state(const torch::nn::Module& module);
/// Copies `tensors` into the module's parameters and buffers: each must be present, of its shape,
/// floating-point where the parameter is (integer buffers such as BatchNorm's count take integers)
/// and finite; a key the module does not have is an error. One line naming the key.
void load_module_state(torch::nn::Module& module, const TensorMap& tensors);

}  // namespace jacond::models
