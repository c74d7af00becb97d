// `jacond bench <benchmark>`: dispatches to the benchmarks of experiments/bench/, each of which
// times jacond against the route a user would take otherwise, in the same run (docs/design.md §8).
#include <iostream>
#include <stdexcept>
#include <string>

#include "experiments/bench/bench_dense.h"
#include "experiments/bench/bench_lanczos.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"

namespace jacond::cli {

namespace {
const char* kBenchUsage =
    "usage: jacond bench <benchmark> [options]\n\n"
    "benchmarks:\n"
    "  dense    exact kappa of the dense K_sa vs the PyTorch route (autograd jacobian + svdvals)\n"
    "  lanczos  matrix-free certified kappa brackets at ViT-S/B sizes\n"
    "  train    ViT training images/s vs Python PyTorch, SOAP/AdamW, conditioning-tracking cost\n\n"
    "`jacond bench <benchmark> --help` for the options of each.\n";
}  // namespace

int run_bench(int argc, char** argv) {
  const std::string name = argc >= 2 ? argv[1] : "";
  if (name == "dense") return run_bench_dense(argc - 1, argv + 1);
  if (name == "lanczos") return run_bench_lanczos(argc - 1, argv + 1);
  if (name == "train") return run_bench_train(argc - 1, argv + 1);
  if (name == "--help" || name == "-h") {
    std::cout << kBenchUsage;
    return 0;
  }
  throw UsageError(name.empty() ? "missing benchmark name (dense | lanczos | train; see jacond bench --help)"
                                           : "unknown benchmark '" + name + "' (dense | lanczos | train)");
}

}  // namespace jacond::cli
