// vatic serve (the API server) and the hidden vatic runner (one per loaded model, spawned by the server).
#include <cstdlib>

#include "cli/cli.h"
#include "runner/runner.h"
#include "server/server.h"

namespace vatic::cli {

void register_server_commands(CLI::App& app) {
  {
    auto host = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("serve", "Start the API server (ollama- and OpenAI-compatible)");
    cmd->add_option("--host", *host, "Address to listen on, host:port (default $VATIC_HOST or 127.0.0.1:11435)");
    cmd->footer(
        "Environment:\n"
        "  VATIC_HOST               host:port to listen on (default 127.0.0.1:11435)\n"
        "  VATIC_MODELS             model store (default ~/.vatic/models)\n"
        "  VATIC_KEEP_ALIVE         how long models stay loaded after a request (default 5m; 0 = unload, <0 = forever)\n"
        "  VATIC_MAX_LOADED_MODELS  models loaded at once (default 2)\n"
        "  VATIC_MAX_QUEUE          pending requests before 503 (default 64)\n"
        "  VATIC_LOAD_TIMEOUT       model load timeout (default 5m)\n"
        "  VATIC_RUNNER_TIMEOUT     silence from a runner before it is treated as hung (default 10m)\n"
        "  VATIC_DEBUG=1            verbose logging");
    cmd->callback([host] {
      server::ServerOptions o;
      std::string text = *host;
      if (text.empty())
        if (const char* e = std::getenv("VATIC_HOST")) text = e;
      if (!text.empty()) server::parse_host(text, &o.host, &o.port);
      int rc = server::run_server(o);
      if (rc != 0) std::exit(rc);
    });
  }
  {
    auto o = std::make_shared<runner::RunnerOptions>();
    auto no_draft = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("runner", "Serve one loaded model for the server (internal)");
    cmd->group("");  // hidden from help
    cmd->add_option("--model", o->model, "Model name in the store");
    cmd->add_option("--model-dir", o->model_dir, "Hugging Face model directory (testing)");
    cmd->add_option("--port", o->port, "Port on 127.0.0.1 (0 = pick a free one)");
    cmd->add_option("--host", o->host, "Address to bind (default 127.0.0.1)");
    cmd->add_option("--ctx", o->num_ctx, "Context length (0 = default)");
    cmd->add_option("--device", o->device, "cpu, cuda or cuda:N (default: VATIC_DEVICE, else the first GPU)");
    cmd->add_flag("--no-draft", *no_draft, "Do not attach the drafter");
    cmd->add_flag("--exit-on-stdin-eof", o->exit_on_stdin_eof, "Exit when stdin closes (the server died)");
    cmd->callback([o, no_draft] {
      if (o->model.empty() && o->model_dir.empty()) throw CLI::ValidationError("runner", "--model or --model-dir is required");
      o->use_draft = !*no_draft;
      int rc = runner::run_runner(*o);
      std::exit(rc);
    });
  }
}

}  // namespace vatic::cli
