#pragma once
// Gemma 3 chat format: <start_of_turn> turns (the official template: the system message is prefixed to the
// first user turn, roles must alternate user/model). Gemma 3 has no tool-call or thinking syntax: the output
// is content.
#include <string>
#include <string_view>

#include "chat/parser.h"
#include "chat/renderer.h"

namespace vatic::chat {

class Gemma3Renderer final : public Renderer {
 public:
  std::string_view name() const override { return "gemma3"; }
  std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                     const RenderOptions& options) const override;
  bool default_think() const override { return false; }
  bool prompt_opens_thinking(std::string_view) const override { return false; }
};

// Content only; an incomplete trailing UTF-8 sequence waits for the next chunk.
class TextParser final : public Parser {
 public:
  ParsedChunk feed(std::string_view chunk) override;
  ParsedChunk finish() override;

 private:
  std::string buf_;
};

}  // namespace vatic::chat
