#include "cli/cli.h"

namespace vatic::cli {

void register_debug_tokenize(CLI::App& debug) { (void)debug; }

}  // namespace vatic::cli
