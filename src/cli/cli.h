#pragma once
#include <CLI/CLI.hpp>

namespace vatic::cli {

int main(int argc, char** argv);

// Each command family registers itself on the app (one file each, so they can grow independently).
void register_debug_commands(CLI::App& app);   // debug_commands.cpp: vatic debug logits|generate|drafts
void register_debug_tokenize(CLI::App& debug); // debug_tokenize.cpp: vatic debug tokenize
void register_store_commands(CLI::App& app);   // store_commands.cpp: create, list, show, rm, cp
void register_server_commands(CLI::App& app);  // server_commands.cpp: serve, runner, run, ps, stop
void register_bench_commands(CLI::App& app);   // bench_commands.cpp: bench
void register_client_commands(CLI::App& app);

}  // namespace vatic::cli
