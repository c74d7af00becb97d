// The `jacond` command: dispatches to one subcommand per source file (cmd_*.cpp).
#include <c10/util/Exception.h>

#include <cstring>
#include <exception>
#include <new>
#include <iostream>
#include <string>

#include "analysis/core/crash_trace.h"
#include "analysis/core/heap_policy.h"
#include "analysis/spectral/dense_cost.h"
#include "experiments/cli/cli_common.h"
#include "experiments/cli/commands.h"

namespace {
void print_usage(std::ostream& os) {
  os << "usage: jacond <command> [options]\n\n"
        "commands:\n"
        "  block    condition numbers of one ViT block's Jacobians (from an init or safetensors)\n"
        "  verify   check the papers' claims numerically: prop1 | moments | lemma1 | prop2 | eq6 | eq89 | prop41 | prop42 | all\n"
        "  sweep    grid over alpha/beta/c of the `ours` init -> tidy CSV\n"
        "  train    train a ViT (any skip mode / init, AdamW or SOAP) on Fashion-MNIST, tracking conditioning;\n"
        "           data parallel on c10d/Gloo with --nproc N, torchrun or srun\n"
        "  audit    per-layer conditioning of checkpoints (with a probe batch, or --data-free)\n"
        "  merge    join the outputs of `sweep --shard I/N` or `audit --shard I/N` into one table\n"
        "  bench    timings against the route a user would take otherwise (PyTorch, SciPy svds): dense | lanczos | train\n"
        "  spectrum singular values of one block's Jacobian (dense list or SLQ density) -> CSV\n"
        "  plot     figures (PNG, SVG) of result directories (block, sweep, verify, train, audit, spectrum, bench)\n"
        "  recipe   regenerate a report with its figures: prop1 | prop2 | moments | depth | ... (jacond recipe --help)\n\n"
        "`jacond <command> --help` for the options of each.\n";
}
}  // namespace

int main(int argc, char** argv) {
  jacond::install_crash_trace("jacond");  // a fatal signal prints native frames before the death
  jacond::retain_freed_heap_memory();     // a step's freed tensors stay in the heap for the next (heap_policy.h)
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "jacond " << JACOND_VERSION << "\n";
    return 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "block") return jacond::cli::run_block(argc - 1, argv + 1);
    if (cmd == "verify") return jacond::cli::run_verify(argc - 1, argv + 1);
    if (cmd == "sweep") return jacond::cli::run_sweep(argc - 1, argv + 1);
    if (cmd == "bench") return jacond::cli::run_bench(argc - 1, argv + 1);
    if (cmd == "spectrum") return jacond::cli::run_spectrum(argc - 1, argv + 1);
    if (cmd == "train") return jacond::cli::run_train(argc - 1, argv + 1);
    if (cmd == "audit") return jacond::cli::run_audit(argc - 1, argv + 1);
    if (cmd == "merge") return jacond::cli::run_merge(argc - 1, argv + 1);
    if (cmd == "plot") return jacond::cli::run_plot(argc - 1, argv + 1);
    if (cmd == "recipe") return jacond::cli::run_recipe(argc - 1, argv + 1);
  } catch (const jacond::cli::UsageError& e) {
    std::cerr << "jacond " << cmd << ": error: " << e.what() << "\n";
    return 2;
  } catch (const c10::Error& e) {  // LibTorch's what() carries a C++ backtrace: the message alone
    std::cerr << "jacond " << cmd << ": error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "jacond " << cmd << ": error: out of memory: the sizes asked for need more than this machine's "
              << static_cast<long>(jacond::physical_memory_bytes()) / (1L << 30) << " GiB\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "jacond " << cmd << ": error: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "jacond: unknown command '" << cmd << "' (block | verify | sweep | spectrum | train | audit | merge | bench | plot | recipe; see jacond --help)\n";
  return 2;
}
