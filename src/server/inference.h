#pragma once
// One generation request as the API handlers see it: the rendered prompt, runner options, the output parser; and
// the client side of the runner protocol (see runner/runner.h).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/parser.h"
#include "chat/types.h"
#include "server/options.h"
#include "server/scheduler.h"
#include "util/json.h"

namespace vatic {
class ModelStore;
}

namespace vatic::server {

// The renderer name of a plain completion model (Modelfile `RENDERER raw`): no chat format, prompts pass through.
inline constexpr const char* kRawRenderer = "raw";

// What the server knows about a stored model, for rendering and defaults.
struct ModelMeta {
  std::string name;  // canonical "name:tag"
  std::string digest;  // of the manifest: which version of the model
  std::string renderer, parser;
  json params = json::object();  // Modelfile PARAMETERs
  std::string system;
  std::string architecture;
  std::vector<std::string> capabilities;
};
// Throws HttpError 404 when the model does not exist, 400 for a malformed name.
ModelMeta model_meta(const ModelStore& store, const std::string& name);

struct GenRequest {
  std::string model;
  std::string digest;  // ModelMeta::digest
  std::string prompt;
  bool add_special = false;  // rendered prompts carry their own <bos>
  json options = json::object();  // runner options (already merged with the model's PARAMETERs)
  bool logprobs = false;
  int top_logprobs = 0;
  std::optional<double> keep_alive;
  int64_t num_ctx = 0;
  // Structured output: null, "json" (any JSON object) or a JSON schema (the runner compiles it; order kept).
  ordered_json format;
  // Required tool calls (OpenAI tool_choice "required" or a named function): the runner's "tool_calls" grammar spec.
  ordered_json tool_calls;
  // Output parsing (thinking, tool calls); empty parser = raw text.
  std::string parser;
  chat::ParserOptions parser_options;
};

// The thinking setting under structured output: the grammar constrains the output from its first token, so
// thinking is off unless asked for, and asking for it is refused (HttpError 400).
std::optional<bool> think_with_format(const ordered_json& format, std::optional<bool> think);

// The tool-call grammar spec for OpenAI's tool_choice ("required" or {"type": "function", "function": {"name"}}),
// in the syntax of the model's chat format; null for "auto" / "none" / absent. HttpError 400 when it cannot be
// honoured (no tools, an unknown name, a chat format without a tool-call grammar).
ordered_json tool_choice_spec(const ModelMeta& meta, const ordered_json& tool_choice, const std::vector<chat::Tool>& tools);

struct GenPiece {
  std::string content, thinking;
  std::vector<chat::ToolCall> tool_calls;
  json logprobs = json::array();  // runner logprob objects of the tokens behind this piece
  bool empty() const { return content.empty() && thinking.empty() && tool_calls.empty() && logprobs.empty(); }
};

struct GenResult {
  std::string done_reason;  // stop / length
  json stats = json::object();
  int64_t prompt_tokens = 0, prompt_evaluated = 0, prompt_reused = 0, generated = 0;
  double prefill_s = 0, decode_s = 0, load_s = 0;
  bool tool_calls = false;
  bool cancelled = false;  // the client went away
};

// Acquire a runner and check the prompt (before any response is sent): errors are HttpError with their status.
class Generation {
 public:
  Generation(Scheduler& sched, GenRequest req);
  ~Generation();
  // Streams pieces to `on_piece` (return false to stop: the runner is told by closing the connection).
  // Throws HttpError 500 when the runner fails mid-way (the message says why).
  GenResult run(const std::function<bool(const GenPiece&)>& on_piece);
  int64_t prompt_tokens() const { return prompt_tokens_; }
  double load_seconds() const;

 private:
  GenRequest req_;
  std::unique_ptr<Scheduler::Lease> lease_;
  int64_t prompt_tokens_ = 0;
};

// Renders the chat for `meta` (system default from the model); returns the prompt and fills parser options.
std::string render_chat(const ModelMeta& meta, std::vector<chat::Message> messages, const std::vector<chat::Tool>& tools,
                        std::optional<bool> think, chat::ParserOptions* parser_options);

// The model's runner-side statistics for the final chunk: {"speculative": ..., "prompt_cache": ...}.
void add_extension_stats(ordered_json& out, const GenResult& r);

}  // namespace vatic::server
