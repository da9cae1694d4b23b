#pragma once
// Prompt renderers: turn a chat (messages + tools + options) into the exact prompt text a model was trained
// on. Each renderer reproduces its model's official chat template without executing Jinja.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/types.h"

namespace vatic::chat {

class Renderer {
 public:
  virtual ~Renderer() = default;

  // The registry name this renderer was made from (e.g. "gemma4-large").
  virtual std::string_view name() const = 0;

  // Renders the prompt, including the format's leading tokens (<bos>, [gMASK]<sop>) as text.
  // Throws InvalidInput for bad input: unknown role, a tool result that cannot be attributed, bad tool calls.
  virtual std::string render(const std::vector<Message>& messages, const std::vector<Tool>& tools,
                             const RenderOptions& options) const = 0;

  // Thinking default when RenderOptions::think is unset.
  virtual bool default_think() const = 0;

  // True when `prompt` (as rendered) ends inside an opened thinking block, so the model's output starts
  // with reasoning text and no opening marker. Feed this to ParserOptions::starts_in_thinking.
  virtual bool prompt_opens_thinking(std::string_view prompt) const = 0;
};

// Renderer names: "gemma4" (same as "gemma4-small"), "gemma4-small" (E2B/E4B template), "gemma4-large"
// (26B/31B template: appends an empty thought channel after the generation prompt when thinking is off),
// "glm-4.7". Throws InvalidInput listing the valid names.
std::unique_ptr<Renderer> make_renderer(std::string_view name);
std::vector<std::string> renderer_names();

}  // namespace vatic::chat
