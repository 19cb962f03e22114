// Subcommand registry of the `pagellm` binary. Each src/cli/<name>.cpp registers itself with
// PAGELLM_COMMAND; main() dispatches on argv[1]. A command returns the process exit code and may
// throw pagellm::Error, which main() prints as one line on stderr (exit code 1).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace pagellm::cli {

using CommandFn = std::function<int(int argc, char** argv)>;  // argv[0] is "pagellm <name>"

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string summary, CommandFn fn) {
    command_registry().push_back({std::move(name), std::move(summary), std::move(fn)});
  }
};

}  // namespace pagellm::cli

// Parses a subcommand's flags: --help prints usage on stdout and returns 0 from the command; a bad
// flag prints the error on stderr and returns CLI11's exit code.
#define PAGELLM_PARSE(app, argc, argv)        \
  try {                                       \
    (app).parse((argc), (argv));              \
  } catch (const CLI::ParseError& parse_error) { \
    return (app).exit(parse_error);           \
  }

#define PAGELLM_CONCAT_INNER(a, b) a##b
#define PAGELLM_CONCAT(a, b) PAGELLM_CONCAT_INNER(a, b)
#define PAGELLM_COMMAND(name, summary, fn) \
  static ::pagellm::cli::CommandRegistrar PAGELLM_CONCAT(pagellm_command_, __LINE__)(name, summary, fn)
