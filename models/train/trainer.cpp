#include "models/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "analysis/report/report_csv.h"
#include "analysis/core/threads.h"
#include "models/io/checkpoint.h"
#include "models/track/conditioning.h"
#include "models/data/fashion_mnist.h"
#include "models/data/token_graying.h"
#include "models/dist/data_parallel.h"
#include "models/optim/adamw.h"
#include "models/optim/soap.h"

namespace fs = std::filesystem;

namespace jacond::models {

double scheduled_lr(int64_t t, int64_t T, int64_t warmup, double lr, double min_lr) {
  if (warmup > 0 && t <= warmup) return lr * static_cast<double>(t) / static_cast<double>(warmup);
  // Step t of the cosine uses the progress reached before it, (t − 1 − W)/(T − W): the first step
  // after warmup is at the peak and the last one above min_lr. (Progress (t − W)/(T − W) put the
  // last step at min_lr, 0 by default, so it moved no weight.)
  const double span = static_cast<double>(std::max<int64_t>(T - warmup, 1));
  const double progress = std::clamp(static_cast<double>(t - 1 - warmup) / span, 0.0, 1.0);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

// ---------------------------------------------------------------------------------------------
// Optimizers behind one interface

namespace {

// Weight decay on matrices only (timm): not on biases, LayerNorm, pos_embed, cls_token, ReZero α.
bool decays(const std::string& name, const torch::Tensor& p) {
  return p.dim() >= 2 && name != "pos_embed" && name != "cls_token";
}

class AdamWOptimizer : public TrainOptimizer {
 public:
  AdamWOptimizer(torch::nn::Module& model, const TrainConfig& c) {
    std::vector<torch::Tensor> with, without;
    for (const auto& p : model.named_parameters()) (decays(p.key(), p.value()) ? with : without).push_back(p.value());
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(with, opts(c.weight_decay));
    groups.emplace_back(without, opts(0.0));
    opt_ = std::make_unique<MultiTensorAdamW>(groups, torch::optim::AdamWOptions(c.lr));
  }
  void zero_grad() override { opt_->clear_grads(); }
  void step() override { opt_->step(); }
  void set_lr(double lr) override {
    for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  }
  void save(torch::serialize::OutputArchive& a) const override { opt_->save(a); }
  void load(torch::serialize::InputArchive& a) override { opt_->load(a); }

 private:
  std::unique_ptr<MultiTensorAdamW> opt_;  // torch::optim::AdamW's state and checkpoints, multi-tensor steps
};

class SoapOptimizer : public TrainOptimizer {
 public:
  SoapOptimizer(torch::nn::Module& model, const TrainConfig& c) {
    std::vector<torch::Tensor> params;
    std::vector<bool> decay;
    for (const auto& p : model.named_parameters()) {
      params.push_back(p.value());
      decay.push_back(decays(p.key(), p.value()));
    }
    SoapOptions o;
    o.lr = c.lr;
    o.beta1 = c.beta1;
    o.beta2 = c.beta2;
    o.shampoo_beta = c.shampoo_beta;
    o.eps = c.eps;
    o.weight_decay = c.weight_decay;
    o.precondition_frequency = c.precondition_frequency;
    o.max_precond_dim = c.max_precond_dim;
    opt_ = std::make_unique<Soap>(params, o, decay);
  }
  void zero_grad() override { opt_->zero_grad(); }
  void step() override { opt_->step(); }
  void set_lr(double lr) override { opt_->set_lr(lr); }
  void save(torch::serialize::OutputArchive& a) const override { opt_->save(a); }
  void load(torch::serialize::InputArchive& a) override { opt_->load(a); }

 private:
  std::unique_ptr<Soap> opt_;
};

}  // namespace

std::shared_ptr<ClassifierImpl> make_classifier(const TrainConfig& cfg) {
  if (cfg.arch == "convmixer") return std::make_shared<ConvMixerImpl>(cfg.convmixer());
  return std::make_shared<VisionTransformerImpl>(cfg.model);
}

std::unique_ptr<TrainOptimizer> make_optimizer(torch::nn::Module& model, const TrainConfig& c) {
  if (c.optimizer == "soap") return std::make_unique<SoapOptimizer>(model, c);
  return std::make_unique<AdamWOptimizer>(model, c);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Logs

// A log line whose step cannot be read: cut short by a kill while it was written.
struct CutLine : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Keeps the header (if any) and the lines whose step (parsed by `step_of`, which throws CutLine
// for a line it cannot read) is <= last_step; rewrites the file atomically. Returns how many
// cut lines were dropped, for the caller to log.
int64_t truncate_log(const std::string& path, bool has_header, int64_t last_step,
                     const std::function<int64_t(const std::string&)>& step_of) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string line, kept;
  int64_t dropped = 0;
  bool first = true;
  while (std::getline(in, line)) {
    if (first && has_header) {
      kept += line + "\n";
      first = false;
      continue;
    }
    first = false;
    if (line.empty()) continue;
    try {
      if (step_of(line) <= last_step) kept += line + "\n";
    } catch (const CutLine&) {
      ++dropped;
    }
  }
  in.close();
  write_text_atomic(path, kept);
  return dropped;
}

int64_t csv_step(const std::string& line) {
  try {
    size_t used = 0;
    const int64_t s = std::stoll(line, &used);
    if (used < line.size() && line[used] == ',') return s;
  } catch (const std::logic_error&) {  // std::stoll: invalid_argument, out_of_range
  }
  throw CutLine("not a CSV row starting with a step");
}

int64_t jsonl_step(const std::string& line) {
  try {
    return nlohmann::json::parse(line).at("step").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    throw CutLine("not a JSON object with a step");
  }
}

// A line-appending log that flushes every line (a kill loses at most the line being written).
class AppendLog {
 public:
  AppendLog(const std::string& path, const std::string& header) : out_(path, std::ios::app) {
    if (!out_) throw std::runtime_error(path + ": cannot open for appending");
    if (!header.empty() && fs::file_size(path) == 0) line(header);
  }
  void line(const std::string& s) {
    out_ << s << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  std::ostringstream os;
  if (s >= 3600) os << s / 3600 << "h" << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << "m";
  else if (s >= 60) os << s / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  else os << s << "s";
  return os.str();
}

// What the network sees: normalised (and, in training, augmented) images after the run's Token
// Graying of their patch matrices (the model's patch size); the same for training batches,
// evaluation and the tracking probe.
torch::Tensor model_input(const torch::Tensor& images, const TrainConfig& cfg) {
  return token_graying(images, parse_token_graying(cfg.token_graying), cfg.tg_eps, cfg.model.patch);
}

struct EvalResult {
  double loss = 0, acc = 0;
};

// Test loss and accuracy over the whole split; with `ranks`, each rank takes every W-th chunk of
// 500 images and the sums are all-reduced.
EvalResult evaluate(ClassifierImpl& model, const FashionMnistSplit& split, const TrainConfig& cfg,
                    const torch::Device& device, dist::RankGroup* ranks) {
  torch::NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0, correct = 0;
  const int64_t N = split.size(), chunk = 500;
  const int64_t first = ranks ? ranks->rank() : 0, stride = ranks ? ranks->size() : 1;
  for (int64_t b = first * chunk; b < N; b += stride * chunk) {
    const int64_t len = std::min(chunk, N - b);
    auto x = model_input(normalize_images(split.images.narrow(0, b, len)), cfg).to(device);
    auto y = split.labels.narrow(0, b, len).to(device);
    auto logits = model.forward(x);
    loss_sum += torch::cross_entropy_loss(logits, y, {}, at::Reduction::Sum).item<double>();
    correct += static_cast<double>(logits.argmax(1).eq(y).sum().item<int64_t>());
  }
  model.train();
  if (ranks) {
    const auto sums = ranks->allreduce_sum({loss_sum, correct});
    loss_sum = sums[0], correct = sums[1];
  }
  return {loss_sum / static_cast<double>(N), correct / static_cast<double>(N)};
}

std::string generator_state(const std::mt19937_64& g) {
  std::ostringstream os;
  os << g;
  return os.str();
}

void restore_generator(std::mt19937_64& g, const std::string& text) {
  std::istringstream is(text);
  is >> g;
  if (!is) throw std::runtime_error("checkpoint meta.json: malformed augmentation generator state");
}

// Tracking split by layer: every rank's conditioning.csv rows, on rank 0 in the one-process
// order (layer, then probe; each rank's rows of one (layer, probe) keep their order); the other
// ranks get an empty list. A row starts "step,probe,layer,".
std::vector<std::string> gather_layer_rows(const std::vector<std::string>& mine, dist::RankGroup& ranks) {
  std::string text;
  for (const auto& r : mine) text += r + "\n";
  const std::vector<std::string> all = ranks.allgather_text(text);
  if (ranks.rank() != 0) return {};
  struct Row {
    int64_t layer, probe;
    std::string text;
  };
  std::vector<Row> rows;
  for (const auto& block : all) {
    std::istringstream in(block);
    for (std::string line; std::getline(in, line);) {
      const auto c1 = line.find(','), c2 = line.find(',', c1 + 1), c3 = line.find(',', c2 + 1);
      const std::string probe = line.substr(c1 + 1, c2 - c1 - 1);  // "none": a weights-only report
      rows.push_back({std::stoll(line.substr(c2 + 1, c3 - c2 - 1)), probe == "none" ? -1 : std::stoll(probe), line});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.layer, a.probe) < std::tie(b.layer, b.probe);
  });
  std::vector<std::string> out;
  for (auto& r : rows) out.push_back(std::move(r.text));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The loop

// Threads before any torch or BLAS work (LibTorch here defaults to 1 thread); then the device.
torch::Device select_device(const TrainConfig& cfg, const dist::RankGroup* ranks) {
  torch::set_num_threads(static_cast<int>(cfg.threads));
  jacond::set_threads(static_cast<int>(cfg.threads));
  if (cfg.device == "cuda" && !torch::cuda::is_available())
    throw std::runtime_error("--device cuda: this LibTorch build has no CUDA device available");
  if (ranks) return ranks->device();  // finalize() paired the backend with the device
  return torch::Device(cfg.device == "cuda" ? torch::kCUDA : torch::kCPU);
}

namespace {

// The directory a checkpoint lives in: ts for ts/step-0000002 and ts/step-0000002/.
fs::path run_dir_of(const std::string& checkpoint_dir) {
  fs::path p = fs::path(checkpoint_dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // a trailing slash
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

// The run directory, created and cleared of partial checkpoints. Refused when it holds checkpoints
// that are not this run's past: any, for a fresh run; another run's, for a resume into another
// --out (its logs and checkpoints would interleave two runs); and later ones than the checkpoint
// resumed (retention keeps the highest steps, so the resumed run's own checkpoints would be pruned
// and a later --resume would load the abandoned future). A step set aside by a crash mid-replacement
// (.old-step-N, no step-N) is held too: clean_partial_checkpoints, below, renames it back, so it
// counts in these checks (it was restored after them: a fresh run took another run's step, and a
// resume before it left it the run's newest). The checks only read; a refused run changes nothing.
std::string prepare_run_dir(const TrainConfig& cfg, const Checkpoint* resume) {
  const std::string& run = cfg.out_dir;
  fs::create_directories(run);
  std::vector<CheckpointEntry> held = list_checkpoints(run);
  for (CheckpointEntry& e : list_set_aside_checkpoints(run)) held.push_back(std::move(e));
  std::stable_sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  if (!resume && !held.empty())
    throw std::runtime_error(run + ": already holds checkpoints; resume with --resume " + run + " or choose another --out");
  if (resume && !held.empty()) {
    std::error_code ec;
    const fs::path own = run_dir_of(resume->dir);
    const bool same = fs::equivalent(own, run, ec);
    if (ec) throw std::runtime_error(run + ": cannot tell whether it is " + own.string() + ", the resumed run's: " + ec.message());
    if (!same)
      throw std::runtime_error(run + ": already holds checkpoints of another run; resume " + resume->dir + " into " +
                               own.string() + " or into an empty --out");
    const int64_t step = resume->meta.at("step").get<int64_t>();
    if (held.back().step > step)
      throw std::runtime_error(run + ": holds checkpoints past step " + std::to_string(step) + " (up to " + held.back().dir +
                               "), which would stay the run's newest; resume the newest, or " + resume->dir +
                               " into another --out");
  }
  clean_partial_checkpoints(run);
  return run;
}

// One training run: configuration, data, model, optimizer, logs and tracking; run() is the loop.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& cfg, const Checkpoint* resume, std::ostream& log, dist::RankGroup* ranks,
              const TrackDevices& track_on);
  TrainResult run();

 private:
  void check_schedule(const Checkpoint* resume) const;
  // Loads the checkpoint's state and cuts the logs back to its step, or starts empty logs.
  void restore_or_start(const Checkpoint* resume);
  // One optimizer step on the batch of `step` at learning rate `lr`.
  struct StepResult {
    double loss, acc, grad_norm;  // grad_norm: the global norm before clipping
  };
  StepResult train_step(int64_t step, double lr);
  void log_step(int64_t step, int64_t epoch, const StepResult& r, double lr, double dt);
  void evaluate_now(int64_t step, int64_t epoch);
  void track_now(int64_t step);
  std::vector<LayerReport> vit_reports(VisionTransformer& model);
  void log_tracking_devices(const TrackDevices& on) const;
  void save(int64_t step, double loss);

  const TrainConfig cfg_;
  std::ostream& log_;
  // Data parallel: null for one process. Rank 0 (main_) alone writes files and logs.
  dist::RankGroup* const ranks_;
  const bool main_;
  const int64_t local_batch_;  // batch / W
  const bool split_tracking_;  // each rank tracks every W-th layer (--track-split layers, ViT)
  std::unique_ptr<dist::GradientAverager> averager_;
  const torch::Device device_;
  const std::string run_;
  const FashionMnistSplit train_split_, test_split_;
  const int64_t steps_per_epoch_;  // drops the last partial batch
  const int64_t total_;
  int64_t start_step_ = 0;
  const bool fresh_;  // not resumed: step 0's tracking and checkpoint happen here (a resume from step 0 has them)
  std::shared_ptr<ClassifierImpl> model_;  // a VisionTransformerImpl or, with --arch convmixer, a ConvMixerImpl
  std::unique_ptr<TrainOptimizer> optimizer_;
  std::mt19937_64 aug_gen_;
  std::unique_ptr<AppendLog> train_log_, eval_log_, cond_log_;
  // Tracking: a fixed probe batch; Lanczos vectors carried from one tracking step to the next.
  torch::Tensor probe_;
  TrackOptions track_;
  std::map<std::pair<int64_t, int64_t>, std::map<std::string, jacond::GklWarmStart>> warm_;
  // Progress.
  std::vector<int64_t> perm_;  // this epoch's order
  int64_t perm_epoch_ = -1;
  double epoch_loss_ = 0, epoch_correct_ = 0, train_seconds_ = 0;
  int64_t epoch_seen_ = 0, images_done_ = 0;
  EvalResult last_eval_{NAN, NAN};
  std::string last_ckpt_;
  const std::chrono::steady_clock::time_point start_time_ = std::chrono::steady_clock::now();
};

TrainingRun::TrainingRun(const TrainConfig& cfg, const Checkpoint* resume, std::ostream& log, dist::RankGroup* ranks,
                         const TrackDevices& track_on)
    : cfg_(cfg),
      log_(log),
      ranks_(ranks),
      main_(!ranks || ranks->rank() == 0),
      local_batch_(cfg_.batch / (ranks ? ranks->size() : 1)),
      split_tracking_(ranks && cfg_.track_split == "layers" && cfg_.arch == "vit"),
      device_(select_device(cfg_, ranks)),
      run_(main_ ? prepare_run_dir(cfg_, resume) : cfg_.out_dir),
      train_split_(load_fashion_mnist(cfg_.data_dir, "train", cfg_.data_limit)),
      test_split_(load_fashion_mnist(cfg_.data_dir, "test", cfg_.test_limit)),
      steps_per_epoch_(train_split_.size() / cfg_.batch),
      total_(cfg_.steps > 0 ? cfg_.steps : cfg_.epochs * steps_per_epoch_),
      start_step_(resume ? resume->meta.at("step").get<int64_t>() : 0),
      fresh_(resume == nullptr),
      model_(make_classifier(cfg_)),
      aug_gen_(layer_seed(cfg_.seed, -2)) {
  check_schedule(resume);
  model_->to(device_);
  optimizer_ = make_optimizer(*model_, cfg_);
  restore_or_start(resume);
  if (ranks_) {
    // DDP's start: rank 0's model everywhere (equal already when every rank read the same seed
    // or checkpoint; this also catches a rank that could not start: its peers fail here).
    dist::broadcast_module_state(*model_, *ranks_);
    averager_ = std::make_unique<dist::GradientAverager>(*model_, *ranks_);
    log_ << "data parallel: " << ranks_->size() << " ranks (" << dist::to_string(ranks_->backend()) << "), " << local_batch_ << " of the " << cfg_.batch
         << " images of each batch per rank, collectives time out after " << cfg_.dist_timeout << " s\n";
  }
  probe_ = model_input(normalize_images(test_split_.images.narrow(0, 0, cfg_.probe_size)), cfg_).to(device_);
  track_.block.route = parse_kappa_route(cfg_.track_method);
  track_.block.lanczos.max_seconds = cfg_.track_seconds;
  track_.block.device = track_on.dense;
  track_.block.operator_device = track_on.products;
  track_.warm = &warm_;
  track_.matrices = cfg_.tracked_matrices();
  if (split_tracking_) track_.layer_offset = ranks_->rank(), track_.layer_stride = ranks_->size();
  log_tracking_devices(track_on);
  if (!main_) return;
  write_text_atomic(run_ + "/config.json", cfg_.to_json().dump(2) + "\n");
  train_log_ = std::make_unique<AppendLog>(run_ + "/train_log.jsonl", "");
  eval_log_ = std::make_unique<AppendLog>(run_ + "/eval.csv", "step,epoch,test_loss,test_acc,train_loss,train_acc");
  cond_log_ = std::make_unique<AppendLog>(run_ + "/conditioning.csv", conditioning_csv_header());
}

void TrainingRun::check_schedule(const Checkpoint* resume) const {
  const int64_t N = train_split_.size();
  if (N < cfg_.batch)
    throw std::invalid_argument("--batch " + std::to_string(cfg_.batch) + " exceeds the " + std::to_string(N) +
                                " training images");
  if (ranks_ && cfg_.batch % ranks_->size() != 0)
    throw std::invalid_argument("--batch " + std::to_string(cfg_.batch) + " does not split evenly over " +
                                std::to_string(ranks_->size()) + " ranks");
  if (start_step_ >= total_)
    throw std::runtime_error(resume->dir + ": already at step " + std::to_string(start_step_) + " of " +
                             std::to_string(total_));
  if (cfg_.probe_size > test_split_.size()) throw std::invalid_argument("--probe-size exceeds the test images");
  if (cfg_.warmup_steps >= total_ && start_step_ == 0)  // the default 50 with a short --steps: said, not refused
    log_ << "warning: --warmup-steps " << cfg_.warmup_steps << " >= the run's " << total_
         << " steps: the learning rate never reaches --lr " << format_number(cfg_.lr) << " (it ends at "
         << format_number(scheduled_lr(total_, total_, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr)) << ")\n";
}

void TrainingRun::restore_or_start(const Checkpoint* resume) {
  if (!resume && !main_) return;
  if (!resume) {
    for (const char* f : {"train_log.jsonl", "eval.csv", "conditioning.csv"}) write_text_atomic(run_ + "/" + f, "");
    return;
  }
  model_->load_state(resume->model);
  read_optimizer_state(resume->dir, device_, [&](torch::serialize::InputArchive& a) { optimizer_->load(a); });
  restore_generator(aug_gen_, resume->meta.at("rng").at("augment").get<std::string>());
  if (resume->meta.contains("epoch_sums")) {  // checkpoints before it: the resumed epoch averages its own steps
    try {
      const nlohmann::json& sums = resume->meta.at("epoch_sums");
      epoch_loss_ = sums.at("loss").get<double>();
      epoch_correct_ = sums.at("correct").get<double>();
      epoch_seen_ = sums.at("seen").get<int64_t>();
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(resume->dir + "/meta.json: malformed 'epoch_sums' (expected numbers loss, correct, seen)");
    }
  }
  // The last test evaluation, which the next checkpoint and the run's summary carry as the
  // uninterrupted run's do (null in meta.json: none yet).
  if (resume->meta.contains("metrics") && resume->meta["metrics"].is_object()) {
    const nlohmann::json& m = resume->meta["metrics"];
    const auto number = [&](const char* key) { return m.contains(key) && m[key].is_number() ? m[key].get<double>() : NAN; };
    last_eval_ = {number("test_loss"), number("test_acc")};
  }
  if (!main_) return;  // rank 0 cuts the logs back
  auto cut_back = [&](const char* file, bool header, const auto& step_of) {
    const int64_t dropped = truncate_log(run_ + "/" + file, header, start_step_, step_of);
    if (dropped > 0) log_ << "resume: dropped " << dropped << " unreadable line(s) of " << file << " (cut by the kill)\n";
  };
  cut_back("train_log.jsonl", false, jsonl_step);
  cut_back("eval.csv", true, csv_step);
  cut_back("conditioning.csv", true, csv_step);
  log_ << "resuming " << resume->dir << " at step " << start_step_ << " of " << total_ << "\n";
}

TrainingRun::StepResult TrainingRun::train_step(int64_t step, double lr) {
  const int64_t epoch = (step - 1) / steps_per_epoch_, in_epoch = (step - 1) % steps_per_epoch_;
  if (epoch != perm_epoch_) {
    perm_ = epoch_permutation(train_split_.size(), cfg_.seed, epoch);
    perm_epoch_ = epoch;
  }
  // The global batch, augmented as a whole (the generator's draws do not depend on W); this
  // rank's shard of it.
  auto index = torch::from_blob(perm_.data() + in_epoch * cfg_.batch, {cfg_.batch}, torch::kLong);
  auto images = normalize_images(train_split_.images.index_select(0, index));
  if (cfg_.augment) images = augment(images, cfg_.crop_pad, cfg_.flip, aug_gen_);
  auto labels = train_split_.labels.index_select(0, index);
  if (ranks_) {
    images = images.narrow(0, ranks_->rank() * local_batch_, local_batch_);
    labels = labels.narrow(0, ranks_->rank() * local_batch_, local_batch_);
  }
  images = model_input(images, cfg_).to(device_);
  labels = labels.to(device_);

  const uint64_t step_seed = layer_seed(cfg_.seed, step);
  torch::manual_seed(ranks_ && ranks_->rank() > 0 ? layer_seed(step_seed, ranks_->rank()) : step_seed);
  optimizer_->set_lr(lr);
  optimizer_->zero_grad();
  if (averager_) averager_->before_forward();
  auto logits = model_->forward(images);
  auto loss = torch::cross_entropy_loss(logits, labels);
  if (averager_)
    averager_->backward(loss);  // returns with the gradients averaged over the global batch
  else
    loss.backward();
  const double grad_norm = torch::nn::utils::clip_grad_norm_(model_->parameters(), cfg_.clip_grad > 0 ? cfg_.clip_grad : INFINITY);
  double loss_value = loss.item<double>();
  double acc = logits.argmax(1).eq(labels).to(torch::kFloat64).mean().item<double>();
  if (ranks_) {  // the global batch's mean loss and accuracy (equal shards: the mean of the ranks')
    const auto sums = ranks_->allreduce_sum({loss_value, acc});
    loss_value = sums[0] / ranks_->size(), acc = sums[1] / ranks_->size();
  }
  // Before the update: NaN gradients would reach the optimizer (SOAP's first eigh fails on them
  // with LAPACK's text). The norm is of the averaged gradients and the loss of the global batch,
  // so every rank reaches the same verdict.
  if (!std::isfinite(loss_value) || !std::isfinite(grad_norm))
    throw std::runtime_error("loss is " + std::to_string(loss_value) + ", gradient norm " + std::to_string(grad_norm) +
                             " at step " + std::to_string(step) + " (diverged; lower --lr, or the init's scale)");
  // --lr 3e38: AdamW's lr/(1 − β1) is past fp32's range, and LibTorch says only "value cannot be
  // converted to type float without overflow" (a std::runtime_error in 1.13, a c10::Error later).
  const auto update_failed = [&](std::string what) {
    what = what.substr(0, what.find('\n'));
    return std::runtime_error("step " + std::to_string(step) + ": the optimizer's update failed: " + what +
                              (what.find("without overflow") != std::string::npos ? " (--lr too large for fp32 weights)" : ""));
  };
  try {
    optimizer_->step();
  } catch (const c10::Error& e) {
    throw update_failed(e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    throw update_failed(e.what());
  }
  return {loss_value, acc, grad_norm};
}

void TrainingRun::log_step(int64_t step, int64_t epoch, const StepResult& r, double lr, double dt) {
  if (!main_) return;
  if (step % cfg_.log_every == 0 || step == total_) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
    train_log_->line(nlohmann::json{{"step", step}, {"epoch", epoch}, {"loss", r.loss}, {"acc", r.acc}, {"lr", lr},
                                    {"grad_norm", r.grad_norm}, {"images_per_s", cfg_.batch / dt}, {"elapsed_s", elapsed}}
                         .dump());
  }
  if (step % cfg_.print_every == 0 || step == total_) {
    const double ips = images_done_ / train_seconds_;
    const double eta = (total_ - step) * cfg_.batch / ips;
    log_ << "step " << step << "/" << total_ << " | epoch " << epoch << " | loss " << std::fixed << std::setprecision(4)
         << r.loss << " | acc " << std::setprecision(3) << r.acc << " | lr " << std::scientific << std::setprecision(2) << lr
         << " | " << std::fixed << std::setprecision(0) << ips << " img/s | ETA " << format_duration(eta) << std::endl
         << std::defaultfloat << std::setprecision(6);
  }
}

void TrainingRun::evaluate_now(int64_t step, int64_t epoch) {
  last_eval_ = evaluate(*model_, test_split_, cfg_, device_, ranks_);
  if (main_) {
    std::ostringstream row;
    row << step << "," << epoch << "," << format_number(last_eval_.loss) << "," << format_number(last_eval_.acc) << ","
        << format_number(epoch_loss_ / epoch_seen_) << "," << format_number(epoch_correct_ / epoch_seen_);
    eval_log_->line(row.str());
    log_ << "[eval] step " << step << ": test loss " << std::fixed << std::setprecision(4) << last_eval_.loss
         << ", test acc " << std::setprecision(4) << last_eval_.acc << " (" << test_split_.size() << " images)"
         << std::endl
         << std::defaultfloat << std::setprecision(6);
  }
  // The last optimizer step can turn finite weights into NaN after that step's own (finite) loss was
  // checked: the test loss is then the first to see it. Every rank holds the all-reduced loss, so
  // every rank stops here (after eval.csv's row), before a checkpoint of NaN weights is written.
  if (!std::isfinite(last_eval_.loss))
    throw std::runtime_error("test loss is " + format_number(last_eval_.loss) + " at step " + std::to_string(step) +
                             " (diverged; lower --lr)");
}

void TrainingRun::log_tracking_devices(const TrackDevices& on) const {
  if (cfg_.track_every <= 0 || cfg_.arch != "vit") return;
  const std::vector<std::string> there = cfg_.device_tracked_matrices();
  if (on.any() && !there.empty()) {
    const auto where = [](const auto& device) { return device ? device->description() : std::string("the host"); };
    std::string names;
    for (const std::string& m : there) names += (names.empty() ? "" : ",") + m;
    log_ << "conditioning tracking of " << names << ": dense routes on " << where(on.dense)
         << ", matrix-free products on " << where(on.products) << " (the other rows on the host)\n";
  } else if (cfg_.resolved_track_device() != "cpu" && there.empty()) {
    log_ << "conditioning tracking on the host: no tracked matrix (" << cfg_.track_matrices
         << ") has a GPU route (K_sa, B_sa, E_sa, K_sab; K_mlp, K_ffn with --track-method lanczos)\n";
  }
}

// A ViT's reports on the tracking devices; should they fail (a device error, a route asked for
// that the device's memory cannot hold), one line says so and this and every later call run on the
// host, as with --track-device cpu: training does not stop for its diagnostics' device.
std::vector<LayerReport> TrainingRun::vit_reports(VisionTransformer& model) {
  const bool on_device = track_.block.device || track_.block.operator_device;
  if (!on_device) return track_conditioning(model, probe_, track_);
  try {
    return track_conditioning(model, probe_, track_);
  } catch (const std::exception& e) {
    log_ << "conditioning tracking on the device failed (" << e.what() << "); tracking on the host from now on\n";
    track_.block.device = nullptr;
    track_.block.operator_device = nullptr;
    return track_conditioning(model, probe_, track_);
  }
}

void TrainingRun::track_now(int64_t step) {
  if (!main_ && !split_tracking_) return;  // the other ranks go on and wait in the next step's all-reduce
  const auto t0 = std::chrono::steady_clock::now();
  const auto reports = [&] {
    if (auto vit = std::dynamic_pointer_cast<VisionTransformerImpl>(model_)) {
      VisionTransformer holder(vit);
      return vit_reports(holder);
    }
    ConvMixer holder(std::dynamic_pointer_cast<ConvMixerImpl>(model_));
    return convmixer_conditioning(holder, probe_, track_.matrices);
  }();
  std::vector<std::string> rows;
  for (const auto& r : reports) rows.push_back(conditioning_csv_row(step, r));
  if (split_tracking_) rows = gather_layer_rows(rows, *ranks_);
  if (!main_) return;
  for (const auto& row : rows) cond_log_->line(row);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_ << "[track] step " << step << ": " << rows.size() << " reports over " << cfg_.model.depth << " layers in "
       << std::fixed << std::setprecision(1) << secs << " s" << (split_tracking_ ? " (split over the ranks)" : "") << std::endl
       << std::defaultfloat << std::setprecision(6);
}

void TrainingRun::save(int64_t step, double loss) {
  // An update can leave NaN weights after its own finite loss (AdamW at --lr 1e30), and no
  // evaluation need come between it and this checkpoint (--eval-every past --checkpoint-every).
  if (ranks_) dist::check_replicas_agree(*model_, *ranks_, step);
  else if (!dist::parameters_finite(*model_)) throw std::runtime_error(dist::diverged_parameters_message(step));
  if (!main_) return;
  nlohmann::json meta{{"epoch", step == 0 ? 0 : (step - 1) / steps_per_epoch_},
                      {"model", cfg_.arch == "convmixer" ? cfg_.convmixer().to_json() : cfg_.model.to_json()},
                      {"train", cfg_.to_json()},
                      {"world_size", ranks_ ? ranks_->size() : 1},
                      {"rng", {{"augment", generator_state(aug_gen_)},
                               {"torch", "manual_seed(layer_seed(seed, step)) before each step"},
                               {"data_order", "epoch_permutation(N, seed, epoch)"}}},
                      {"metrics", {{"loss", loss}, {"test_loss", last_eval_.loss}, {"test_acc", last_eval_.acc}}},
                      // The epoch's running sums, so eval.csv's train_loss / train_acc after a
                      // mid-epoch resume average the whole epoch, as the uninterrupted run's do.
                      {"epoch_sums", {{"loss", epoch_loss_}, {"correct", epoch_correct_}, {"seen", epoch_seen_}}}};
  if (std::isnan(last_eval_.loss)) meta["metrics"]["test_loss"] = nullptr, meta["metrics"]["test_acc"] = nullptr;
  last_ckpt_ = write_checkpoint(run_, step, model_->state(),
                                [&](torch::serialize::OutputArchive& a) { optimizer_->save(a); }, meta);
  prune_checkpoints(run_, cfg_.keep);
}

TrainResult TrainingRun::run() {
  if (cfg_.track_every > 0 && fresh_) track_now(0);
  if (cfg_.checkpoint_init && fresh_) save(0, NAN);  // the initialisation, for `jacond audit`
  if (cfg_.checkpoint_init && !fresh_ && main_) {
    const auto kept = list_checkpoints(run_);
    if (kept.empty() || kept.front().step != 0)
      log_ << "note: --checkpoint-init: this run has no step-0 checkpoint (it started without the flag); "
              "a new run writes one\n";
  }
  model_->train();
  TrainResult result;
  double loss = NAN;
  for (int64_t step = start_step_ + 1; step <= total_; ++step) {
    const int64_t epoch = (step - 1) / steps_per_epoch_, in_epoch = (step - 1) % steps_per_epoch_;
    if (in_epoch == 0) epoch_loss_ = epoch_correct_ = 0, epoch_seen_ = 0;
    const double lr = scheduled_lr(step, total_, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr);
    const auto t0 = std::chrono::steady_clock::now();
    const StepResult r = train_step(step, lr);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss = r.loss;
    train_seconds_ += dt;
    images_done_ += cfg_.batch;
    epoch_loss_ += r.loss * cfg_.batch;
    epoch_correct_ += r.acc * cfg_.batch;
    epoch_seen_ += cfg_.batch;
    log_step(step, epoch, r, lr, dt);

    const bool epoch_end = in_epoch == steps_per_epoch_ - 1;
    if ((cfg_.eval_every > 0 ? step % cfg_.eval_every == 0 : epoch_end) || step == total_) evaluate_now(step, epoch);
    if (cfg_.track_every > 0 && (step % cfg_.track_every == 0 || step == total_)) track_now(step);
    const bool stop = cfg_.stop_at > 0 && step == cfg_.stop_at;
    if ((cfg_.checkpoint_every > 0 && step % cfg_.checkpoint_every == 0) || step == total_ || stop) save(step, loss);
    result.steps = step;
    if (stop) {
      log_ << "stopping at step " << step << " of " << total_ << " (--stop-at); continue with --resume " << run_ << "\n";
      break;
    }
  }
  if (ranks_) ranks_->barrier();  // rank 0's last checkpoint is written before any rank leaves
  result.last_loss = loss;
  result.test_loss = last_eval_.loss;
  result.test_acc = last_eval_.acc;
  result.last_checkpoint = last_ckpt_;
  return result;
}

}  // namespace

TrainConfig resumed_config(const Checkpoint& checkpoint, const nlohmann::json& overrides, int64_t stop_at) {
  if (!checkpoint.meta.contains("train")) throw std::runtime_error(checkpoint.dir + "/meta.json: no 'train' config");
  nlohmann::json merged = checkpoint.meta["train"];
  for (auto it = overrides.begin(); it != overrides.end(); ++it) merged[it.key()] = it.value();
  // The run continues where its checkpoint lives, unless told otherwise.
  if (!overrides.contains("out_dir")) merged["out_dir"] = run_dir_of(checkpoint.dir).string();
  TrainConfig cfg = TrainConfig::from_json(merged);
  cfg.stop_at = stop_at;
  cfg.finalize();
  return cfg;
}

TrainResult train(const TrainConfig& cfg, const Checkpoint* resume, std::ostream& log, dist::RankGroup* ranks,
                  const TrackDevices& track_on) {
  TrainConfig finalized = cfg;
  finalized.finalize();  // idempotent: a finalized config is unchanged
  std::ostream silent(nullptr);  // the ranks other than 0 print nothing (errors still reach stderr)
  TrainingRun run(finalized, resume, ranks && ranks->rank() > 0 ? silent : log, ranks, track_on);
  return run.run();
}

}  // namespace jacond::models
