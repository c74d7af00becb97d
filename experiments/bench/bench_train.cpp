// `jacond bench train`: training throughput of jacond's LibTorch ViT against the same model in
// Python PyTorch (experiments/bench/torch_train_route.py), same threads, same run; the SOAP/AdamW
// step-time ratio; and the overhead of conditioning tracking at a given --track-every.
//
//   images/s     batch · steps / time of `steps` full training steps (forward, cross-entropy,
//                backward, optimizer step) after `warmup` untimed steps, fp32, random images
//                [batch, 1, 28, 28] (throughput does not depend on pixel values), on --device
//                (cpu | cuda; both routes on the same one, each step ending with loss.item()).
//   page faults  the process's minor page faults over a timed step (getrusage), both routes: the
//                cost of a heap that hands freed tensors back to the OS (analysis/core/heap_policy.h;
//                jacond's process keeps them, and run.json's "heap" says whether it did).
//   operations   one more AdamW step's ATen operations by name in both routes (model pass and
//                optimizer.step(), RecordFunction / torch.profiler), and where they differ: on a
//                GPU each is a kernel launch or a few, and a small model's step is launch-bound.
//   SOAP/AdamW   ratio of mean full-step times, and of optimizer.step() times alone; both SOAP
//                means carry its eigenbasis refreshes (every --precondition-frequency steps) at
//                their true rate, on a GPU too (bench_train_timing.h).
//   tracking     one track_conditioning call (one probe image, the trainer's default route `auto`
//                with its per-matrix Lanczos budget, on --device as `jacond train` tracks there:
//                select_track_devices; on cuda the chosen set on the host too, as the ratio
//                that says which --track-device is faster) divided by the training time it is spread
//                over, track_every · AdamW step time: once with every matrix and once with
//                --track-matrices (default: the trainer's default set), so the saving of asking
//                for fewer matrices is measured, not assumed.
//   Token Graying the AdamW full-step time with each --tg mode applied to the batch inside the
//                timed step (as `jacond train` applies it: on the host, fp64, before the batch
//                moves to the device) over the time without; "Always Skip Attention" reports
//                ≈ 6.3× for SVD-TG and +1.2 % for DCT-TG on ViT-B/ImageNet. The graying call alone
//                is timed too, per batch and as a share of the plain step (two noisy step times'
//                ratio cannot resolve a few per cent), and per image at ViT-B/16's ImageNet size
//                (3 × 224 × 224, a 196 × 768 patch matrix).
//   --nproc LIST  instead of all the above: data-parallel scaling against PyTorch DDP
//                (bench_train_dp.cpp).
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>
#include <torch/cuda.h>

#include "analysis/core/heap_policy.h"
#include "analysis/core/threads.h"
#include "analysis/report/report_csv.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/device_option.h"
#include "experiments/bench/aten_op_counter.h"
#include "experiments/bench/bench_tables.h"
#include "experiments/bench/bench_train_dp.h"
#include "experiments/bench/bench_train_timing.h"
#include "experiments/bench/python_route.h"
#include "models/data/token_graying.h"
#include "models/track/conditioning.h"
#include "models/train/trainer.h"

namespace jacond::cli {

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct StepTiming {
  double step_s = 0, optimizer_s = 0, graying_s = 0;  // graying_s: the Token Graying call alone
  double page_faults = 0;  // the process's minor page faults over a timed step (analysis/core/heap_policy.h)
  double images_per_s(int64_t batch) const { return batch / step_s; }
};

// On `device`: the model, the optimizer's state and the batch live there; loss.item() each step
// waits for the device, so a step's time is its whole time on a GPU too. But on a GPU backward()
// and step() return with their kernels queued: a clock read around step() sees them only after a
// synchronize, which would also stall the step. So there the timed steps alternate in windows of
// W (timing_window: SOAP's precondition_frequency, else 1): the step time from the even windows,
// run as `jacond train` runs them, the optimizer's from the odd ones, synchronised around step();
// only whole windows count, so each mean holds one SOAP refresh per W steps (bench_train_timing.h).
// On the CPU every timed step gives both.
// The benchmark's model of `cfg` on `device` in training mode, its optimizer, and one random batch:
// images [batch, 1, 28, 28] on the host (a step moves them, as a data loader hands them over) and
// their labels on `device`.
struct BenchSetup {
  models::VisionTransformer model;
  std::unique_ptr<models::TrainOptimizer> opt;
  torch::Tensor images, y;
};

BenchSetup bench_setup(const models::TrainConfig& cfg, const torch::Device& device) {
  models::VisionTransformer model(cfg.model);
  model->to(device);
  model->train();
  auto opt = models::make_optimizer(*model, cfg);
  auto gen = at::detail::createCPUGenerator(1);
  torch::Tensor images = torch::randn({cfg.batch, 1, 28, 28}, gen);
  torch::Tensor y = torch::randint(0, 10, {cfg.batch}, gen).to(device);
  return {model, std::move(opt), images, y};
}

StepTiming time_training(const models::TrainConfig& cfg, const torch::Device& device, int64_t warmup, int64_t steps) {
  const models::TokenGraying graying = models::parse_token_graying(cfg.token_graying);
  auto [model, opt, images, y] = bench_setup(cfg, device);
  const bool on_gpu = device.is_cuda();
  const int64_t window = timing_window(cfg.optimizer, cfg.precondition_frequency);
  StepTiming t;
  int64_t step_samples = 0, optimizer_samples = 0;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const int64_t k = s - warmup;  // the timed step's index; negative while warming up
    const TimedRole role = timed_role(on_gpu, k, steps, window);
    const bool time_optimizer = role == TimedRole::kOptimizer || role == TimedRole::kBoth;
    const bool time_step = role == TimedRole::kStep || role == TimedRole::kBoth;
    const long faults0 = minor_page_faults();
    const auto t0 = Clock::now();
    const auto x = models::token_graying(images, graying, cfg.tg_eps, cfg.model.patch).to(device);
    const double graying_s = since(t0);
    opt->zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    if (on_gpu && time_optimizer) torch::cuda::synchronize();
    const auto t1 = Clock::now();
    opt->step();
    if (on_gpu && time_optimizer) torch::cuda::synchronize();
    const double optimizer_s = since(t1);
    (void)loss.item<double>();
    if (time_step) t.step_s += since(t0), t.graying_s += graying_s, t.page_faults += minor_page_faults() - faults0, ++step_samples;
    if (time_optimizer) t.optimizer_s += optimizer_s, ++optimizer_samples;
  }
  t.step_s /= static_cast<double>(step_samples);
  t.optimizer_s /= static_cast<double>(optimizer_samples);
  t.graying_s /= static_cast<double>(step_samples);
  t.page_faults /= static_cast<double>(step_samples);
  return t;
}

// The ATen operations of one AdamW training step of `cfg` on `device`, after one untimed step
// (the optimizer's state exists): "model" (forward, cross-entropy, backward) and "optimizer".
std::map<std::string, AtenOpCounter::Counts> count_step_ops(const models::TrainConfig& cfg, const torch::Device& device) {
  auto [model, opt, images, y] = bench_setup(cfg, device);
  const torch::Tensor x = images.to(device);
  const auto step = [&] {
    opt->zero_grad();
    torch::cross_entropy_loss(model->forward(x), y).backward();
  };
  step();
  opt->step();
  std::map<std::string, AtenOpCounter::Counts> out;
  AtenOpCounter counter;
  step();
  if (device.is_cuda()) torch::cuda::synchronize();
  out["model"] = counter.take();
  opt->step();
  if (device.is_cuda()) torch::cuda::synchronize();
  out["optimizer"] = counter.take();
  return out;
}

// One track_conditioning call as `jacond train` makes it (route, budget, devices), with `matrices`.
struct TrackTiming {
  std::string matrices;
  bool ran = false;
  size_t reports = 0;
  double seconds = NAN;
};

TrackTiming time_tracking(const models::TrainConfig& cfg, const torch::Device& device, const models::TrackDevices& on,
                          const std::string& matrices) {
  TrackTiming t;
  t.matrices = matrices;
  if (cfg.track_every <= 0) return t;
  models::VisionTransformer model(cfg.model);
  model->to(device);
  models::TrackOptions track;
  track.block.route = parse_kappa_route(cfg.track_method);
  track.block.lanczos.max_seconds = cfg.track_seconds;
  track.block.device = on.dense;
  track.block.operator_device = on.products;
  track.matrices = models::parse_matrix_list(matrices);
  const auto probe = torch::randn({1, 1, 28, 28}, at::detail::createCPUGenerator(2)).to(device);
  const auto t0 = Clock::now();
  t.reports = models::track_conditioning(model, probe, track).size();
  t.seconds = since(t0);
  t.ran = true;
  return t;
}

// Seconds per image of one Token Graying call on `count` random fp32 images [C, H, W] with patch
// size `patch` (the median of `reps` calls after one untimed call).
double graying_seconds_per_image(const std::string& mode, int64_t count, int64_t c, int64_t h, int64_t w, int64_t patch,
                                 double eps, int reps) {
  const auto images = torch::randn({count, c, h, w}, at::detail::createCPUGenerator(3));
  const models::TokenGraying graying = models::parse_token_graying(mode);
  (void)models::token_graying(images, graying, eps, patch);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    (void)models::token_graying(images, graying, eps, patch);
    t.push_back(since(t0) / static_cast<double>(count));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// "svd,dct" → {"svd", "dct"}; "none" → {}; a usage error naming anything else.
std::vector<std::string> token_graying_modes(const std::string& spec) {
  std::vector<std::string> out;
  if (spec == "none") return out;
  std::stringstream ss(spec);
  for (std::string m; std::getline(ss, m, ',');)
    if (m != "svd" && m != "dct") throw UsageError("--tg: list svd and/or dct (or none alone), got '" + m + "'");
    else out.push_back(m);
  return out;
}

// Where tracking's two routes ran, for run.json: "dense: ...; products: ...".
std::string tracking_where(const models::TrackDevices& on) {
  return "dense: " + (on.dense ? on.dense->description() : std::string("host")) +
         "; products: " + (on.products ? on.products->description() : std::string("host"));
}

// The flags of `jacond bench train`, parsed and checked.
struct BenchTrainArgs {
  models::TrainConfig cfg;  // model, batch, threads, device, tracking and Token Graying settings
  int64_t warmup = 3, steps = 20;
  std::string out_dir = "results/bench-train", python = "/usr/bin/python3",
              script = std::string(JACOND_SOURCE_DIR) + "/experiments/bench/torch_train_route.py";
  bool skip_python = false;
  std::string skip = "full", init = "timm", tg_modes = "svd,dct", nproc_list;
  std::vector<std::string> tg_list;  // tg_modes parsed
};

// The flags; std::nullopt after --help. Usage errors exit 2 (check_usage).
std::optional<BenchTrainArgs> parse_bench_train(int argc, char** argv) {
  BenchTrainArgs a;
  models::TrainConfig& cfg = a.cfg;
  po::options_description desc("jacond bench train: ViT training throughput vs Python PyTorch, SOAP/AdamW, tracking overhead");
  desc.add_options()("help,h", "this help")
      ("dim", po::value(&cfg.model.dim)->default_value(192), "embedding dimension")
      ("depth", po::value(&cfg.model.depth)->default_value(6), "blocks")
      ("heads", po::value(&cfg.model.heads)->default_value(3), "heads")
      ("patch", po::value(&cfg.model.patch)->default_value(4), "patch size")
      ("skip", po::value(&a.skip)->default_value(a.skip), "full | none | no-ffn-skip | no-sab-skip | rezero (rezero: with --skip-python)")
      ("init", po::value(&a.init)->default_value(a.init), "timm | ours | mimetic: the weights tracking is timed on")
      ("batch", po::value(&cfg.batch)->default_value(128), "batch size")
      ("steps", po::value(&a.steps)->default_value(a.steps), "timed steps per route")
      ("warmup", po::value(&a.warmup)->default_value(a.warmup), "untimed steps first (SOAP's statistics-only step is one)")
      ("precondition-frequency", po::value(&cfg.precondition_frequency)->default_value(cfg.precondition_frequency),
       "SOAP's eigenbasis refresh period (with --device cuda also the window its timed steps alternate in: "
       "--steps >= 2x it)")
      ("threads", po::value(&cfg.threads)->default_value(1), "torch + BLAS threads, both routes")
      ("device", po::value(&cfg.device)->default_value(cfg.device),
       "cpu | cuda: where both routes train and tracking is timed (as jacond train tracks there)")
      ("track-every", po::value(&cfg.track_every)->default_value(cfg.track_every), "tracking period the overhead is spread over")
      ("track-matrices", po::value(&cfg.track_matrices)->default_value(cfg.track_matrices),
       "the set timed against all matrices (comma list; the trainer's default)")
      ("track-method", po::value(&cfg.track_method)->default_value(cfg.track_method), "auto | dense | svd | lanczos")
      ("tg", po::value(&a.tg_modes)->default_value(a.tg_modes), "Token Graying modes whose AdamW step overhead is timed (comma list of svd, dct; none: skip)")
      ("tg-eps", po::value(&cfg.tg_eps)->default_value(0.95, "0.95"), "Token Graying exponent for the overhead")
      ("out", po::value(&a.out_dir)->default_value(a.out_dir), "writes DIR/bench_train.csv and run.json")
      ("python", po::value(&a.python)->default_value(a.python), "Python with torch")
      ("script", po::value(&a.script)->default_value(a.script), "the PyTorch route script")
      ("skip-python", po::bool_switch(&a.skip_python), "time jacond only")
      ("nproc", po::value(&a.nproc_list),
       "comma list of rank counts (e.g. 1,2): time data-parallel `jacond train --nproc N` against PyTorch DDP "
       "instead (N x --threads, and 1 x N*threads)");
  if (!parse_options(argc, argv, desc)) return std::nullopt;
  check_usage([&] {
    if (a.steps < 1 || a.warmup < 1) throw std::invalid_argument("--steps and --warmup must be >= 1");
    if (cfg.batch < 1) throw std::invalid_argument("--batch must be >= 1");
    if (cfg.precondition_frequency < 1) throw std::invalid_argument("--precondition-frequency must be >= 1");
    // time_training: on a GPU the step and optimizer times come from alternate windows of SOAP's
    // refresh period (bench_train_timing.h), so SOAP needs two whole windows; AdamW's are 1 step.
    const int64_t window = timing_window("soap", cfg.precondition_frequency);
    if (cfg.device == "cuda" && a.steps < 2 * window)
      throw std::invalid_argument("--steps must be >= 2 x --precondition-frequency (" + std::to_string(window) +
                                  ") with --device cuda: SOAP's step and optimizer times each need a whole window of "
                                  "--precondition-frequency steps; got --steps " + std::to_string(a.steps));
    if (cfg.device == "cuda" && !a.nproc_list.empty())
      throw std::invalid_argument("--nproc times Gloo ranks on the CPU; with --device cuda leave it out");
    if (cfg.track_every < 0) throw std::invalid_argument("--track-every must be >= 0 (0: skip the tracking measurement)");
    if (cfg.threads < 1) throw std::invalid_argument("--threads must be >= 1");
    if (cfg.device != "cpu" && cfg.device != "cuda")
      throw std::invalid_argument("--device must be cpu or cuda, got '" + cfg.device + "'");
    parse_flag("--track-matrices", [&] { return models::parse_matrix_list(cfg.track_matrices); });
    parse_flag("--track-method", [&] { return parse_kappa_route(cfg.track_method); });
    a.tg_list = token_graying_modes(a.tg_modes);
    if (!(cfg.tg_eps > 0 && cfg.tg_eps <= 1)) throw std::invalid_argument("--tg-eps must be in (0, 1]");
    cfg.model.skip = parse_flag("--skip", [&] { return models::parse_skip_kind(a.skip); });
    cfg.model.init = models::InitConfig::for_scheme(parse_flag("--init", [&] { return models::parse_init_scheme(a.init); }), 0);
    if (cfg.model.skip == models::SkipKind::kRezero && !a.skip_python)
      throw UsageError("--skip rezero: the PyTorch route has no ReZero; add --skip-python");
    if (!a.skip_python) {  // before minutes of jacond's routes, not after
      if (!fs::exists(a.script)) throw std::invalid_argument("--script: " + a.script + " does not exist");
      if (::access(a.python.c_str(), X_OK) != 0) throw std::invalid_argument("--python: " + a.python + " is not executable");
    }
    cfg.model.validate();
  });
  return a;
}

// --nproc: data-parallel scaling against PyTorch DDP instead (bench_train_dp.cpp).
int run_data_parallel_bench(const BenchTrainArgs& a, int argc, char** argv) {
  DataParallelBench dp;
  check_usage([&] {
    std::stringstream ss(a.nproc_list);
    for (std::string n; std::getline(ss, n, ',');) {
      const std::optional<int64_t> ranks = parse_integer(n);
      if (!ranks || *ranks > std::numeric_limits<int>::max())
        throw UsageError("--nproc: '" + n + "' is not a number of ranks (e.g. --nproc 1,2,4)");
      dp.nproc.push_back(static_cast<int>(*ranks));
      if (dp.nproc.back() < 1 || a.cfg.batch % dp.nproc.back() != 0)
        throw UsageError("--nproc: " + n + " ranks must be >= 1 and divide --batch " + std::to_string(a.cfg.batch));
    }
    if (std::find(dp.nproc.begin(), dp.nproc.end(), 1) == dp.nproc.end()) dp.nproc.insert(dp.nproc.begin(), 1);
  });
  dp.model = a.cfg.model;
  dp.skip = a.skip;
  dp.batch = a.cfg.batch, dp.steps = a.steps, dp.warmup = a.warmup;
  dp.threads = static_cast<int>(a.cfg.threads);
  dp.out_dir = a.out_dir, dp.python = a.python, dp.script = a.script, dp.skip_python = a.skip_python;
  begin_output_set(a.out_dir, "bench", bench_tables());
  return bench_data_parallel(dp, argc, argv);
}

// What one run measured: jacond's routes, the tracking calls, Token Graying alone, PyTorch.
struct BenchTrainResults {
  StepTiming adamw, soap;
  std::vector<std::pair<std::string, StepTiming>> grayed;  // AdamW with each Token Graying mode
  TrackTiming track_all, track_set;                        // every matrix; --track-matrices
  std::string track_where;                                 // tracking_where of their devices
  TrackTiming track_set_host;  // --device cuda: the chosen set on the host (--track-device cpu), for the ratio
  std::map<std::string, std::pair<double, double>> graying_per_image;  // mode → (1×28×28, 3×224×224) s
  double python_images_per_s = NAN, python_step_s = NAN, python_optimizer_s = NAN, python_page_faults = NAN;
  std::string torch_version = "not run", python_device = "not run";
  std::string python_error;  // the PyTorch route's failure: jacond's rows are still written, then exit 1
  // One AdamW step's ATen operations: "model" and "optimizer" (count_step_ops; the Python route's count_ops);
  // jacond's also "soap_optimizer", SOAP's step (its second: no eigenbasis refresh).
  std::map<std::string, AtenOpCounter::Counts> jacond_ops, python_ops;
};

// jacond's routes on `device`: AdamW, SOAP, AdamW with each Token Graying mode; then the tracking
// calls where `jacond train` makes them on that device.
void time_jacond_routes(const BenchTrainArgs& a, const torch::Device& device, BenchTrainResults& r) {
  models::TrainConfig adamw = a.cfg, soap = a.cfg;
  adamw.optimizer = "adamw";
  soap.optimizer = "soap";
  adamw.finalize();
  soap.finalize();
  r.adamw = time_training(adamw, device, a.warmup, a.steps);
  r.jacond_ops = count_step_ops(adamw, device);
  std::cout << "jacond AdamW: " << std::fixed << std::setprecision(1) << r.adamw.images_per_s(a.cfg.batch) << " img/s\n";
  r.soap = time_training(soap, device, a.warmup, a.steps);
  r.jacond_ops["soap_optimizer"] = count_step_ops(soap, device).at("optimizer");  // a step without a refresh
  std::cout << "jacond SOAP:  " << r.soap.images_per_s(a.cfg.batch) << " img/s\n";
  for (const std::string& m : a.tg_list) {
    models::TrainConfig tg = adamw;
    tg.token_graying = m;
    r.grayed.emplace_back(m, time_training(tg, device, a.warmup, a.steps));
    std::cout << "jacond AdamW + " << m << "-TG: " << r.grayed.back().second.images_per_s(a.cfg.batch) << " img/s\n";
  }
  std::cout << std::defaultfloat;
  // Tracking: one call on one probe image, every matrix and then the chosen set.
  const models::TrackDevices on =
      a.cfg.track_every > 0 ? select_track_devices(a.cfg.device, 0) : models::TrackDevices{};
  r.track_where = tracking_where(on);
  r.track_all = time_tracking(a.cfg, device, on, "all");
  r.track_set = time_tracking(a.cfg, device, on, a.cfg.track_matrices);
  if (on.any()) r.track_set_host = time_tracking(a.cfg, device, {}, a.cfg.track_matrices);
  // The paper's sizes: ImageNet images, 3 × 224 × 224 (ViT-B/16: 196 × 768 patches), where the SVD's cost shows.
  for (const std::string& m : a.tg_list)
    r.graying_per_image[m] = {graying_seconds_per_image(m, a.cfg.batch, 1, 28, 28, a.cfg.model.patch, a.cfg.tg_eps, 9),
                              graying_seconds_per_image(m, 8, 3, 224, 224, 16, a.cfg.tg_eps, 3)};
}

// The same model in Python PyTorch (torch_train_route.py), same threads, batch, steps and device.
void time_python_route(const BenchTrainArgs& a, BenchTrainResults& r) {
  const models::TrainConfig& cfg = a.cfg;
  nlohmann::json j = run_python_json(
      {a.python, a.script, "--dim", std::to_string(cfg.model.dim), "--depth", std::to_string(cfg.model.depth), "--heads",
       std::to_string(cfg.model.heads), "--patch", std::to_string(cfg.model.patch), "--batch", std::to_string(cfg.batch),
       "--steps", std::to_string(a.steps), "--warmup", std::to_string(a.warmup), "--threads", std::to_string(cfg.threads),
       "--skip", a.skip, "--device", cfg.device},
      static_cast<int>(cfg.threads), a.out_dir, "torch train route (" + a.python + " " + a.script + ")",
      {"images_per_s", "step_s", "torch_version", "device"});
  r.python_images_per_s = j["images_per_s"].get<double>();
  r.python_step_s = j["step_s"].get<double>();
  // null where no step timed it (one timed step on a GPU: the even one)
  if (j.contains("optimizer_step_s") && j["optimizer_step_s"].is_number())
    r.python_optimizer_s = j["optimizer_step_s"].get<double>();
  if (j.contains("page_faults_per_step") && j["page_faults_per_step"].is_number())
    r.python_page_faults = j["page_faults_per_step"].get<double>();
  r.torch_version = j["torch_version"].get<std::string>();
  r.python_device = j["device"].get<std::string>();
  if (j.contains("aten_ops") && j["aten_ops"].is_object())
    for (const char* part : {"model", "optimizer"})
      r.python_ops[part] = j["aten_ops"].value(part, nlohmann::json::object()).get<AtenOpCounter::Counts>();
  std::cout << "PyTorch AdamW: " << std::fixed << std::setprecision(1) << r.python_images_per_s << " img/s (torch "
            << r.torch_version << ")\n" << std::defaultfloat;
}

// Both routes' ATen operations in one step, and the names whose counts differ most in the model
// pass (on a GPU, launches; a gap in step time that these do not explain is host work).
void print_op_counts(const BenchTrainResults& r) {
  if (r.python_ops.empty()) return;
  std::cout << "ATen operations in one AdamW step (nested included): model pass jacond "
            << total(r.jacond_ops.at("model")) << ", PyTorch " << total(r.python_ops.at("model"))
            << "; optimizer.step() jacond " << total(r.jacond_ops.at("optimizer")) << ", PyTorch "
            << total(r.python_ops.at("optimizer")) << "; SOAP's optimizer.step() jacond "
            << total(r.jacond_ops.at("soap_optimizer")) << "\n";
  std::vector<std::tuple<int64_t, std::string, int64_t, int64_t>> diff;  // (|difference|, name, jacond, PyTorch)
  std::set<std::string> names;
  for (const auto* c : {&r.jacond_ops.at("model"), &r.python_ops.at("model")})
    for (const auto& [name, k] : *c) names.insert(name);
  const auto of = [](const AtenOpCounter::Counts& c, const std::string& name) {
    const auto it = c.find(name);
    return it == c.end() ? int64_t{0} : it->second;
  };
  for (const std::string& name : names) {
    const int64_t j = of(r.jacond_ops.at("model"), name), p = of(r.python_ops.at("model"), name);
    if (j != p) diff.emplace_back(std::abs(j - p), name, j, p);
  }
  std::sort(diff.rbegin(), diff.rend());
  std::cout << "  model pass, most different (jacond/PyTorch):";
  if (diff.empty()) std::cout << " none";
  for (size_t i = 0; i < std::min<size_t>(diff.size(), 6); ++i)
    std::cout << (i ? ", " : " ") << std::get<1>(diff[i]) << " " << std::get<2>(diff[i]) << "/" << std::get<3>(diff[i]);
  std::cout << "\n";
}

std::string fixed3(double v) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << v;
  return os.str();
}

// The ratios, on stdout. The jacond/PyTorch images/s target: 1.2 on the CPU, 1.0 on a GPU (issue 11).
void print_ratios(const BenchTrainArgs& a, const BenchTrainResults& r) {
  const models::TrainConfig& cfg = a.cfg;
  const StepTiming& ta = r.adamw;
  std::cout << std::setprecision(3) << "\n"
            << "jacond AdamW / PyTorch AdamW images/s: "
            << (a.skip_python ? std::string("n/a (--skip-python)")
                              : std::to_string(ta.images_per_s(cfg.batch) / r.python_images_per_s) + "x")
            << (cfg.device == "cuda" ? "  (target >= 1.0 on a GPU)\n" : "  (target >= 1.2)\n")
            << (a.skip_python || std::isnan(r.python_optimizer_s)
                    ? std::string()
                    : "  where the step time goes (ms): optimizer.step() jacond " + fixed3(1e3 * ta.optimizer_s) +
                          ", PyTorch " + fixed3(1e3 * r.python_optimizer_s) + "; the rest of the step jacond " +
                          fixed3(1e3 * (ta.step_s - ta.optimizer_s)) + ", PyTorch " +
                          fixed3(1e3 * (r.python_step_s - r.python_optimizer_s)) + "\n")
            << "  minor page faults per step: jacond " << std::lround(ta.page_faults) << ", PyTorch "
            << (std::isnan(r.python_page_faults) ? std::string("n/a") : std::to_string(std::lround(r.python_page_faults)))
            << " (jacond's heap: " << describe_heap_policy() << ")\n"
            << "SOAP / AdamW full-step time:          " << r.soap.step_s / ta.step_s << "   (target <= 1.5)\n"
            << "SOAP / AdamW optimizer.step() time:   " << r.soap.optimizer_s / ta.optimizer_s << "\n";
  print_op_counts(r);
  if (r.track_all.ran) std::cout << "tracking on " << r.track_where << "\n";
  for (const TrackTiming* t : {&r.track_all, &r.track_set})
    if (t->ran)
      std::cout << "tracking (" << t->matrices << "): " << t->reports << " reports in " << t->seconds
                << " s per call = " << 100 * t->seconds / (cfg.track_every * ta.step_s) << "% of " << cfg.track_every
                << " AdamW steps\n";
  for (const std::string& m : a.tg_list) {
    const auto& s = r.graying_per_image.at(m);
    std::cout << m << "-TG alone per image: " << 1e6 * s.first << " us at 1x28x28 (patch " << cfg.model.patch << "), "
              << 1e3 * s.second << " ms at 3x224x224 (patch 16)\n";
  }
  if (r.graying_per_image.count("svd") && r.graying_per_image.count("dct")) {
    const auto &svd = r.graying_per_image.at("svd"), &dct = r.graying_per_image.at("dct");
    std::cout << "svd-TG / dct-TG time per image: " << svd.first / dct.first << " at 1x28x28, "
              << svd.second / dct.second << " at 3x224x224\n";
  }
  for (const auto& [m, t] : r.grayed)
    std::cout << m << "-TG (eps " << cfg.tg_eps << ") / no TG full-step time: " << t.step_s / ta.step_s
              << "   (paper, ViT-B/ImageNet: " << (m == "svd" ? "6.3" : "1.012") << "); the graying alone: "
              << 1e3 * t.graying_s << " ms per batch = " << 100 * t.graying_s / ta.step_s << "% of a step\n";
  if (r.track_all.ran)
    std::cout << "tracking " << r.track_set.matrices << " / all matrices: " << r.track_set.seconds / r.track_all.seconds
              << "x the time\n";
  if (r.track_set_host.ran)
    std::cout << "tracking (" << r.track_set.matrices << ") on the host (--track-device cpu): " << r.track_set_host.seconds
              << " s per call, " << r.track_set_host.seconds / r.track_set.seconds << "x the time on " << cfg.device
              << "\n";
  std::cout << std::defaultfloat;
}

// DIR/bench_train.csv (one row per route) and DIR/run.json (the command, the model, the ratios).
void write_results(const BenchTrainArgs& a, const BenchTrainResults& r, int argc, char** argv) {
  const models::TrainConfig& cfg = a.cfg;
  const StepTiming& ta = r.adamw;
  std::ostringstream csv;
  csv << "route,optimizer,device,threads,batch,images_per_s,step_s,optimizer_step_s,page_faults_per_step\n";
  auto row = [&](const std::string& route, const std::string& opt, double ips, double step, double opt_s, double faults) {
    csv << route << "," << opt << "," << cfg.device << "," << cfg.threads << "," << cfg.batch << "," << format_number(ips)
        << "," << format_number(step) << "," << format_number(opt_s) << "," << format_number(faults) << "\n";
  };
  const auto jacond_row = [&](const std::string& route, const StepTiming& t, const std::string& opt) {
    row(route, opt, t.images_per_s(cfg.batch), t.step_s, t.optimizer_s, t.page_faults);
  };
  jacond_row("jacond", ta, "adamw");
  jacond_row("jacond", r.soap, "soap");
  for (const auto& [m, t] : r.grayed) jacond_row("jacond+" + m + "-tg", t, "adamw");
  if (!a.skip_python)
    row("pytorch", "adamw", r.python_images_per_s, r.python_step_s, r.python_optimizer_s, r.python_page_faults);
  write_file_atomic(a.out_dir + "/bench_train.csv", csv.str());

  nlohmann::json meta = run_metadata(argc, argv, "bench");
  meta["model"] = cfg.model.to_json();
  if (!r.python_error.empty()) meta["python_error"] = r.python_error;
  meta["ratios"] = {{"jacond_over_pytorch_images_per_s", ta.images_per_s(cfg.batch) / r.python_images_per_s},
                    {"soap_over_adamw_step", r.soap.step_s / ta.step_s},
                    {"soap_over_adamw_optimizer", r.soap.optimizer_s / ta.optimizer_s},
                    {"tracking_overhead_all", r.track_all.seconds / (cfg.track_every * ta.step_s)},
                    {"tracking_overhead", r.track_set.seconds / (cfg.track_every * ta.step_s)}};
  for (const auto& [m, t] : r.grayed) {
    meta["ratios"][m + "_tg_over_none_step"] = t.step_s / ta.step_s;
    meta["ratios"][m + "_tg_alone_over_step"] = t.graying_s / ta.step_s;
    const auto& per_image = r.graying_per_image.at(m);
    meta["token_graying_seconds_per_image"][m] = {{"1x28x28", per_image.first}, {"3x224x224", per_image.second}};
  }
  meta["tg_eps"] = cfg.tg_eps;
  meta["soap_precondition_frequency"] = cfg.precondition_frequency;  // on a GPU also SOAP's timing window
  meta["tracking"] = {{"track_every", cfg.track_every},
                      {"where", r.track_where},
                      {"all", {{"seconds", r.track_all.seconds}, {"reports", r.track_all.reports}}},
                      {"chosen", {{"matrices", r.track_set.matrices}, {"seconds", r.track_set.seconds},
                                  {"reports", r.track_set.reports}}}};
  if (r.track_set_host.ran)
    meta["tracking"]["chosen_on_host"] = {{"seconds", r.track_set_host.seconds}, {"reports", r.track_set_host.reports}};
  meta["aten_ops"] = {{"jacond", r.jacond_ops}, {"pytorch", r.python_ops}};
  meta["torch_version"] = r.torch_version;
  meta["heap"] = describe_heap_policy();
  meta["device"] = {{"name", cfg.device}, {"pytorch_device", r.python_device}};
  write_file_atomic(a.out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << a.out_dir << "/bench_train.csv and run.json\n";
}

}  // namespace

int run_bench_train(int argc, char** argv) {
  const std::optional<BenchTrainArgs> parsed = parse_bench_train(argc, argv);
  if (!parsed) return 0;
  const BenchTrainArgs& a = *parsed;
  if (!a.nproc_list.empty()) return run_data_parallel_bench(a, argc, argv);
  const torch::Device device = models::select_device(a.cfg);  // threads too; exit 1 without CUDA
  begin_output_set(a.out_dir, "bench", bench_tables());
  const models::TrainConfig& cfg = a.cfg;
  std::cout << "ViT d=" << cfg.model.dim << " depth=" << cfg.model.depth << " heads=" << cfg.model.heads
            << " skip=" << a.skip << " init=" << a.init << " patch=" << cfg.model.patch << " (n=" << cfg.model.tokens()
            << ") batch=" << cfg.batch << " threads=" << cfg.threads << " device=" << cfg.device << ", " << a.steps
            << " timed steps after " << a.warmup << "\n";
  BenchTrainResults r;
  time_jacond_routes(a, device, r);
  if (!a.skip_python) {
    try {
      time_python_route(a, r);
    } catch (const std::runtime_error& e) {
      r.python_error = e.what();
    }
  }
  print_ratios(a, r);
  write_results(a, r, argc, argv);
  if (!r.python_error.empty())
    throw std::runtime_error(r.python_error + " (jacond's routes are in " + a.out_dir + "/bench_train.csv)");
  return 0;
}

}  // namespace jacond::cli
