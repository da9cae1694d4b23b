#include "cli/cli.h"

namespace vatic::cli {

void register_server_commands(CLI::App& app) { (void)app; }

}  // namespace vatic::cli
