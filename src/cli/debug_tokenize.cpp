#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json.h"

namespace vatic::cli {

// vatic debug tokenize TOKENIZER --texts FILE.json
// Prints [{"ids": [...], "ids_with_specials": [...], "decoded": "..."}, ...], one object per input text.
void register_debug_tokenize(CLI::App& debug) {
  struct Options {
    std::string tokenizer;
    std::string texts;
  };
  auto opts = std::make_shared<Options>();
  auto* cmd = debug.add_subcommand("tokenize", "Encode and decode texts with a tokenizer.json (parity hook)");
  cmd->add_option("tokenizer", opts->tokenizer, "tokenizer.json or a model directory")->required();
  cmd->add_option("--texts", opts->texts, "JSON file holding an array of strings")->required();
  cmd->callback([opts] {
    Tokenizer tok = Tokenizer::load(opts->tokenizer);
    json texts;
    try {
      texts = json::parse(read_file(opts->texts));
    } catch (const json::parse_error& e) {
      fail("invalid JSON in {}: {}", opts->texts, e.what());
    }
    if (!texts.is_array()) fail("{} must hold a JSON array of strings", opts->texts);
    json out = json::array();
    for (const auto& t : texts) {
      if (!t.is_string()) fail("{} must hold a JSON array of strings, found {}", opts->texts, t.dump());
      const auto& text = t.get_ref<const std::string&>();
      auto ids = tok.encode(text, false);
      auto with = tok.encode(text, true);
      out.push_back({{"ids", ids}, {"ids_with_specials", with}, {"decoded", tok.decode(ids, false)}});
    }
    std::string s = out.dump(-1, ' ', false, json::error_handler_t::replace);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
  });
}

}  // namespace vatic::cli
