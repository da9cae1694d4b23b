#pragma once
// Llama 3.1+ chat format: the header renderer (the official Llama 3.1 template, tools in the first user
// message) and the output parser for its JSON tool calls.
//
// Prompt: <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n[Environment: ipython\n]Cutting
// Knowledge
//         Date: December 2023\nToday Date: 26 Jul 2024\n\n[system text]<|eot_id|><|start_header_id|>user
//         <|end_header_id|>\n\n[tool instructions and JSON schemas\n\n]text<|eot_id|>
//         <|start_header_id|>assistant<|end_header_id|>\n\n{"name": ..., "parameters": {...}}<|eot_id|>
//         <|start_header_id|>ipython<|end_header_id|>\n\n[tool result]<|eot_id|><|start_header_id|>assistant
//         <|end_header_id|>\n\n
// Model output: content, or a tool call as a JSON object {"name": ..., "parameters": {...}} (optionally after
// <|python_tag|>; several separated by ";").
#include <string>
#include <string_view>

#include "chat/parser.h"
#include "chat/renderer.h"

namespace vatic::chat {

class Llama3Renderer final : public Renderer {
 public:
  std::string_view name() const override { return "llama3"; }
  std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                     const RenderOptions& options) const override;
  bool default_think() const override { return false; }
  bool prompt_opens_thinking(std::string_view) const override { return false; }
};

class Llama3Parser final : public Parser {
 public:
  explicit Llama3Parser(const ParserOptions& options);
  ParsedChunk feed(std::string_view chunk) override;
  ParsedChunk finish() override;

 private:
  enum class State { Start, MaybeCall, Content };
  bool tools_ = false;
  State state_ = State::Start;
  std::string buf_;
};

}  // namespace vatic::chat
