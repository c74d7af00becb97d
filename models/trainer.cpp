#include "models/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "analysis/report_csv.h"
#include "analysis/threads.h"
#include "models/checkpoint.h"
#include "models/conditioning.h"
#include "models/fashion_mnist.h"
#include "models/soap.h"

namespace fs = std::filesystem;

namespace jacond::models {

// ---------------------------------------------------------------------------------------------
// Config

void TrainConfig::finalize() {
  model.validate();
  const bool soap = optimizer == "soap";
  if (!soap && optimizer != "adamw") throw std::invalid_argument("--optimizer must be soap or adamw, got '" + optimizer + "'");
  if (lr < 0) lr = soap ? 3e-3 : 1e-3;
  if (beta1 < 0) beta1 = soap ? 0.95 : 0.9;
  if (beta2 < 0) beta2 = soap ? 0.95 : 0.999;
  if (eps < 0) eps = 1e-8;
  if (weight_decay < 0) weight_decay = soap ? 0.01 : 0.05;
  if (!(lr > 0)) throw std::invalid_argument("--lr must be positive");
  if (beta1 >= 1 || beta2 >= 1) throw std::invalid_argument("--beta1/--beta2 must be in [0, 1)");
  if (!(eps > 0)) throw std::invalid_argument("--eps must be positive");
  if (!(min_lr >= 0 && min_lr <= lr)) throw std::invalid_argument("--min-lr must be in [0, lr]");
  if (precondition_frequency < 1) throw std::invalid_argument("--precondition-frequency must be >= 1");
  if (max_precond_dim < 1) throw std::invalid_argument("--max-precond-dim must be >= 1");
  if (warmup_steps < 0) throw std::invalid_argument("--warmup must be >= 0");
  if (batch < 1) throw std::invalid_argument("--batch must be >= 1");
  if (steps < 0 || epochs < 0 || (steps == 0 && epochs == 0)) throw std::invalid_argument("give --steps > 0 or --epochs > 0");
  if (data_limit < 0 || test_limit < 0) throw std::invalid_argument("--data-limit/--test-limit must be >= 0");
  if (crop_pad < 0) throw std::invalid_argument("--crop-pad must be >= 0");
  if (threads < 1) throw std::invalid_argument("--threads must be >= 1");
  if (device != "cpu" && device != "cuda") throw std::invalid_argument("--device must be cpu or cuda, got '" + device + "'");
  if (log_every < 1 || print_every < 1) throw std::invalid_argument("--log-every/--print-every must be >= 1");
  if (eval_every < 0 || checkpoint_every < 0 || track_every < 0 || keep < 0)
    throw std::invalid_argument("--eval-every/--checkpoint-every/--track-every/--keep must be >= 0");
  if (stop_at < 0) throw std::invalid_argument("--stop-at must be >= 0");
  if (probe_size < 1) throw std::invalid_argument("--probe-size must be >= 1");
  parse_kappa_route(track_method);
  if (!(track_seconds > 0)) throw std::invalid_argument("--track-seconds must be positive");
  parse_matrix_list(track_matrices);
}

nlohmann::json TrainConfig::to_json() const {
  return {{"model", model.to_json()},
          {"optimizer", optimizer}, {"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps},
          {"weight_decay", weight_decay}, {"shampoo_beta", shampoo_beta},
          {"precondition_frequency", precondition_frequency}, {"max_precond_dim", max_precond_dim},
          {"min_lr", min_lr}, {"warmup_steps", warmup_steps}, {"clip_grad", clip_grad},
          {"batch", batch}, {"steps", steps}, {"epochs", epochs},
          {"data_dir", data_dir}, {"data_limit", data_limit}, {"test_limit", test_limit},
          {"augment", augment}, {"crop_pad", crop_pad}, {"flip", flip},
          {"threads", threads}, {"seed", seed}, {"device", device}, {"out_dir", out_dir},
          {"log_every", log_every}, {"print_every", print_every}, {"eval_every", eval_every},
          {"checkpoint_every", checkpoint_every}, {"keep", keep},
          {"track_every", track_every}, {"probe_size", probe_size}, {"track_method", track_method}, {"track_seconds", track_seconds},
          {"track_matrices", track_matrices}};
}

TrainConfig TrainConfig::from_json(const nlohmann::json& j) {
  TrainConfig c;
  try {
    auto get = [&](const char* key, auto& field) {
      if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
    };
    if (j.contains("model")) c.model = ViTConfig::from_json(j.at("model"));
    get("optimizer", c.optimizer); get("lr", c.lr); get("beta1", c.beta1); get("beta2", c.beta2);
    get("eps", c.eps); get("weight_decay", c.weight_decay); get("shampoo_beta", c.shampoo_beta);
    get("precondition_frequency", c.precondition_frequency); get("max_precond_dim", c.max_precond_dim);
    get("min_lr", c.min_lr); get("warmup_steps", c.warmup_steps); get("clip_grad", c.clip_grad);
    get("batch", c.batch); get("steps", c.steps); get("epochs", c.epochs);
    get("data_dir", c.data_dir); get("data_limit", c.data_limit); get("test_limit", c.test_limit);
    get("augment", c.augment); get("crop_pad", c.crop_pad); get("flip", c.flip);
    get("threads", c.threads); get("seed", c.seed); get("device", c.device); get("out_dir", c.out_dir);
    get("log_every", c.log_every); get("print_every", c.print_every); get("eval_every", c.eval_every);
    get("checkpoint_every", c.checkpoint_every); get("keep", c.keep);
    get("track_every", c.track_every); get("probe_size", c.probe_size); get("track_method", c.track_method); get("track_seconds", c.track_seconds);
    get("track_matrices", c.track_matrices);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("train config: ") + e.what());
  }
  c.finalize();
  return c;
}

double scheduled_lr(int64_t t, int64_t T, int64_t warmup, double lr, double min_lr) {
  if (warmup > 0 && t <= warmup) return lr * static_cast<double>(t) / static_cast<double>(warmup);
  const double span = static_cast<double>(std::max<int64_t>(T - warmup, 1));
  const double progress = std::min(1.0, static_cast<double>(t - warmup) / span);
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
  AdamWOptimizer(VisionTransformer& model, const TrainConfig& c) {
    std::vector<torch::Tensor> with, without;
    for (const auto& p : model->named_parameters()) (decays(p.key(), p.value()) ? with : without).push_back(p.value());
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(with, opts(c.weight_decay));
    groups.emplace_back(without, opts(0.0));
    opt_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.lr));
  }
  void zero_grad() override { opt_->zero_grad(); }
  void step() override { opt_->step(); }
  void set_lr(double lr) override {
    for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  }
  void save(torch::serialize::OutputArchive& a) const override { opt_->save(a); }
  void load(torch::serialize::InputArchive& a) override { opt_->load(a); }

 private:
  std::unique_ptr<torch::optim::AdamW> opt_;
};

class SoapOptimizer : public TrainOptimizer {
 public:
  SoapOptimizer(VisionTransformer& model, const TrainConfig& c) {
    std::vector<torch::Tensor> params;
    std::vector<bool> decay;
    for (const auto& p : model->named_parameters()) {
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

std::unique_ptr<TrainOptimizer> make_optimizer(VisionTransformer& model, const TrainConfig& c) {
  if (c.optimizer == "soap") return std::make_unique<SoapOptimizer>(model, c);
  return std::make_unique<AdamWOptimizer>(model, c);
}

namespace {

// ---------------------------------------------------------------------------------------------
// Logs

// Keeps the header (if any) and the lines whose step (parsed by `step_of`) is <= last_step;
// drops unparseable lines (a line cut by a kill). Rewrites the file atomically.
void truncate_log(const std::string& path, bool has_header, int64_t last_step,
                  const std::function<int64_t(const std::string&)>& step_of) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  bool first = true;
  while (std::getline(in, line)) {
    if (first && has_header) {
      kept += line + "\n";
      first = false;
      continue;
    }
    first = false;
    try {
      if (!line.empty() && step_of(line) <= last_step) kept += line + "\n";
    } catch (...) {
    }
  }
  in.close();
  write_text_atomic(path, kept);
}

int64_t csv_step(const std::string& line) {
  size_t used = 0;
  const int64_t s = std::stoll(line, &used);
  if (used == 0 || line[used] != ',') throw std::invalid_argument("bad csv line");
  return s;
}

int64_t jsonl_step(const std::string& line) { return nlohmann::json::parse(line).at("step").get<int64_t>(); }

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

struct EvalResult {
  double loss = 0, acc = 0;
};

EvalResult evaluate(VisionTransformer& model, const FashionMnistSplit& split, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->eval();
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t N = split.size(), chunk = 500;
  for (int64_t b = 0; b < N; b += chunk) {
    const int64_t len = std::min(chunk, N - b);
    auto x = normalize_images(split.images.narrow(0, b, len)).to(device);
    auto y = split.labels.narrow(0, b, len).to(device);
    auto logits = model->forward(x);
    loss_sum += torch::cross_entropy_loss(logits, y, {}, at::Reduction::Sum).item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
  }
  model->train();
  return {loss_sum / static_cast<double>(N), static_cast<double>(correct) / static_cast<double>(N)};
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

}  // namespace

// ---------------------------------------------------------------------------------------------
// The loop

TrainResult train(TrainConfig cfg, const std::string& resume_from, const nlohmann::json& overrides, std::ostream& log) {
  Checkpoint resume;
  int64_t start_step = 0;
  if (!resume_from.empty()) {
    resume = read_checkpoint(resolve_resume_checkpoint(resume_from));
    if (!resume.meta.contains("train")) throw std::runtime_error(resume.dir + "/meta.json: no 'train' config");
    nlohmann::json merged = resume.meta["train"];
    for (auto it = overrides.begin(); it != overrides.end(); ++it) merged[it.key()] = it.value();
    // The run continues where its checkpoint lives, unless told otherwise.
    if (!overrides.contains("out_dir")) merged["out_dir"] = fs::path(resume.dir).parent_path().string();
    const int64_t stop_at = cfg.stop_at;
    cfg = TrainConfig::from_json(merged);
    cfg.stop_at = stop_at;
    start_step = resume.meta["step"].get<int64_t>();
  }
  cfg.finalize();

  // Threads before any torch or BLAS work (LibTorch here defaults to 1 thread).
  torch::set_num_threads(static_cast<int>(cfg.threads));
  jacond::set_threads(static_cast<int>(cfg.threads));
  if (cfg.device == "cuda" && !torch::cuda::is_available())
    throw std::runtime_error("--device cuda: this LibTorch build has no CUDA device available");
  const torch::Device device(cfg.device == "cuda" ? torch::kCUDA : torch::kCPU);

  const std::string run = cfg.out_dir;
  fs::create_directories(run);
  if (resume_from.empty() && !list_checkpoints(run).empty())
    throw std::runtime_error(run + ": already holds checkpoints; resume with --resume " + run + " or choose another --out");
  clean_partial_checkpoints(run);

  const FashionMnistSplit train_split = load_fashion_mnist(cfg.data_dir, "train", cfg.data_limit);
  const FashionMnistSplit test_split = load_fashion_mnist(cfg.data_dir, "test", cfg.test_limit);
  const int64_t N = train_split.size();
  if (N < cfg.batch)
    throw std::invalid_argument("--batch " + std::to_string(cfg.batch) + " exceeds the " + std::to_string(N) + " training images");
  const int64_t steps_per_epoch = N / cfg.batch;  // drop the last partial batch
  const int64_t total = cfg.steps > 0 ? cfg.steps : cfg.epochs * steps_per_epoch;
  if (start_step >= total)
    throw std::runtime_error(resume.dir + ": already at step " + std::to_string(start_step) + " of " + std::to_string(total));
  if (cfg.probe_size > test_split.size()) throw std::invalid_argument("--probe-size exceeds the test images");

  VisionTransformer model(cfg.model);
  model->to(device);
  auto optimizer = make_optimizer(model, cfg);
  std::mt19937_64 aug_gen(layer_seed(cfg.seed, -2));
  if (!resume_from.empty()) {
    model->load_state(resume.model);
    read_optimizer_state(resume.dir, [&](torch::serialize::InputArchive& a) { optimizer->load(a); });
    restore_generator(aug_gen, resume.meta.at("rng").at("augment").get<std::string>());
    truncate_log(run + "/train_log.jsonl", false, start_step, jsonl_step);
    for (const char* f : {"eval.csv", "conditioning.csv"}) truncate_log(run + "/" + f, true, start_step, csv_step);
    log << "resuming " << resume.dir << " at step " << start_step << " of " << total << "\n";
  } else {
    for (const char* f : {"train_log.jsonl", "eval.csv", "conditioning.csv"}) write_text_atomic(run + "/" + f, "");
  }
  write_text_atomic(run + "/config.json", cfg.to_json().dump(2) + "\n");

  AppendLog train_log(run + "/train_log.jsonl", "");
  AppendLog eval_log(run + "/eval.csv", "step,epoch,test_loss,test_acc,train_loss,train_acc");
  AppendLog cond_log(run + "/conditioning.csv", conditioning_csv_header());

  const torch::Tensor probe = normalize_images(test_split.images.narrow(0, 0, cfg.probe_size));
  TrackOptions track;
  track.block.route = parse_kappa_route(cfg.track_method);
  track.block.lanczos.max_seconds = cfg.track_seconds;
  std::map<std::pair<int64_t, int64_t>, std::map<std::string, jacond::GklWarmStart>> warm;  // Lanczos vectors carried forward
  track.warm = &warm;
  track.matrices = parse_matrix_list(cfg.track_matrices);
  auto track_now = [&](int64_t step) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto reports = track_conditioning(model, probe.to(device), track);
    for (const auto& r : reports) cond_log.line(conditioning_csv_row(step, r));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log << "[track] step " << step << ": " << reports.size() << " reports over " << cfg.model.depth << " layers in "
        << std::fixed << std::setprecision(1) << secs << " s" << std::endl << std::defaultfloat;
  };

  TrainResult result;
  EvalResult last_eval{NAN, NAN};
  double epoch_loss = 0, epoch_correct = 0;
  int64_t epoch_seen = 0;
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;
  double train_seconds = 0;
  int64_t images_done = 0;
  const auto run_start = std::chrono::steady_clock::now();
  std::string last_ckpt;

  auto save = [&](int64_t step, double loss) {
    const int64_t epoch = (step - 1) / steps_per_epoch;
    nlohmann::json meta{{"epoch", epoch},
                        {"model", cfg.model.to_json()},
                        {"train", cfg.to_json()},
                        {"rng", {{"augment", generator_state(aug_gen)},
                                 {"torch", "manual_seed(layer_seed(seed, step)) before each step"},
                                 {"data_order", "epoch_permutation(N, seed, epoch)"}}},
                        {"metrics", {{"loss", loss}, {"test_loss", last_eval.loss}, {"test_acc", last_eval.acc}}}};
    if (std::isnan(last_eval.loss)) meta["metrics"]["test_loss"] = nullptr, meta["metrics"]["test_acc"] = nullptr;
    last_ckpt = write_checkpoint(run, step, model->state(),
                                 [&](torch::serialize::OutputArchive& a) { optimizer->save(a); }, meta);
    prune_checkpoints(run, cfg.keep);
  };

  if (cfg.track_every > 0 && start_step == 0) track_now(0);
  model->train();
  double loss_value = NAN;
  for (int64_t step = start_step + 1; step <= total; ++step) {
    const int64_t epoch = (step - 1) / steps_per_epoch, in_epoch = (step - 1) % steps_per_epoch;
    if (epoch != perm_epoch) {
      perm = epoch_permutation(N, cfg.seed, epoch);
      perm_epoch = epoch;
    }
    if (in_epoch == 0) epoch_loss = epoch_correct = 0, epoch_seen = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto index = torch::from_blob(perm.data() + in_epoch * cfg.batch, {cfg.batch}, torch::kLong);
    auto images = normalize_images(train_split.images.index_select(0, index));
    if (cfg.augment) images = augment(images, cfg.crop_pad, cfg.flip, aug_gen);
    auto labels = train_split.labels.index_select(0, index).to(device);
    images = images.to(device);

    torch::manual_seed(layer_seed(cfg.seed, step));
    const double lr = scheduled_lr(step, total, cfg.warmup_steps, cfg.lr, cfg.min_lr);
    optimizer->set_lr(lr);
    optimizer->zero_grad();
    auto logits = model->forward(images);
    auto loss = torch::cross_entropy_loss(logits, labels);
    loss.backward();
    const double grad_norm = cfg.clip_grad > 0
                                 ? torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.clip_grad)
                                 : torch::nn::utils::clip_grad_norm_(model->parameters(), INFINITY);
    optimizer->step();
    loss_value = loss.item<double>();
    if (!std::isfinite(loss_value))
      throw std::runtime_error("loss is " + std::to_string(loss_value) + " at step " + std::to_string(step) + " (diverged; lower --lr)");
    const double acc = logits.argmax(1).eq(labels).to(torch::kFloat64).mean().item<double>();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_seconds += dt;
    images_done += cfg.batch;
    epoch_loss += loss_value * cfg.batch;
    epoch_correct += acc * cfg.batch;
    epoch_seen += cfg.batch;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();

    if (step % cfg.log_every == 0 || step == total)
      train_log.line(nlohmann::json{{"step", step}, {"epoch", epoch}, {"loss", loss_value}, {"acc", acc},
                                    {"lr", lr}, {"grad_norm", grad_norm}, {"images_per_s", cfg.batch / dt},
                                    {"elapsed_s", elapsed}}
                         .dump());
    if (step % cfg.print_every == 0 || step == total) {
      const double ips = images_done / train_seconds;
      const double eta = (total - step) * cfg.batch / ips;
      log << "step " << step << "/" << total << " | epoch " << epoch << " | loss " << std::fixed << std::setprecision(4)
          << loss_value << " | acc " << std::setprecision(3) << acc << " | lr " << std::scientific << std::setprecision(2)
          << lr << " | " << std::fixed << std::setprecision(0) << ips << " img/s | ETA " << format_duration(eta) << std::endl
          << std::defaultfloat;
    }
    const bool epoch_end = in_epoch == steps_per_epoch - 1;
    if ((cfg.eval_every > 0 ? step % cfg.eval_every == 0 : epoch_end) || step == total) {
      last_eval = evaluate(model, test_split, device);
      std::ostringstream row;
      row << step << "," << epoch << "," << format_number(last_eval.loss) << "," << format_number(last_eval.acc) << ","
          << format_number(epoch_loss / epoch_seen) << "," << format_number(epoch_correct / epoch_seen);
      eval_log.line(row.str());
      log << "[eval] step " << step << ": test loss " << std::fixed << std::setprecision(4) << last_eval.loss
          << ", test acc " << std::setprecision(4) << last_eval.acc << " (" << test_split.size() << " images)" << std::endl
          << std::defaultfloat;
    }
    if (cfg.track_every > 0 && (step % cfg.track_every == 0 || step == total)) track_now(step);
    const bool stop = cfg.stop_at > 0 && step == cfg.stop_at;
    if ((cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || step == total || stop) save(step, loss_value);
    result.steps = step;
    if (stop) {
      log << "stopping at step " << step << " of " << total << " (--stop-at); continue with --resume " << run << "\n";
      break;
    }
  }
  result.last_loss = loss_value;
  result.test_loss = last_eval.loss;
  result.test_acc = last_eval.acc;
  result.last_checkpoint = last_ckpt;
  return result;
}

}  // namespace jacond::models
