#pragma once
// The runner: a child process of the server that owns one loaded model (an Engine) and serves a small JSON-lines
// protocol on 127.0.0.1. The server spawns one per loaded model (`vatic runner --model NAME --port 0`).
//
// Start-up: the model loads on the engine's compute thread; only then does the runner bind its port and print one
// line on stdout: {"status":"ready","port":N,"pid":P} (N is the port picked when --port is 0). A load failure
// prints the error on stderr and exits with status 1.
//
// Routes (all JSON; errors are {"error": msg} with 400 for bad input, 500 otherwise):
//   GET  /health       {"status":"ok"}
//   GET  /status       {"status","model","pid","context_length","drafter","memory":{engine status},
//                       "requests","cancelled","last":{"generated","done_reason","cancelled"}}
//   POST /tokenize     {"content", "add_special"?} -> {"tokens":[...]}
//   POST /detokenize   {"tokens":[...]} -> {"content"}
//   POST /completion   {"prompt": text | "tokens": [...], "add_special"?, "options": {...}, "logprobs"?,
//                       "top_logprobs"?, "format"?, "tool_calls"?, "check_only"?}
//       format: "json" (any JSON object) or a JSON schema; the output is constrained to it (a schema vatic cannot
//       honour is a 400 naming the keyword). tool_calls: {"open", "prefix", "close", "max_calls", "tools": [{"name",
//       "parameters"}]} constrains the output to 1..max_calls tool calls `open prefix NAME {JSON args} close`
//       (markers that are special tokens must be those tokens).
//       Validation (prompt within the context, sampler options) happens before the response starts: a bad request
//       gets 400 with {"error"}. With check_only the answer is {"prompt_tokens": N} and nothing runs.
//       Otherwise the body is JSON lines (application/x-ndjson), one per generated token:
//         {"content": "text that became final", "token": id, "logprob"?: {...}}
//       and a last line {"done": true, "done_reason": "stop"|"length", "content"?: "...", "stats": {...}}
//       or {"error": msg} when generation failed. Stop strings are applied to the text: a possible partial match is
//       held back, and output is cut at a match (the stop string itself is not sent).
//       Options: num_predict, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty,
//       frequency_penalty, seed, stop (array of strings), draft_num_predict (0 turns speculation off),
//       draft_depth (fixed depth), ignore_eos.
//   Cancellation: when the connection goes away, the next write fails and generation stops within one decode
//   step or speculative round; the runner logs it and counts it in /status.
//   POST /shutdown     stops the runner (as SIGTERM does).
#include <cstdint>
#include <string>

namespace vatic::runner {

struct RunnerOptions {
  std::string model;      // a model in the store
  std::string model_dir;  // or a Hugging Face directory (testing)
  std::string host = "127.0.0.1";
  int port = 0;           // 0 = pick a free port
  int64_t num_ctx = 0;    // 0 = the engine's default
  std::string device;     // cpu, cuda, cuda:N; empty = VATIC_DEVICE, else the first GPU, else the CPU
  bool use_draft = true;
  bool exit_on_stdin_eof = false;  // the server keeps our stdin open; EOF means it died
};

// Loads the model and serves until SIGINT/SIGTERM (or stdin EOF). Returns the process exit status.
int run_runner(const RunnerOptions& options);

}  // namespace vatic::runner
