#include "cli/cli.h"

namespace vatic::cli {

void register_debug_commands(CLI::App& app) {
  auto* debug = app.add_subcommand("debug", "Low-level hooks used by parity checks (stable interface)");
  debug->require_subcommand(1);
  register_debug_tokenize(*debug);
}

}  // namespace vatic::cli
