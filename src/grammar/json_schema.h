#pragma once
// JSON Schema (and plain JSON mode) to a byte grammar.
//
// Supported: type (one or a list), properties / required / additionalProperties, enum, const, anyOf, oneOf
// (as anyOf: exact when the alternatives are disjoint), allOf with one schema, $ref to "#", "#/$defs/..." and
// any JSON pointer in the document (recursion included), items / prefixItems / minItems / maxItems, string
// pattern (an ECMAScript subset), minLength / maxLength, format (date, time, date-time, uuid, email, ipv4),
// integer and number ranges (minimum, maximum, exclusiveMinimum, exclusiveMaximum; number bounds must be
// whole numbers). Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, discriminator) are ignored. Any other keyword is refused with InvalidInput naming it
// and where it is.
//
// Choices that narrow the language (every output still validates): properties come in the schema's order, an
// object without additionalProperties gets no extra properties, whitespace is "", " " or one or two newlines
// followed by at most 20 spaces or tabs, numbers have at most 16 integer and 15 fraction digits.
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "util/json.h"

namespace vatic::grammar {

// Throws InvalidInput for an invalid schema or one using what vatic cannot honour.
Grammar json_schema_grammar(const ordered_json& schema);
// JSON mode: any JSON object.
Grammar json_object_grammar();

// Tool calls in a chat format's syntax: one to `max_calls` calls, each `open prefix NAME ARGS close`, where
// ARGS is a JSON object following the tool's parameters schema (any object when the tool has none). open and
// close are grammar bytes: TokenVocab::special_bytes(content) for a special token, the text itself otherwise.
struct ToolSpec {
  std::string name;
  ordered_json parameters;
};
struct ToolCallSyntax {
  std::string open, prefix, close;
};
Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, const ToolCallSyntax& syntax, int max_calls);
// The content (between the quotes) of a JSON string whose value matches the regular expression `pattern`
// (unanchored unless it starts with ^ / ends with $, as JSON Schema's pattern). Adds helper rules to `g`.
Expr regex_string_content(Grammar& g, std::string_view pattern);

}  // namespace vatic::grammar
