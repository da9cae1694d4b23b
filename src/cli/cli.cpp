#include "cli/cli.h"

#include <cstdio>
#include <exception>

#include "util/error.h"

#ifndef VATIC_VERSION
#define VATIC_VERSION "0.1.0"
#endif

namespace vatic::cli {

int main(int argc, char** argv) {
  CLI::App app{"vatic: a local LLM runtime with multi-token-prediction speculative decoding"};
  app.set_version_flag("-v,--version", "vatic version " VATIC_VERSION);
  app.require_subcommand(1);
  register_debug_commands(app);
  register_store_commands(app);
  register_server_commands(app);
  register_bench_commands(app);
  register_client_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "Error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace vatic::cli
