// `vatic debug ...`: low-level hooks that parity checks drive. Their flags and output formats are a stable
// interface: change them only compatibly.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "cli/model_arg.h"
#include "engine/generator.h"
#include "formats/safetensors.h"
#include "models/loader.h"
#include "ops/ops.h"
#include "util/json.h"

namespace vatic::cli {

namespace {

std::shared_ptr<std::string> add_device_option(CLI::App* cmd) {
  auto device = std::make_shared<std::string>();
  cmd->add_option("--device", *device, "cpu, cuda or cuda:N (default: VATIC_DEVICE, else the first GPU, else the CPU)");
  return device;
}

// The device to run on, with this (the only compute) thread bound to it.
Device bind_device(const std::string& text) {
  Device d = resolve_device(text);
  backend_for(d).bind_thread();
  return d;
}

std::vector<int32_t> parse_tokens(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string part = s.substr(i, j - i);
    try {
      size_t used = 0;
      long v = std::stol(part, &used);
      if (used != part.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(part);
      out.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw InvalidInput(fmt::format("--tokens: \"{}\" is not a token id (expected comma-separated integers)", part));
    }
    i = j + 1;
  }
  if (out.empty()) throw InvalidInput("--tokens: no token ids given");
  return out;
}

}  // namespace

void register_debug_commands(CLI::App& app) {
  auto* debug = app.add_subcommand("debug", "Low-level hooks used by parity checks (stable interface)");
  debug->require_subcommand(1);
  debug->footer(
      "Hooks:\n"
      "  debug logits MODEL --tokens 2,17,301 --out FILE\n"
      "      One forward over the tokens; writes a safetensors file with one tensor `logits`, F32 [T, V].\n"
      "  debug generate MODEL --tokens ... --max-tokens N [--draft DRAFT] [--draft-depth K]\n"
      "                 [--temperature T --seed S --top-k K --top-p P --min-p P ...]\n"
      "      Decoding with the KV cache (greedy unless --temperature > 0); prints {\"tokens\": [...], \"stats\": {...}}.\n"
      "  debug drafts TARGET DRAFT --tokens ... [--steps 4]\n"
      "      The target processes all tokens but the last (the token it just chose); prints {\"drafts\": [...]}.\n"
      "  debug tokenize TOKENIZER --texts FILE.json\n"
      "      Prints [{\"ids\": [...], \"ids_with_specials\": [...], \"decoded\": \"...\"}, ...].\n"
      "MODEL is a Hugging Face model directory or the name of a model in the store.");

  {
    auto* cmd = debug->add_subcommand("logits", "Write the logits of one forward over --tokens to a safetensors file");
    auto model = std::make_shared<std::string>();
    auto tokens = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto chunk = std::make_shared<int64_t>(0);
    cmd->add_option("MODEL", *model, "Model directory or store name")->required();
    cmd->add_option("--tokens", *tokens, "Comma-separated token ids")->required();
    cmd->add_option("--out", *out, "Output safetensors file")->required();
    cmd->add_option("--chunk", *chunk, "Prefill chunk size (0 = one pass)");
    auto device = add_device_option(cmd);
    cmd->callback([=] {
      auto ids = parse_tokens(*tokens);
      ModelSource src = resolve_model_arg(*model);
      auto lm = load_language_model(src, bind_device(*device));
      auto st = lm->new_state();
      Generator gen(*lm, nullptr);
      Tensor logits = gen.prefill_logits(*st, ids, *chunk);
      write_safetensors(*out, {{"logits", ops::to_host(logits)}});
    });
  }

  {
    auto* cmd = debug->add_subcommand("generate", "Decode with the KV cache; prints tokens and stats as JSON");
    auto model = std::make_shared<std::string>();
    auto draft = std::make_shared<std::string>();
    auto tokens = std::make_shared<std::string>();
    auto opts = std::make_shared<GenerateOptions>();
    auto depth = std::make_shared<int>(-1);
    cmd->add_option("MODEL", *model, "Model directory or store name")->required();
    cmd->add_option("--tokens", *tokens, "Comma-separated prompt token ids")->required();
    cmd->add_option("--max-tokens", opts->max_tokens, "Tokens to generate")->required();
    cmd->add_option("--draft", *draft, "Drafter (model directory or store name) for speculative decoding");
    cmd->add_option("--draft-depth", *depth, "Fixed draft depth K (adaptive when not given)");
    cmd->add_option("--max-draft-depth", opts->max_draft_depth, "Upper bound of the adaptive draft depth");
    cmd->add_option("--chunk", opts->prefill_chunk, "Prefill chunk size");
    cmd->add_option("--temperature", opts->sampling.temperature, "Sampling temperature (0 = greedy)");
    cmd->add_option("--seed", opts->sampling.seed, "Random seed");
    cmd->add_option("--top-k", opts->sampling.top_k, "Top-k");
    cmd->add_option("--top-p", opts->sampling.top_p, "Top-p");
    cmd->add_option("--min-p", opts->sampling.min_p, "Min-p");
    cmd->add_option("--repeat-penalty", opts->sampling.repeat_penalty, "Repeat penalty");
    cmd->add_option("--repeat-last-n", opts->sampling.repeat_last_n, "Repeat window");
    cmd->add_option("--presence-penalty", opts->sampling.presence_penalty, "Presence penalty");
    cmd->add_option("--frequency-penalty", opts->sampling.frequency_penalty, "Frequency penalty");
    cmd->add_flag("--ignore-eos", opts->ignore_eos, "Do not stop at end-of-sequence tokens");
    auto device = add_device_option(cmd);
    cmd->callback([=] {
      auto ids = parse_tokens(*tokens);
      ModelSource src = resolve_model_arg(*model);
      auto lm = load_language_model(src, bind_device(*device));
      std::unique_ptr<Drafter> drafter;
      if (!draft->empty()) {
        ModelSource ds = resolve_model_arg(*draft);
        drafter = load_drafter(*lm, &ds);
      } else {
        // The store's attached drafter, or MTP layers inside the checkpoint itself (null when neither).
        drafter = load_drafter(*lm, src.draft.get());
      }
      GenerateOptions o = *opts;
      o.draft_depth = *depth;
      Generator gen(*lm, drafter.get());
      auto st = lm->new_state();
      std::vector<int32_t> out;
      GenerateStats stats = gen.generate(*st, ids, o, [&](const TokenEvent& ev) {
        out.push_back(ev.token);
        return true;
      });
      json j;
      j["tokens"] = out;
      j["stats"] = stats.to_json();
      std::cout << j.dump() << std::endl;
    });
  }

  {
    auto* cmd = debug->add_subcommand("drafts", "Greedy draft steps of a drafter after the target read --tokens");
    auto target = std::make_shared<std::string>();
    auto draft = std::make_shared<std::string>();
    auto tokens = std::make_shared<std::string>();
    auto steps = std::make_shared<int>(4);
    cmd->add_option("TARGET", *target, "Target model directory or store name")->required();
    cmd->add_option("DRAFT", *draft, "Drafter directory or store name")->required();
    cmd->add_option("--tokens", *tokens, "Comma-separated token ids; the last is the target's latest choice")->required();
    cmd->add_option("--steps", *steps, "Draft steps")->check(CLI::Range(1, 64));
    auto device = add_device_option(cmd);
    cmd->callback([=] {
      auto ids = parse_tokens(*tokens);
      if (ids.size() < 2) throw InvalidInput("--tokens: need at least two tokens (context and the chosen token)");
      ModelSource src = resolve_model_arg(*target);
      ModelSource ds = resolve_model_arg(*draft);
      auto lm = load_language_model(src, bind_device(*device));
      auto drafter = load_drafter(*lm, &ds);
      auto st = lm->new_state();
      std::vector<int32_t> ctx(ids.begin(), ids.end() - 1);
      ForwardResult r = lm->forward(*st, ctx, 1);
      std::vector<int32_t> drafts;
      drafter->draft(*st, ids.back(), r.hidden, *steps, [&](const Tensor& logits) {
        int32_t t = argmax(ops::to_vector(logits).data(), logits.dim(-1));
        drafts.push_back(t);
        return t;
      });
      std::cout << json{{"drafts", drafts}}.dump() << std::endl;
    });
  }

  register_debug_tokenize(*debug);
}

}  // namespace vatic::cli
