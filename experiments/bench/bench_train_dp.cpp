// `jacond bench train --nproc 1,2`: data-parallel training throughput (models/dist) against
// Python PyTorch's DistributedDataParallel on the same Gloo engine, same model, same global batch.
//
//   jacond    `jacond train --nproc N --threads T` on Fashion-MNIST (the real trainer: data
//             pipeline, forward, backward with the bucketed all-reduce, AdamW, the loss
//             all-reduce); images/s = batch · k / Σ step times of rank 0's train_log.jsonl over
//             the k steps after the warmup (start-up, data loading and the final evaluation and
//             checkpoint are outside the steps).
//   PyTorch   experiments/bench/torch_train_route.py --nproc N: torch.multiprocessing.spawn, a
//             Gloo process group, DDP, random images, AdamW; rank 0 times the steps.
//   configs   for every N in the list: N ranks × T threads; for N > 1 also 1 rank × N·T threads,
//             the same cores spent on intra-op threads instead of ranks.
//   scaling   efficiency(N) = images/s(N × T) / (N · images/s(1 × T)).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "experiments/bench/bench_train_dp.h"
#include "experiments/bench/python_route.h"
#include "experiments/cli/cli_common.h"

namespace jacond::cli {

namespace fs = std::filesystem;

namespace {

struct Config {
  int nproc, threads;
};

// images/s of `jacond train` over the steps after `warmup`, from its train_log.jsonl.
double jacond_images_per_s(const DataParallelBench& b, const Config& c, const std::string& dir) {
  const std::string run = dir + "/jacond-" + std::to_string(c.nproc) + "x" + std::to_string(c.threads);
  fs::remove_all(run);
  std::vector<std::string> argv{fs::read_symlink("/proc/self/exe").string(), "train", "--dim", std::to_string(b.model.dim),
                                "--depth", std::to_string(b.model.depth), "--heads", std::to_string(b.model.heads),
                                "--patch", std::to_string(b.model.patch), "--skip", b.skip, "--batch", std::to_string(b.batch),
                                "--steps", std::to_string(b.warmup + b.steps), "--optimizer", "adamw",
                                "--threads", std::to_string(c.threads), "--nproc", std::to_string(c.nproc),
                                "--track-every", "0", "--checkpoint-every", "0", "--test-limit", "500",
                                "--print-every", "1000000", "--out", run};
  const PythonRun r = spawn_python(argv, c.threads, dir);
  if (r.exit_code != 0)
    throw std::runtime_error("jacond train --nproc " + std::to_string(c.nproc) + " failed (exit " +
                             std::to_string(r.exit_code) + "): " + one_line_tail(r.stderr_text));
  std::ifstream in(run + "/train_log.jsonl");
  double seconds = 0;
  int64_t counted = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.at("step").get<int64_t>() <= b.warmup) continue;
    seconds += static_cast<double>(b.batch) / j.at("images_per_s").get<double>();
    ++counted;
  }
  if (counted != b.steps) throw std::runtime_error(run + "/train_log.jsonl: expected " + std::to_string(b.steps) + " timed steps");
  fs::remove_all(run);
  return static_cast<double>(b.batch * counted) / seconds;
}

double pytorch_images_per_s(const DataParallelBench& b, const Config& c, const std::string& dir, std::string* version) {
  const nlohmann::json j = run_python_json(
      {b.python, b.script, "--dim", std::to_string(b.model.dim), "--depth", std::to_string(b.model.depth), "--heads",
       std::to_string(b.model.heads), "--patch", std::to_string(b.model.patch), "--batch", std::to_string(b.batch),
       "--steps", std::to_string(b.steps), "--warmup", std::to_string(b.warmup), "--threads", std::to_string(c.threads),
       "--skip", b.skip, "--nproc", std::to_string(c.nproc)},
      c.threads, dir, "torch DDP route (" + b.python + " " + b.script + ")", {"images_per_s", "torch_version"});
  *version = j["torch_version"].get<std::string>();
  return j["images_per_s"].get<double>();
}

}  // namespace

int bench_data_parallel(const DataParallelBench& b, int argc, char** argv) {
  std::vector<Config> configs;
  for (int n : b.nproc) configs.push_back({n, b.threads});
  for (int n : b.nproc)
    if (n > 1) configs.push_back({1, n * b.threads});
  std::cout << "data parallel: ViT d=" << b.model.dim << " depth=" << b.model.depth << " heads=" << b.model.heads
            << " patch=" << b.model.patch << " skip=" << b.skip << ", global batch " << b.batch << ", AdamW, " << b.steps
            << " timed steps after " << b.warmup << "\n";
  std::map<std::pair<int, int>, std::pair<double, double>> ips;  // (ranks, threads) -> (jacond, pytorch)
  std::string torch_version = "not run";
  for (const Config& c : configs) {
    const double j = jacond_images_per_s(b, c, b.out_dir);
    const double p = b.skip_python ? NAN : pytorch_images_per_s(b, c, b.out_dir, &torch_version);
    ips[{c.nproc, c.threads}] = {j, p};
    std::cout << std::fixed << std::setprecision(1) << c.nproc << " rank(s) x " << c.threads << " thread(s): jacond "
              << j << " img/s, PyTorch DDP " << p << " img/s, jacond/PyTorch " << std::setprecision(3) << j / p << "\n"
              << std::defaultfloat;
  }
  std::ostringstream csv;
  csv << "route,nproc,threads,batch,images_per_s,scaling_efficiency\n";
  nlohmann::json ratios = nlohmann::json::object();
  for (const char* route : {"jacond", "pytorch"}) {
    const bool is_jacond = std::string(route) == "jacond";
    if (!is_jacond && b.skip_python) continue;
    auto get = [&](int n, int t) { return is_jacond ? ips.at({n, t}).first : ips.at({n, t}).second; };
    for (const Config& c : configs) {
      // Against 1 rank × T threads (always timed: the list holds 1); blank for 1 × N·T threads.
      const double eff = get(c.nproc, c.threads) / (c.nproc * get(1, b.threads));
      csv << route << "," << c.nproc << "," << c.threads << "," << b.batch << "," << format_number(get(c.nproc, c.threads))
          << "," << (c.nproc > 1 || c.threads == b.threads ? format_number(eff) : std::string()) << "\n";
      if (c.nproc > 1) {
        const std::string n = std::to_string(c.nproc);
        ratios[std::string(route) + "_scaling_efficiency_" + n] = eff;
        ratios[std::string(route) + "_ranks_over_threads_" + n] = get(c.nproc, b.threads) / get(1, c.nproc * b.threads);
        std::cout << std::setprecision(3) << route << ": " << n << " ranks scaling efficiency " << eff << "; " << n << " x "
                  << b.threads << " vs 1 x " << c.nproc * b.threads << " threads: "
                  << get(c.nproc, b.threads) / get(1, c.nproc * b.threads) << "x\n" << std::defaultfloat;
      }
    }
  }
  for (const Config& c : configs)
    ratios["jacond_over_pytorch_" + std::to_string(c.nproc) + "x" + std::to_string(c.threads)] =
        ips.at({c.nproc, c.threads}).first / ips.at({c.nproc, c.threads}).second;
  write_file_atomic(b.out_dir + "/bench_train_dp.csv", csv.str());
  nlohmann::json meta = run_metadata(argc, argv, "bench");
  meta["model"] = b.model.to_json();
  meta["ratios"] = ratios;
  meta["torch_version"] = torch_version;
  write_file_atomic(b.out_dir + "/run.json", meta.dump(2) + "\n");
  std::cout << "wrote " << b.out_dir << "/bench_train_dp.csv and run.json\n";
  return 0;
}

}  // namespace jacond::cli
