#include "chat/gemma3.h"

#include "chat/text.h"
#include "util/error.h"

namespace vatic::chat {

std::string Gemma3Renderer::render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                                   const RenderOptions& options) const {
  if (!tools.empty())
    throw InvalidInput("the Gemma 3 chat format has no tool calls; send the request without tools");
  for (size_t i = 0; i < messages.size(); i++) detail::check_role(messages[i].role, i);
  std::string out = "<bos>";
  size_t first = 0;
  std::string prefix;
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    prefix = messages[0].content + "\n\n";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); i++) {
    const Message& m = messages[i];
    if (m.role == "tool" || m.role == "system" || m.role == "developer")
      throw InvalidInput(fmt::format(
          "message {}: the Gemma 3 chat format has no {} turns after the first message", i, m.role));
    const bool user_expected = (i - first) % 2 == 0;
    if ((m.role == "user") != user_expected)
      throw InvalidInput(
          fmt::format("message {}: Gemma 3 conversations must alternate user and assistant turns", i));
    out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" +
           (i == first ? prefix : "") + std::string(detail::strip(m.content)) + "<end_of_turn>\n";
  }
  if (options.add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

ParsedChunk TextParser::feed(std::string_view chunk) {
  buf_ += chunk;
  ParsedChunk out;
  size_t n = detail::utf8_complete_len(buf_);
  out.content = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

ParsedChunk TextParser::finish() {
  ParsedChunk out;
  out.content = std::move(buf_);
  buf_.clear();
  return out;
}

}  // namespace vatic::chat
