// `jacond bench train`: training throughput of jacond's LibTorch ViT against the same model in
// Python PyTorch (experiments/bench/torch_train_route.py), same threads, same run; the SOAP/AdamW
// step-time ratio; and the overhead of conditioning tracking at a given --track-every.
//
//   images/s     batch · steps / time of `steps` full training steps (forward, cross-entropy,
//                backward, optimizer step) after `warmup` untimed steps, fp32, random images
//                [batch, 1, 28, 28] (throughput does not depend on pixel values), on --device
//                (cpu | cuda; both routes on the same one, each step ending with loss.item()).
//   SOAP/AdamW   ratio of mean full-step times, and of optimizer.step() times alone; SOAP's
//                timed window includes its eigenbasis refreshes (every precondition_frequency).
//   tracking     one track_conditioning call (one probe image, the trainer's default route `auto`
//                with its per-matrix Lanczos budget) divided by the training time it is spread
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
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "analysis/report/report_csv.h"
#include "analysis/core/threads.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"
#include "experiments/bench/bench_train_dp.h"
#include "experiments/bench/python_route.h"
#include "models/data/token_graying.h"
#include "models/track/conditioning.h"
#include "models/train/trainer.h"

namespace jacond::cli {

namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct StepTiming {
  double step_s = 0, optimizer_s = 0, graying_s = 0;  // graying_s: the Token Graying call alone
  double images_per_s(int64_t batch) const { return batch / step_s; }
};

// On `device`: the model, the optimizer's state and the batch live there; loss.item() each step
// waits for the device, so a step's time is its whole time on a GPU too.
StepTiming time_training(const models::TrainConfig& cfg, const torch::Device& device, int64_t warmup, int64_t steps) {
  const models::TokenGraying graying = models::parse_token_graying(cfg.token_graying);
  models::VisionTransformer model(cfg.model);
  model->to(device);
  model->train();
  auto opt = models::make_optimizer(*model, cfg);
  auto gen = at::detail::createCPUGenerator(1);
  const auto images = torch::randn({cfg.batch, 1, 28, 28}, gen);
  const auto y = torch::randint(0, 10, {cfg.batch}, gen).to(device);
  StepTiming t;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    const auto x = models::token_graying(images, graying, cfg.tg_eps, cfg.model.patch).to(device);
    const double graying_s = since(t0);
    opt->zero_grad();
    auto loss = torch::cross_entropy_loss(model->forward(x), y);
    loss.backward();
    const auto t1 = Clock::now();
    opt->step();
    (void)loss.item<double>();
    if (s >= warmup) {
      t.graying_s += graying_s;
      t.optimizer_s += since(t1);
      t.step_s += since(t0);
    }
  }
  t.step_s /= steps;
  t.optimizer_s /= steps;
  t.graying_s /= steps;
  return t;
}

// One track_conditioning call as `jacond train` makes it (route, budget), with `matrices`.
struct TrackTiming {
  std::string matrices;
  bool ran = false;
  size_t reports = 0;
  double seconds = NAN;
};

TrackTiming time_tracking(const models::TrainConfig& cfg, const std::string& matrices) {
  TrackTiming t;
  t.matrices = matrices;
  if (cfg.track_every <= 0) return t;
  models::VisionTransformer model(cfg.model);
  models::TrackOptions track;
  track.block.route = parse_kappa_route(cfg.track_method);
  track.block.lanczos.max_seconds = cfg.track_seconds;
  track.matrices = models::parse_matrix_list(matrices);
  const auto probe = torch::randn({1, 1, 28, 28}, at::detail::createCPUGenerator(2));
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

}  // namespace

int run_bench_train(int argc, char** argv) {
  models::TrainConfig cfg;
  int64_t warmup = 3, steps = 20;
  std::string out_dir = "results/bench-train", python = "/usr/bin/python3",
              script = std::string(JACOND_SOURCE_DIR) + "/experiments/bench/torch_train_route.py";
  bool skip_python = false;
  std::string skip = "full", init = "timm", tg_modes = "svd,dct", nproc_list;
  std::vector<std::string> tg_list;
  po::options_description desc("jacond bench train: ViT training throughput vs Python PyTorch, SOAP/AdamW, tracking overhead");
  desc.add_options()("help,h", "this help")
      ("dim", po::value(&cfg.model.dim)->default_value(192), "embedding dimension")
      ("depth", po::value(&cfg.model.depth)->default_value(6), "blocks")
      ("heads", po::value(&cfg.model.heads)->default_value(3), "heads")
      ("patch", po::value(&cfg.model.patch)->default_value(4), "patch size")
      ("skip", po::value(&skip)->default_value(skip), "full | none | no-ffn-skip | no-sab-skip | rezero (rezero: with --skip-python)")
      ("init", po::value(&init)->default_value(init), "timm | ours | mimetic: the weights tracking is timed on")
      ("batch", po::value(&cfg.batch)->default_value(128), "batch size")
      ("steps", po::value(&steps)->default_value(steps), "timed steps per route")
      ("warmup", po::value(&warmup)->default_value(warmup), "untimed steps first (SOAP's statistics-only step is one)")
      ("threads", po::value(&cfg.threads)->default_value(1), "torch + BLAS threads, both routes")
      ("device", po::value(&cfg.device)->default_value(cfg.device),
       "cpu | cuda: where both routes train (tracking is timed on the host, as in jacond train)")
      ("track-every", po::value(&cfg.track_every)->default_value(cfg.track_every), "tracking period the overhead is spread over")
      ("track-matrices", po::value(&cfg.track_matrices)->default_value(cfg.track_matrices),
       "the set timed against all matrices (comma list; the trainer's default)")
      ("track-method", po::value(&cfg.track_method)->default_value(cfg.track_method), "auto | dense | svd | lanczos")
      ("tg", po::value(&tg_modes)->default_value(tg_modes), "Token Graying modes whose AdamW step overhead is timed (comma list of svd, dct; none: skip)")
      ("tg-eps", po::value(&cfg.tg_eps)->default_value(0.95, "0.95"), "Token Graying exponent for the overhead")
      ("out", po::value(&out_dir)->default_value(out_dir), "writes DIR/bench_train.csv and run.json")
      ("python", po::value(&python)->default_value(python), "Python with torch")
      ("script", po::value(&script)->default_value(script), "the PyTorch route script")
      ("skip-python", po::bool_switch(&skip_python), "time jacond only")
      ("nproc", po::value(&nproc_list),
       "comma list of rank counts (e.g. 1,2): time data-parallel `jacond train --nproc N` against PyTorch DDP "
       "instead (N x --threads, and 1 x N*threads)");
  if (!parse_options(argc, argv, desc)) return 0;
  check_usage([&] {
    if (steps < 1 || warmup < 1) throw std::invalid_argument("--steps and --warmup must be >= 1");
    if (cfg.track_every < 0) throw std::invalid_argument("--track-every must be >= 0 (0: skip the tracking measurement)");
    if (cfg.threads < 1) throw std::invalid_argument("--threads must be >= 1");
    if (cfg.device != "cpu" && cfg.device != "cuda")
      throw std::invalid_argument("--device must be cpu or cuda, got '" + cfg.device + "'");
    parse_flag("--track-matrices", [&] { return models::parse_matrix_list(cfg.track_matrices); });
    parse_flag("--track-method", [&] { return parse_kappa_route(cfg.track_method); });
    tg_list = token_graying_modes(tg_modes);
    if (!(cfg.tg_eps > 0 && cfg.tg_eps <= 1)) throw std::invalid_argument("--tg-eps must be in (0, 1]");
    cfg.model.skip = parse_flag("--skip", [&] { return models::parse_skip_kind(skip); });
    cfg.model.init = models::InitConfig::for_scheme(parse_flag("--init", [&] { return models::parse_init_scheme(init); }), 0);
    if (cfg.model.skip == models::SkipKind::kRezero && !skip_python)
      throw UsageError("--skip rezero: the PyTorch route has no ReZero; add --skip-python");
    cfg.model.validate();
  });
  if (!nproc_list.empty()) {
    DataParallelBench dp;
    check_usage([&] {
      std::stringstream ss(nproc_list);
      for (std::string n; std::getline(ss, n, ',');) {
        dp.nproc.push_back(parse_flag("--nproc", [&] { return std::stoi(n); }));
        if (dp.nproc.back() < 1 || cfg.batch % dp.nproc.back() != 0)
          throw UsageError("--nproc: " + n + " ranks must be >= 1 and divide --batch " + std::to_string(cfg.batch));
      }
      if (std::find(dp.nproc.begin(), dp.nproc.end(), 1) == dp.nproc.end()) dp.nproc.insert(dp.nproc.begin(), 1);
    });
    dp.model = cfg.model;
    dp.skip = skip;
    dp.batch = cfg.batch, dp.steps = steps, dp.warmup = warmup;
    dp.threads = static_cast<int>(cfg.threads);
    dp.out_dir = out_dir, dp.python = python, dp.script = script, dp.skip_python = skip_python;
    ensure_directory(out_dir);
    return bench_data_parallel(dp, argc, argv);
  }
  const torch::Device device = models::select_device(cfg);  // threads too; exit 1 without CUDA
  ensure_directory(out_dir);

  std::cout << "ViT d=" << cfg.model.dim << " depth=" << cfg.model.depth << " heads=" << cfg.model.heads
            << " skip=" << skip << " init=" << init
            << " patch=" << cfg.model.patch << " (n=" << cfg.model.tokens() << ") batch=" << cfg.batch
            << " threads=" << cfg.threads << " device=" << cfg.device << ", " << steps << " timed steps after " << warmup
            << "\n";
  models::TrainConfig adamw = cfg, soap = cfg;
  adamw.optimizer = "adamw";
  soap.optimizer = "soap";
  adamw.finalize();
  soap.finalize();
  const StepTiming ta = time_training(adamw, device, warmup, steps);
  std::cout << "jacond AdamW: " << std::fixed << std::setprecision(1) << ta.images_per_s(cfg.batch) << " img/s\n";
  const StepTiming ts = time_training(soap, device, warmup, steps);
  std::cout << "jacond SOAP:  " << ts.images_per_s(cfg.batch) << " img/s\n";
  std::vector<std::pair<std::string, StepTiming>> grayed;  // AdamW with each Token Graying mode
  for (const std::string& m : tg_list) {
    models::TrainConfig tg = adamw;
    tg.token_graying = m;
    grayed.emplace_back(m, time_training(tg, device, warmup, steps));
    std::cout << "jacond AdamW + " << m << "-TG: " << grayed.back().second.images_per_s(cfg.batch) << " img/s\n";
  }

  // Tracking: one call on one probe image, every matrix and then the chosen set.
  const TrackTiming track_all = time_tracking(cfg, "all");
  const TrackTiming track_set = time_tracking(cfg, cfg.track_matrices);

  double py_ips = NAN, py_step = NAN;
  std::string torch_version = "not run", py_device = "not run";
  if (!skip_python) {
    nlohmann::json j = run_python_json(
        {python, script, "--dim", std::to_string(cfg.model.dim), "--depth", std::to_string(cfg.model.depth), "--heads",
         std::to_string(cfg.model.heads), "--patch", std::to_string(cfg.model.patch), "--batch", std::to_string(cfg.batch),
         "--steps", std::to_string(steps), "--warmup", std::to_string(warmup), "--threads", std::to_string(cfg.threads), "--skip", skip,
         "--device", cfg.device},
        static_cast<int>(cfg.threads), out_dir, "torch train route (" + python + " " + script + ")",
        {"images_per_s", "step_s", "torch_version", "device"});
    py_ips = j["images_per_s"].get<double>();
    py_step = j["step_s"].get<double>();
    torch_version = j["torch_version"].get<std::string>();
    py_device = j["device"].get<std::string>();
    std::cout << "PyTorch AdamW: " << py_ips << " img/s (torch " << torch_version << ")\n";
  }

  std::cout << std::setprecision(3) << "\n"
            << "jacond AdamW / PyTorch AdamW images/s: "
            << (skip_python ? std::string("n/a (--skip-python)") : std::to_string(ta.images_per_s(cfg.batch) / py_ips) + "x")
            << "  (target >= 1.2)\n"
            << "SOAP / AdamW full-step time:          " << ts.step_s / ta.step_s << "   (target <= 1.5)\n"
            << "SOAP / AdamW optimizer.step() time:   " << ts.optimizer_s / ta.optimizer_s << "\n"
            << std::defaultfloat;
  for (const TrackTiming* t : {&track_all, &track_set})
    if (t->ran)
      std::cout << std::setprecision(3) << "tracking (" << t->matrices << "): " << t->reports << " reports in "
                << t->seconds << " s per call = " << 100 * t->seconds / (cfg.track_every * ta.step_s) << "% of "
                << cfg.track_every << " AdamW steps\n" << std::defaultfloat;
  // The paper's sizes: ImageNet images, 3 × 224 × 224, where the SVD's cost shows.
  std::map<std::string, std::pair<double, double>> per_image;  // mode → (28 × 28, 3 × 224 × 224) seconds
  for (const std::string& m : tg_list) {
    per_image[m] = {graying_seconds_per_image(m, cfg.batch, 1, 28, 28, cfg.model.patch, cfg.tg_eps, 9),
                    graying_seconds_per_image(m, 8, 3, 224, 224, 16, cfg.tg_eps, 3)};  // ViT-B/16: 196 × 768 patches
    std::cout << std::setprecision(3) << m << "-TG alone per image: " << 1e6 * per_image[m].first << " us at 1x28x28 (patch "
              << cfg.model.patch << "), " << 1e3 * per_image[m].second << " ms at 3x224x224 (patch 16)\n" << std::defaultfloat;
  }
  if (per_image.count("svd") && per_image.count("dct"))
    std::cout << std::setprecision(3) << "svd-TG / dct-TG time per image: " << per_image["svd"].first / per_image["dct"].first
              << " at 1x28x28, " << per_image["svd"].second / per_image["dct"].second << " at 3x224x224\n" << std::defaultfloat;
  for (const auto& [m, t] : grayed)
    std::cout << std::setprecision(3) << m << "-TG (eps " << cfg.tg_eps << ") / no TG full-step time: " << t.step_s / ta.step_s
              << "   (paper, ViT-B/ImageNet: " << (m == "svd" ? "6.3" : "1.012") << "); the graying alone: "
              << 1e3 * t.graying_s << " ms per batch = " << 100 * t.graying_s / ta.step_s << "% of a step\n" << std::defaultfloat;
  if (track_all.ran)
    std::cout << std::setprecision(3) << "tracking " << track_set.matrices << " / all matrices: "
              << track_set.seconds / track_all.seconds << "x the time\n" << std::defaultfloat;

  std::ostringstream csv;
  csv << "route,optimizer,device,threads,batch,images_per_s,step_s,optimizer_step_s\n";
  auto row = [&](const std::string& route, const std::string& opt, double ips, double step, double opt_s) {
    csv << route << "," << opt << "," << cfg.device << "," << cfg.threads << "," << cfg.batch << "," << format_number(ips)
        << "," << format_number(step) << "," << format_number(opt_s) << "\n";
  };
  row("jacond", "adamw", ta.images_per_s(cfg.batch), ta.step_s, ta.optimizer_s);
  row("jacond", "soap", ts.images_per_s(cfg.batch), ts.step_s, ts.optimizer_s);
  for (const auto& [m, t] : grayed) row("jacond+" + m + "-tg", "adamw", t.images_per_s(cfg.batch), t.step_s, t.optimizer_s);
  if (!skip_python) row("pytorch", "adamw", py_ips, py_step, NAN);
  write_file_atomic(out_dir + "/bench_train.csv", csv.str());
  nlohmann::json meta = run_metadata(argc, argv, "bench");
  meta["model"] = cfg.model.to_json();
  meta["ratios"] = {{"jacond_over_pytorch_images_per_s", ta.images_per_s(cfg.batch) / py_ips},
                    {"soap_over_adamw_step", ts.step_s / ta.step_s},
                    {"soap_over_adamw_optimizer", ts.optimizer_s / ta.optimizer_s},
                    {"tracking_overhead_all", track_all.seconds / (cfg.track_every * ta.step_s)},
                    {"tracking_overhead", track_set.seconds / (cfg.track_every * ta.step_s)}};
  for (const auto& [m, t] : grayed) {
    meta["ratios"][m + "_tg_over_none_step"] = t.step_s / ta.step_s;
    meta["ratios"][m + "_tg_alone_over_step"] = t.graying_s / ta.step_s;
    meta["token_graying_seconds_per_image"][m] = {{"1x28x28", per_image[m].first}, {"3x224x224", per_image[m].second}};
  }
  meta["tg_eps"] = cfg.tg_eps;
  meta["tracking"] = {{"track_every", cfg.track_every},
                      {"all", {{"seconds", track_all.seconds}, {"reports", track_all.reports}}},
                      {"chosen", {{"matrices", track_set.matrices}, {"seconds", track_set.seconds},
                                  {"reports", track_set.reports}}}};
  meta["torch_version"] = torch_version;
  meta["device"] = {{"name", cfg.device}, {"pytorch_device", py_device}};
  write_file_atomic(out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << out_dir << "/bench_train.csv and run.json\n";
  return 0;
}

}  // namespace jacond::cli
