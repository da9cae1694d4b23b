#include "modelfile/modelfile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "util/error.h"

namespace fs = std::filesystem;
using namespace vatic;

namespace {

const fs::path kFixtures = fs::path(VATIC_FIXTURES_DIR) / "models";

Modelfile parse(const std::string& text) { return parse_modelfile(text, kFixtures); }

// Asserts that parsing fails with InvalidInput whose message contains every fragment.
void expect_error(const std::string& text, std::initializer_list<const char*> fragments) {
  try {
    parse(text);
    ADD_FAILURE() << "expected an error for:\n" << text;
  } catch (const InvalidInput& e) {
    std::string msg = e.what();
    for (const char* f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nmissing: " << f;
  }
}

}  // namespace

TEST(Modelfile, FromRelativeDirectoryResolvesAgainstModelfileFolder) {
  Modelfile m = parse("FROM gemma4-e2b-tiny\n");
  ASSERT_TRUE(m.from.is_path());
  EXPECT_EQ(m.from.path, (kFixtures / "gemma4-e2b-tiny").lexically_normal());
  m = parse("FROM ./gemma4-e2b-tiny/\n");
  EXPECT_EQ(m.from.path, (kFixtures / "gemma4-e2b-tiny").lexically_normal());
  m = parse("from ../models/gemma4-dense-tiny");
  EXPECT_EQ(m.from.path, (kFixtures / "gemma4-dense-tiny").lexically_normal());
}

TEST(Modelfile, FromModelNameStaysAName) {
  Modelfile m = parse("FROM gemma4:e2b\n");
  EXPECT_FALSE(m.from.is_path());
  EXPECT_EQ(m.from.text, "gemma4:e2b");
  m = parse("FROM library/gemma4\n");
  EXPECT_FALSE(m.from.is_path());
}

TEST(Modelfile, TildeExpandsToHome) {
  const char* home = std::getenv("HOME");
  ASSERT_NE(home, nullptr);
  Modelfile m = parse("FROM ~/some/model\n");
  ASSERT_TRUE(m.from.is_path());
  EXPECT_EQ(m.from.path, (fs::path(home) / "some/model").lexically_normal());
}

TEST(Modelfile, DraftResolvesAndMustDifferFromFrom) {
  Modelfile m = parse("FROM ./gemma4-e2b-tiny\nDRAFT gemma4-e2b-tiny-assistant\n");
  ASSERT_TRUE(m.draft.is_path());
  EXPECT_EQ(m.draft.path, (kFixtures / "gemma4-e2b-tiny-assistant").lexically_normal());
  expect_error("FROM ./gemma4-e2b-tiny\nDRAFT ../models/gemma4-e2b-tiny/\n",
               {"line 2", "DRAFT must not reference the same model as FROM"});
  expect_error("FROM base\nDRAFT base\n", {"line 2", "DRAFT must not"});
  expect_error("FROM x\nDRAFT\n", {"line 2", "DRAFT expects"});
}

TEST(Modelfile, CommandsAreCaseInsensitiveAndCommentsSkipped) {
  Modelfile m = parse("# a comment\n  # indented comment\n\nfRoM base\nsystem hello # not a comment\n");
  EXPECT_EQ(m.from.text, "base");
  EXPECT_EQ(m.system, "hello # not a comment");
}

TEST(Modelfile, TypedParameters) {
  Modelfile m = parse(
      "FROM base\n"
      "PARAMETER temperature 0.7\nPARAMETER top_k 40\nPARAMETER top_p 0.9\nPARAMETER min_p 0.05\n"
      "PARAMETER repeat_penalty 1.1\nPARAMETER repeat_last_n 64\nPARAMETER presence_penalty 0.5\n"
      "PARAMETER frequency_penalty -0.5\nPARAMETER seed 42\nPARAMETER num_ctx 8192\nPARAMETER num_predict -1\n"
      "PARAMETER draft_num_predict 4\nPARAMETER stop <end_of_turn>\nPARAMETER stop \"two words\"\n"
      "PARAMETER Temperature 0.8\n");
  EXPECT_DOUBLE_EQ(m.params["temperature"].get<double>(), 0.8);  // last one wins, name case-insensitive
  EXPECT_TRUE(m.params["top_k"].is_number_integer());
  EXPECT_EQ(m.params["top_k"].get<int>(), 40);
  EXPECT_DOUBLE_EQ(m.params["top_p"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(m.params["min_p"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(m.params["repeat_penalty"].get<double>(), 1.1);
  EXPECT_EQ(m.params["repeat_last_n"].get<int>(), 64);
  EXPECT_DOUBLE_EQ(m.params["presence_penalty"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(m.params["frequency_penalty"].get<double>(), -0.5);
  EXPECT_EQ(m.params["seed"].get<int>(), 42);
  EXPECT_EQ(m.params["num_ctx"].get<int>(), 8192);
  EXPECT_EQ(m.params["num_predict"].get<int>(), -1);
  EXPECT_EQ(m.params["draft_num_predict"].get<int>(), 4);
  EXPECT_EQ(m.params["stop"], json::array({"<end_of_turn>", "two words"}));
}

TEST(Modelfile, ParameterErrors) {
  expect_error("FROM b\nPARAMETER temperature hot\n", {"line 2", "temperature", "a number", "hot"});
  expect_error("FROM b\nPARAMETER temperature -1\n", {"line 2", ">= 0"});
  expect_error("FROM b\nPARAMETER top_p 1.5\n", {"line 2", "between 0 and 1"});
  expect_error("FROM b\nPARAMETER min_p -0.1\n", {"line 2", "min_p"});
  expect_error("FROM b\nPARAMETER top_k 4.5\n", {"line 2", "top_k", "integer"});
  expect_error("FROM b\nPARAMETER num_ctx 0\n", {"line 2", "num_ctx"});
  expect_error("FROM b\nPARAMETER seed 12abc\n", {"seed", "integer"});
  expect_error("FROM b\nPARAMETER num_predict -3\n", {"num_predict"});
  expect_error("FROM b\nPARAMETER repeat_last_n -2\n", {"repeat_last_n"});
  expect_error("FROM b\nPARAMETER draft_num_predict 1000\n", {"draft_num_predict", "between 0 and 64"});
  expect_error("FROM b\nPARAMETER repeat_penalty x\n", {"repeat_penalty"});
  expect_error("FROM b\nPARAMETER presence_penalty x\n", {"presence_penalty"});
  expect_error("FROM b\nPARAMETER frequency_penalty x\n", {"frequency_penalty"});
  expect_error("FROM b\nPARAMETER mirostat 1\n", {"line 2", "unknown parameter \"mirostat\"", "temperature", "top_k"});
  expect_error("FROM b\nPARAMETER\n", {"line 2", "PARAMETER expects a name and a value"});
  expect_error("FROM b\nPARAMETER temperature\n", {"line 2", "expects a value"});
  expect_error("FROM b\nPARAMETER stop \"\"\n", {"line 2", "stop"});
}

TEST(Modelfile, MultiLineAndQuotedStrings) {
  Modelfile m = parse(
      "FROM base\n"
      "SYSTEM \"\"\"You are\na \"careful\" assistant.\"\"\"\n"
      "TEMPLATE \"one line with \\\"escapes\\\"\"\n"
      "LICENSE \"\"\"\nApache 2.0\n\"\"\"\n"
      "LICENSE second\n");
  EXPECT_EQ(m.system, "You are\na \"careful\" assistant.");
  EXPECT_EQ(m.template_text, "one line with \"escapes\"");
  ASSERT_EQ(m.licenses.size(), 2u);
  EXPECT_EQ(m.licenses[0], "\nApache 2.0\n");
  EXPECT_EQ(m.licenses[1], "second");
  expect_error("FROM b\nSYSTEM \"\"\"never closed\nstill open\n", {"line 2", "unterminated \"\"\""});
  expect_error("FROM b\nSYSTEM \"never closed\n", {"line 2", "unterminated quoted string"});
  expect_error("FROM b\nSYSTEM \"\"\"x\"\"\" trailing\n", {"line 2", "after the closing"});
  expect_error("FROM b\nSYSTEM \"x\" trailing\n", {"line 2", "after the closing quote"});
}

TEST(Modelfile, RendererParserMessagesRequires) {
  Modelfile m = parse(
      "FROM base\nRENDERER gemma4\nPARSER glm-4.7\nMESSAGE user Hi there\nMESSAGE assistant \"\"\"Hello!\nHow can I "
      "help?\"\"\"\nREQUIRES 0.1.0\n");
  EXPECT_EQ(m.renderer, "gemma4");
  EXPECT_EQ(m.parser, "glm-4.7");
  ASSERT_EQ(m.messages.size(), 2u);
  EXPECT_EQ(m.messages[0], (ModelfileMessage{"user", "Hi there"}));
  EXPECT_EQ(m.messages[1], (ModelfileMessage{"assistant", "Hello!\nHow can I help?"}));
  EXPECT_EQ(m.requires_version, "0.1.0");
  expect_error("FROM b\nMESSAGE robot hi\n", {"line 2", "MESSAGE expects a role", "robot"});
  expect_error("FROM b\nRENDERER has space\n", {"line 2", "RENDERER expects a chat format name"});
  expect_error("FROM b\nPARSER\n", {"line 2", "PARSER expects"});
  expect_error("FROM b\nREQUIRES soon\n", {"line 2", "REQUIRES expects a version"});
  expect_error("FROM b\nREQUIRES 1.2.3.4\n", {"line 2", "REQUIRES"});
  expect_error("FROM b\nLICENSE\n", {"line 2", "LICENSE expects"});
}

TEST(Modelfile, StructuralErrors) {
  expect_error("SYSTEM hi\n", {"no FROM line"});
  expect_error("", {"no FROM line"});
  expect_error("FROM a\nFROM b\n", {"line 2", "FROM is given twice", "line 1"});
  expect_error("FROM a\nSYSTEM x\nSYSTEM y\n", {"line 3", "SYSTEM is given twice"});
  expect_error("FROM a\nADAPTER ./lora\n", {"line 2", "unknown command \"ADAPTER\"", "FROM", "DRAFT", "PARAMETER",
                                            "SYSTEM", "TEMPLATE", "RENDERER", "PARSER", "MESSAGE", "LICENSE", "REQUIRES"});
  expect_error("FROM\n", {"line 1", "FROM expects a safetensors directory or a model name"});
}

TEST(Modelfile, WriterRoundTrips) {
  Modelfile m = parse(
      "FROM ./gemma4-e2b-tiny\nDRAFT ./gemma4-e2b-tiny-assistant\nTEMPLATE {{ .Prompt }}\n"
      "SYSTEM \"\"\"multi\nline \"quoted\" text\"\"\"\nRENDERER gemma4\nPARSER gemma4\n"
      "PARAMETER temperature 0.25\nPARAMETER top_k 20\nPARAMETER stop <eot>\nPARAMETER stop \" padded \"\n"
      "MESSAGE user hi\nMESSAGE assistant \"ends with a quote\\\"\"\nLICENSE \"\"\"MIT\n\"\"\"\nREQUIRES 0.1.0\n");
  std::string text = format_modelfile(m);
  Modelfile again = parse_modelfile(text, "/nonexistent/elsewhere");
  EXPECT_EQ(again, m) << text;
  EXPECT_NE(text.find("FROM " + (kFixtures / "gemma4-e2b-tiny").lexically_normal().string()), std::string::npos);
  EXPECT_NE(text.find("PARAMETER temperature 0.25"), std::string::npos);
  EXPECT_NE(text.find("PARAMETER top_k 20"), std::string::npos);
}

TEST(Modelfile, ReadFromFileUsesItsFolder) {
  fs::path dir = fs::temp_directory_path() / ("vatic-modelfile-" + std::to_string(::getpid()));
  fs::create_directories(dir / "weights");
  {
    std::ofstream(dir / "Modelfile") << "FROM ./weights\nPARAMETER num_ctx 128\n";
  }
  Modelfile m = read_modelfile(dir / "Modelfile");
  EXPECT_EQ(m.from.path, (dir / "weights").lexically_normal());
  EXPECT_THROW(read_modelfile(dir / "missing"), NotFound);
  fs::remove_all(dir);
}

// Found by fuzzing: a carriage return in a text value was taken for part of a line ending when read back.
TEST(Modelfile, CarriageReturnsInTextSurviveFormatting) {
  Modelfile m;
  m.from.text = "base";
  m.system = "line one\r\nline two\r\r\n";
  m.template_text = "a\rb";
  m.params["stop"] = json::array({"x\ry"});
  Modelfile back = parse_modelfile(format_modelfile(m), "/");
  EXPECT_EQ(back.system, m.system);
  EXPECT_EQ(back.template_text, m.template_text);
  EXPECT_EQ(back.params, m.params);
  EXPECT_EQ(parse_modelfile("FROM base\nSYSTEM \"a\\rb\"\n", "/").system, "a\rb");
}
