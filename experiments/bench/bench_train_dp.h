// `jacond bench train --nproc LIST`: data-parallel scaling against PyTorch DDP (bench_train_dp.cpp).
#pragma once

#include <string>
#include <vector>

#include "models/vit/vit.h"

namespace jacond::cli {

struct DataParallelBench {
  models::ViTConfig model;
  std::string skip = "full";
  int64_t batch = 128, steps = 20, warmup = 3;
  int threads = 1;           // per rank
  std::vector<int> nproc;    // rank counts to time
  std::string out_dir, python, script;
  bool skip_python = false;
};

/// Times every configuration, prints the ratios, writes out_dir/bench_train_dp.csv and run.json.
int bench_data_parallel(const DataParallelBench& bench, int argc, char** argv);

}  // namespace jacond::cli
