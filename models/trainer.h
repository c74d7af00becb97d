// The training loop of `jacond train`: a ViT (models/vit.h) on Fashion-MNIST
// (models/fashion_mnist.h) with AdamW (LibTorch) or SOAP (models/soap.h), a linear-warmup +
// cosine learning rate, gradient clipping, per-epoch evaluation, crash-safe checkpoints
// (models/checkpoint.h) and conditioning tracked on a fixed probe batch (models/conditioning.h).
//
// Run directory (--out):
//   config.json          the full TrainConfig
//   train_log.jsonl      one JSON object per logged step: step, epoch, loss, acc, lr, grad_norm,
//                        images_per_s, elapsed_s
//   eval.csv             step,epoch,test_loss,test_acc,train_loss,train_acc
//   conditioning.csv     step,probe,layer + the report columns (analysis/report_csv.h)
//   step-XXXXXXX/        checkpoints
//
// Determinism (the resume contract): everything random is a function of the seed and the
// position in the run: the epoch's permutation is epoch_permutation(N, seed, epoch); the
// augmentation generator is one std::mt19937_64 whose state is saved in meta.json; torch's global
// generator (drop path) is re-seeded with layer_seed(seed, step) before every step. With the same
// threads, a run resumed from step S repeats the uninterrupted run's losses exactly; the logs
// are cut back to step S on resume, so they read as one run.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/vit.h"

namespace jacond::models {

struct TrainConfig {
  ViTConfig model;
  // Optimizer: "soap" or "adamw". Negative values mean "the optimizer's default":
  //   soap  lr 3e-3, betas (0.95, 0.95), eps 1e-8, wd 0.01 (the reference's defaults)
  //   adamw lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.05
  std::string optimizer = "soap";
  double lr = -1, beta1 = -1, beta2 = -1, eps = -1, weight_decay = -1;
  double shampoo_beta = -1;  // SOAP; < 0: beta2
  int64_t precondition_frequency = 10, max_precond_dim = 10000;
  double min_lr = 0;
  int64_t warmup_steps = 50;
  double clip_grad = 1.0;  // max global gradient norm; <= 0 disables clipping
  // Schedule: steps > 0 wins over epochs.
  int64_t batch = 128, steps = 0, epochs = 1;
  // Data.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t data_limit = 0, test_limit = 0;  // 0: whole split
  bool augment = false;
  int64_t crop_pad = 2;
  bool flip = true;
  // Run.
  int64_t threads = 2;
  uint64_t seed = 0;
  std::string device = "cpu";
  std::string out_dir = "results/train";
  int64_t log_every = 1, print_every = 10, eval_every = 0;  // eval_every 0: at each epoch's end
  int64_t checkpoint_every = 100, keep = 3;
  /// Stop (with a checkpoint) after this step although the schedule runs to `steps`: a
  /// time-boxed or deliberately interrupted run. Not saved in checkpoints. 0: run to the end.
  int64_t stop_at = 0;
  // Conditioning tracking.
  int64_t track_every = 100;  // 0 disables
  int64_t probe_size = 1;     // first probe_size test images
  std::string track_method = "auto";     // analysis route: auto | dense | svd | lanczos (analysis/block_report.h)
  double track_seconds = 10;             // lanczos route: time budget per matrix (then not-converged + best bracket)
  std::string track_matrices = "all";    // comma list, see models/conditioning.h

  /// Resolves the optimizer defaults above and checks every field (one-line errors).
  void finalize();
  nlohmann::json to_json() const;
  static TrainConfig from_json(const nlohmann::json& j);
};

/// lr at step t (1-based) of T: linear warmup to lr over `warmup` steps, then cosine to min_lr.
double scheduled_lr(int64_t t, int64_t T, int64_t warmup, double lr, double min_lr);

/// AdamW (LibTorch) or SOAP behind one interface, with timm's weight-decay rule (matrices only;
/// not biases, LayerNorms, pos_embed, cls_token, ReZero α).
class TrainOptimizer {
 public:
  virtual ~TrainOptimizer() = default;
  virtual void zero_grad() = 0;
  virtual void step() = 0;
  virtual void set_lr(double lr) = 0;
  virtual void save(torch::serialize::OutputArchive& a) const = 0;
  virtual void load(torch::serialize::InputArchive& a) = 0;
};

/// The optimizer of `cfg` (finalized) over the model's parameters.
std::unique_ptr<TrainOptimizer> make_optimizer(VisionTransformer& model, const TrainConfig& cfg);

/// What a run reached.
struct TrainResult {
  int64_t steps = 0;
  double last_loss = 0, test_loss = 0, test_acc = 0;
  std::string last_checkpoint;
};

/// Trains from scratch (resume_from empty) or from a checkpoint (a step-* directory or a run
/// directory, whose newest complete checkpoint is used). When resuming, `cfg` is replaced by
/// the checkpoint's config except for the fields named in `overrides` (keys of to_json()).
/// Progress lines go to `log`.
TrainResult train(TrainConfig cfg, const std::string& resume_from, const nlohmann::json& overrides, std::ostream& log);

}  // namespace jacond::models
