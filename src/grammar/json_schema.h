#pragma once
// JSON Schema (and plain JSON mode) to a byte grammar.
//
// Supported: type (one or a list), properties / required / additionalProperties, enum, const, anyOf, oneOf
// (compiled as anyOf, so only when no output can match two alternatives: their kinds of value differ, their
// const/enum sets or number ranges are disjoint, or they are objects told apart by a required discriminator
// property or by required properties the other side cannot have; otherwise refused), allOf with one schema,
// $ref to "#", "#/$defs/..." and any JSON pointer in the document (recursion included), items / prefixItems /
// minItems / maxItems, string pattern (an ECMAScript subset), minLength / maxLength, format (date, time,
// date-time, uuid, email, ipv4), integer and number ranges (minimum, maximum, exclusiveMinimum,
// exclusiveMaximum; number bounds must be whole numbers). Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly, discriminator) are ignored. Any other keyword is
// refused with InvalidInput naming it and where it is.
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
// ARGS follow the tool's parameters schema (any object when the tool has none). Markers are grammar bytes:
// TokenVocab::special_bytes(content) for a special token, the text itself otherwise.
//
// ARGS are a JSON object, or, when key_open is set, key/value elements as GLM-4.7 writes them:
// (key_open KEY key_close value_open VALUE value_close)*, each declared property at most once and in the
// schema's order, the required ones present. VALUE is raw text when the property's declared type is string
// (never holding the text of value_close or close, never reading "null"), JSON otherwise ('<' escaped inside
// its strings); glm47::parse_call reads them back to arguments that validate. Schemas whose values the parser
// could not read back exactly (a string-or-number union, an untyped value that may be a string, top-level
// keywords other than type/properties/required/additionalProperties) are refused; additional properties are
// never written.
struct ToolSpec {
  std::string name;
  ordered_json parameters;
};
struct ToolCallSyntax {
  std::string open, prefix, close;
  std::string key_open = {}, key_close = {}, value_open = {}, value_close = {};
};
Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, const ToolCallSyntax& syntax, int max_calls);
// The content (between the quotes) of a JSON string whose value matches the regular expression `pattern`
// (unanchored unless it starts with ^ / ends with $, as JSON Schema's pattern). Adds helper rules to `g`.
Expr regex_string_content(Grammar& g, std::string_view pattern);

}  // namespace vatic::grammar
