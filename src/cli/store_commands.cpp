#include "cli/cli.h"

namespace vatic::cli {

void register_store_commands(CLI::App& app) { (void)app; }

}  // namespace vatic::cli
