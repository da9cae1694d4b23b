#pragma once
// Modelfile: the recipe `vatic create` builds a model from.
//
//   # comment (whole lines only)
//   FROM ./gemma-4-e2b-it              a safetensors directory or an existing model name (required)
//   DRAFT ./gemma-4-e2b-it-assistant   the MTP drafter: a safetensors directory or a model name
//   PARAMETER temperature 0.7          typed and validated; `stop` may repeat
//   SYSTEM """You are terse."""        """ strings may span lines
//   TEMPLATE / RENDERER / PARSER / LICENSE / REQUIRES / MESSAGE <role> <content>
//
// Commands are case-insensitive. Arguments are the rest of the line, a "quoted string" (\" \\ \n escapes) or a
// """triple-quoted""" block. Relative paths (and ~) are resolved against the Modelfile's folder. Every error is a
// vatic::InvalidInput that starts with "Modelfile line N:" and says what was expected.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.h"

namespace vatic {

// What FROM or DRAFT names: a local directory (path set, absolute) or a model in the store (name set).
struct ModelRef {
  std::string text;             // as written in the Modelfile
  std::filesystem::path path;   // absolute, lexically normal; empty when this is a model name
  bool is_path() const { return !path.empty(); }
  bool empty() const { return text.empty(); }
  // Two references are equal when they name the same directory or the same model, however written.
  bool operator==(const ModelRef& o) const { return is_path() ? path == o.path : (!o.is_path() && text == o.text); }
};

struct ModelfileMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
  bool operator==(const ModelfileMessage&) const = default;
};

struct Modelfile {
  ModelRef from;
  ModelRef draft;
  // Typed PARAMETERs: numbers as JSON numbers (integers for the integer ones), `stop` as an array of strings.
  json params = json::object();
  std::string system, template_text, renderer, parser, requires_version;
  std::vector<std::string> licenses;  // LICENSE may repeat
  std::vector<ModelfileMessage> messages;

  bool operator==(const Modelfile&) const = default;
};

// Parses Modelfile text. `base_dir` is the folder relative paths are resolved against.
// Throws vatic::InvalidInput "Modelfile line N: ..." on any error.
Modelfile parse_modelfile(std::string_view text, const std::filesystem::path& base_dir);
// Reads and parses a Modelfile (NotFound when the file does not exist).
Modelfile read_modelfile(const std::filesystem::path& path);

// An equivalent Modelfile text: parse_modelfile(format_modelfile(m), dir) == m for absolute paths and names.
std::string format_modelfile(const Modelfile& m);

// PARAMETER names with their types, for messages and for the server's option validation.
const std::vector<std::string>& modelfile_parameter_names();
// Validates and converts one PARAMETER value; throws InvalidInput (without a line prefix) when invalid.
json parse_parameter_value(const std::string& name, const std::string& value);
// Modelfile commands, upper case, in the order they are documented.
const std::vector<std::string>& modelfile_commands();

}  // namespace vatic
