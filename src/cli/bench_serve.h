// `pagellm bench serve`, dispatched by the `bench` command (bench_throughput.cpp).
#pragma once

namespace pagellm::cli {

// argv[0] is "pagellm bench serve"; returns the exit code (1 when any request failed).
int run_bench_serve(int argc, char** argv);

}  // namespace pagellm::cli
