// Entry points of the `jacond` subcommands (argv[0] is the subcommand name).
// Each returns the process exit code: 0 success, 1 failure of a check or bad input data, 2 usage
// (an unknown flag, a bad flag value, a missing or unexpected argument: UsageError in
// cli_common.h), 3 a matrix-free bracket that did not converge within its budget (`jacond
// block`: the best brackets are still written).
#pragma once

namespace jacond::cli {
int run_block(int argc, char** argv);
int run_verify(int argc, char** argv);
int run_sweep(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_spectrum(int argc, char** argv);
int run_train(int argc, char** argv);
int run_audit(int argc, char** argv);
/// `jacond merge`: joins sharded sweep/audit outputs (experiments/cli/shard.h).
int run_merge(int argc, char** argv);
/// `jacond plot`: runs the Python package jacond_plots (experiments/cli/cmd_python.cpp).
int run_plot(int argc, char** argv);
/// `jacond recipe`: runs the Python package jacond_recipes (experiments/cli/cmd_python.cpp).
int run_recipe(int argc, char** argv);
/// `jacond bench train` (experiments/bench/bench_train.cpp), dispatched by run_bench.
int run_bench_train(int argc, char** argv);
}  // namespace jacond::cli
