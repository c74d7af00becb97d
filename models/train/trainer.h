// The training loop of `jacond train`: a ViT (models/vit/vit.h), or the ConvMixer control
// (models/classifier/convmixer.h, --arch convmixer), on Fashion-MNIST
// (models/data/fashion_mnist.h) with AdamW (LibTorch) or SOAP (models/optim/soap.h), a linear-warmup +
// cosine learning rate, gradient clipping, per-epoch evaluation, crash-safe checkpoints
// (models/io/checkpoint.h) and conditioning tracked on a fixed probe batch (models/track/conditioning.h).
//
// Run directory (--out):
//   config.json          the full TrainConfig (models/train/train_config.h)
//   train_log.jsonl      one JSON object per logged step: step, epoch, loss, acc, lr, grad_norm,
//                        images_per_s, elapsed_s
//   eval.csv             step,epoch,test_loss,test_acc,train_loss,train_acc
//   conditioning.csv     step,probe,layer + the report columns (analysis/report/report_csv.h)
//   step-XXXXXXX/        checkpoints
//
// Determinism (the resume contract): everything random is a function of the seed and the
// position in the run: the epoch's permutation is epoch_permutation(N, seed, epoch); the
// augmentation generator is one std::mt19937_64 whose state is saved in meta.json; torch's global
// generator (drop path) is re-seeded with layer_seed(seed, step) before every step. With the same
// threads, a run resumed from step S repeats the uninterrupted run's losses exactly on the CPU
// (on a GPU, to rounding: cuDNN's convolutions and CUDA's atomic-add backward kernels are not
// deterministic by default); the logs are cut back to step S on resume, so they read as one run.
//
// Data parallel (a RankGroup of W ranks, models/dist): every rank draws the same global batch of
// `batch` images (the same permutation and augmentation draws, so the data order is still a
// function of (seed, step) whatever W is), keeps its shard of batch/W images, and the gradients
// are averaged by c10d's Reducer during the backward pass (models/dist/data_parallel.h). Every
// rank evaluates a 1/W share of the test set (sums all-reduced); rank 0 alone writes: logs,
// config.json, checkpoints (all ranks first check that their parameters agree), and it alone
// tracks conditioning while the others wait in the next step's all-reduce (--dist-timeout).
// Every rank resumes from the same checkpoint; a run may resume under another W. Drop path
// draws each rank's masks from layer_seed(layer_seed(seed, step), rank) (rank 0: as one process).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/dist/process_group.h"
#include "models/io/checkpoint.h"
#include "models/train/train_config.h"
#include "models/classifier/convmixer.h"
#include "models/track/conditioning.h"
#include "models/vit/vit.h"

namespace jacond::models {

/// lr at step t (1-based) of T: linear warmup to lr over `warmup` steps (lr·t/W), then a cosine
/// from lr (step W + 1) towards min_lr, which the step after the last would reach: progress
/// (t − 1 − W)/(T − W).
double scheduled_lr(int64_t t, int64_t T, int64_t warmup, double lr, double min_lr);

/// AdamW (torch::optim::AdamW's arithmetic and checkpoints, stepped multi-tensor:
/// models/optim/adamw.h) or SOAP behind one interface, with timm's weight-decay rule (matrices
/// only; not biases, LayerNorms, pos_embed, cls_token, ReZero α). zero_grad() drops the gradients
/// (set to none, as torch.optim's default).
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
std::unique_ptr<TrainOptimizer> make_optimizer(torch::nn::Module& model, const TrainConfig& cfg);

/// The model of `cfg` (finalized): cfg.model's ViT, or the ConvMixer of cfg.convmixer().
std::shared_ptr<ClassifierImpl> make_classifier(const TrainConfig& cfg);

/// Sets cfg.threads for LibTorch and the analysis core, then returns cfg.device ("cpu" | "cuda";
/// a data-parallel rank's cuda is its group's GPU, cuda:LOCAL_RANK); std::runtime_error naming the
/// flag when cuda is asked for and this LibTorch has no CUDA device (Debian's LibTorch is
/// CPU-only: exit 1, not a usage error).
torch::Device select_device(const TrainConfig& cfg, const dist::RankGroup* ranks = nullptr);

/// What a run reached.
struct TrainResult {
  int64_t steps = 0;
  double last_loss = 0, test_loss = 0, test_acc = 0;
  std::string last_checkpoint;
};

/// The configuration of a resumed run: the checkpoint's config (meta.json "train") with
/// `overrides` (config.json keys -> values, e.g. the flags typed with --resume) applied, in the
/// checkpoint's run directory unless out_dir is overridden, with `stop_at` (run control, never
/// saved). Finalized; a bad value throws std::invalid_argument naming its flag.
TrainConfig resumed_config(const Checkpoint& checkpoint, const nlohmann::json& overrides, int64_t stop_at);

/// Trains with `cfg` (finalized here; for a resumed run, resumed_config of the checkpoint) from
/// scratch (resume null) or from the checkpoint `resume` (read_checkpoint of
/// resolve_resume_checkpoint). Progress lines go to `log` (rank 0's; the other ranks are silent).
/// `ranks`: the data-parallel group this process is a rank of (null: one process). `track_on`:
/// where tracking's analysis runs (models/track/conditioning.h; default: the host). Should tracking
/// on them fail (a device error, or too little device memory for a route asked for), the run logs
/// one line and tracks on the host from then on.
TrainResult train(const TrainConfig& cfg, const Checkpoint* resume, std::ostream& log, dist::RankGroup* ranks = nullptr,
                  const TrackDevices& track_on = {});

}  // namespace jacond::models
