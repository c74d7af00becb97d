// `jacond bench lanczos` (experiments/bench/bench_lanczos.cpp), dispatched from cmd_bench.cpp.
#pragma once

namespace jacond::cli {
int run_bench_lanczos(int argc, char** argv);
}  // namespace jacond::cli
