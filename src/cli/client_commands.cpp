// vatic run / ps / stop: the commands that talk to a running `vatic serve` over its ollama-compatible HTTP API.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include "cli/cli.h"
#include "cli/client_api.h"
#include "cli/client_format.h"
#include "cli/client_interactive.h"
#include "cli/client_session.h"
#include "util/error.h"

namespace vatic::cli {
namespace {

// "5m", "1h30m", "0", "-1", "300": numbers go as seconds, the rest as a duration string (the server parses both).
json keep_alive_value(const std::string& text) {
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && *end == '\0') {
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
    return d;
  }
  return text;
}

// --think, --think=false, --think=high
json think_value(const std::string& text) {
  if (text.empty() || text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  if (text == "low" || text == "medium" || text == "high" || text == "max") return text;
  throw InvalidInput(fmt::format("--think: '{}' is not true, false, low, medium, high or max", text));
}

struct RunArgs {
  std::string model;
  std::vector<std::string> prompt;
  bool verbose = false, nothink = false, hide_thinking = false, nowordwrap = false, interactive = false;
  std::string think, format, keep_alive;
};

void run_command(const RunArgs& a) {
  ApiClient client;
  Session s;
  s.model = a.model;
  s.verbose = a.verbose;
  s.hide_thinking = a.hide_thinking;
  s.word_wrap = !a.nowordwrap;
  s.format = a.format;
  if (!a.keep_alive.empty()) s.keep_alive = keep_alive_value(a.keep_alive);
  if (!a.think.empty()) s.think = think_value(a.think);
  if (a.nothink) s.think = false;

  std::string prompt;
  bool have_prompt = !a.prompt.empty();
  const bool stdin_tty = ::isatty(STDIN_FILENO) != 0;
  if (!stdin_tty && !a.interactive) {
    // like ollama: piped input comes first, then the prompt words
    std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (!in.empty()) {
      prompt = in;
      have_prompt = true;
    }
    s.word_wrap = false;
  }
  for (const auto& w : a.prompt) {
    if (!prompt.empty()) prompt += " ";
    prompt += w;
  }

  if (!stdin_tty && !a.interactive && !have_prompt)
    throw InvalidInput("no prompt: give one after the model name or on stdin (or use --interactive)");

  s.show = client.post("/api/show", {{"model", s.model}});
  s.use_chat = has_chat_format(s.show);

  if (have_prompt && !a.interactive) {
    install_interrupt_handler();
    if (run_turn(client, s, prompt, false) == StreamEnd::cancelled) std::exit(130);
    return;
  }
  int rc = run_interactive(client, s, have_prompt ? prompt : std::string(), stdin_tty && !a.interactive);
  if (rc != 0) std::exit(rc);
}

}  // namespace

void register_client_commands(CLI::App& app) {
  // run
  auto ra = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand("run", "Run a model: answer a prompt, or chat interactively");
  run->add_option("model", ra->model, "Model name")->required();
  run->add_option("prompt", ra->prompt, "Prompt (otherwise read from stdin when it is not a terminal, or chat)");
  run->add_flag("--verbose", ra->verbose, "Show timings, rates and speculative-decoding stats after each answer");
  run->add_flag("--think", ra->think,
                "Enable thinking: --think, --think=false, or a level --think=low|medium|high|max");
  run->add_flag("--nothink", ra->nothink, "Disable thinking");
  run->add_flag("--hidethinking", ra->hide_thinking, "Think (if the model does) but do not show the thinking");
  run->add_option("--format", ra->format, "Response format: json, or a JSON schema object");
  run->add_option("--keepalive", ra->keep_alive, "How long the model stays loaded after the request (e.g. 5m, 1h, 0, -1)");
  run->add_flag("--nowordwrap", ra->nowordwrap, "Do not wrap long lines at word boundaries");
  run->add_flag("--interactive", ra->interactive,
                "Chat interactively even when stdin is not a terminal (reads commands and prompts line by line)");
  run->callback([ra]() { run_command(*ra); });

  // ps
  auto* ps = app.add_subcommand("ps", "List running models");
  ps->callback([]() {
    ApiClient client;
    json res = client.get("/api/ps");
    std::fputs(ps_table(res, std::chrono::system_clock::now()).c_str(), stdout);
  });

  // stop
  auto stop_names = std::make_shared<std::vector<std::string>>();
  auto* stop = app.add_subcommand("stop", "Stop (unload) a running model");
  stop->add_option("model", *stop_names, "Model name(s)")->required();
  stop->callback([stop_names]() {
    ApiClient client;
    for (const auto& name : *stop_names) {
      try {
        client.stream("/api/generate", {{"model", name}, {"prompt", ""}, {"keep_alive", 0}},
                      [](const json&) { return true; });
      } catch (const Error& e) {
        std::string msg = e.what();
        if (msg.find("not found") != std::string::npos)
          throw Error(fmt::format("couldn't find model \"{}\" to stop", name));
        throw;
      }
    }
  });
}

}  // namespace vatic::cli
