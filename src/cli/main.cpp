// Entry point of the `pagellm` binary: dispatches to the registered subcommand and turns errors into
// one-line messages with a non-zero exit code.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "common/error.h"
#include "parallel/rank_threads.h"

namespace pagellm::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

namespace {

void print_usage() {
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  std::fprintf(stderr, "usage: pagellm <command> [options]   (pagellm <command> --help for details)\n\n");
  for (const auto& c : commands) std::fprintf(stderr, "  %-14s %s\n", c.name.c_str(), c.summary.c_str());
}

// Runs one subcommand and turns its errors into one-line messages and an exit code.
int run_command(const Command& command, int argc, char** argv) {
  try {
    return command.run(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints usage and exits 0; a bad flag is a one-line error.
    if (e.get_exit_code() == 0) return 0;
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return 1;
  }
}

}  // namespace
}  // namespace pagellm::cli

int main(int argc, char** argv) {
  using namespace pagellm;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    cli::print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("pagellm %s\n", PAGELLM_VERSION);
    return 0;
  }
  const std::string name = argv[1];
  for (const auto& command : cli::command_registry()) {
    if (command.name != name) continue;
    std::string program = "pagellm " + name;
    argv[1] = program.data();
    const int code = cli::run_command(command, argc - 1, argv + 1);
    // A rank of a parallel group that never came back may hold its GPU: exit handlers could wait
    // on it, so the process ends here (the error has been printed).
    if (parallel::any_ranks_abandoned()) {
      std::fflush(nullptr);
      std::_Exit(code == 0 ? 1 : code);
    }
    return code;
  }
  std::fprintf(stderr, "error: unknown command '%s'\n", name.c_str());
  cli::print_usage();
  return 2;
}
