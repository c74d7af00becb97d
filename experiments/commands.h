// Entry points of the `jacond` subcommands (argv[0] is the subcommand name).
// Each returns the process exit code: 0 success, 1 failure of a check or bad input, 2 usage.
#pragma once

namespace jacond::cli {
int run_block(int argc, char** argv);
int run_verify(int argc, char** argv);
int run_sweep(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_spectrum(int argc, char** argv);
int run_train(int argc, char** argv);
int run_audit(int argc, char** argv);
/// `jacond bench train` (experiments/bench_train.cpp), dispatched by run_bench.
int run_bench_train(int argc, char** argv);
}  // namespace jacond::cli
