// `pagellm bench latency`, dispatched by the `bench` command (bench_throughput.cpp).
#pragma once

namespace pagellm::cli {

// argv[0] is "pagellm bench latency"; returns the exit code.
int run_bench_latency(int argc, char** argv);

}  // namespace pagellm::cli
