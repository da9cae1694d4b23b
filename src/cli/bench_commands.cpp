#include "cli/cli.h"

namespace vatic::cli {

void register_bench_commands(CLI::App& app) { (void)app; }

}  // namespace vatic::cli
