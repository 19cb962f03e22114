// Entry point of the `pagellm` binary: dispatches to the registered subcommand and turns errors into
// one-line messages with a non-zero exit code.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "common/error.h"

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
    try {
      return command.run(argc - 1, argv + 1);
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
  std::fprintf(stderr, "error: unknown command '%s'\n", name.c_str());
  cli::print_usage();
  return 2;
}
