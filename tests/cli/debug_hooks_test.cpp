// The `vatic debug` hooks as other checks drive them: output formats, and clear errors for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "formats/safetensors.h"
#include "ops/ops.h"
#include "util/json.h"

namespace vatic {
namespace {

struct Result {
  int status;
  std::string out;
};

Result vatic(const std::string& args) {
  std::string cmd = std::string(VATIC_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string fixture(const std::string& name) { return std::string(VATIC_FIXTURES_DIR) + "/models/" + name; }

TEST(DebugHooks, LogitsWritesOneF32TensorOfTokensByVocabulary) {
  auto out = std::filesystem::temp_directory_path() / ("vatic-logits-" + std::to_string(::getpid()) + ".safetensors");
  Result r = vatic("debug logits " + fixture("gemma4-dense-tiny") + " --tokens 2,17,301 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  SafetensorsFile f(out);
  ASSERT_EQ(f.names(), std::vector<std::string>{"logits"});
  Tensor t = f.get("logits");
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.shape(), (Shape{3, 512}));
  std::filesystem::remove(out);
}

TEST(DebugHooks, GenerateAndDraftsPrintJson) {
  Result g = vatic("debug generate " + fixture("gemma4-e2b-tiny") + " --tokens 2,507,459,372,289 --max-tokens 5 --draft " +
                fixture("gemma4-e2b-tiny-assistant") + " --draft-depth 2");
  ASSERT_EQ(g.status, 0) << g.out;
  json j = json::parse(g.out);
  // The fixture's greedy continuation of this prompt begins 89, 75, 75, 75, 255.
  EXPECT_EQ(j["tokens"], json::array({89, 75, 75, 75, 255}));
  EXPECT_TRUE(j["stats"].contains("speculative"));
  Result d = vatic("debug drafts " + fixture("gemma4-e2b-tiny") + " " + fixture("gemma4-e2b-tiny-assistant") +
                " --tokens 2,507,459,372,289,89 --steps 4");
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(json::parse(d.out)["drafts"], json::array({217, 294, 482, 294}));  // the reference's first round
}

TEST(DebugHooks, BadInputGetsAClearErrorAndExitCode1) {
  Result a = vatic("debug generate " + fixture("gemma4-dense-tiny") + " --tokens 2,x,3 --max-tokens 2");
  EXPECT_EQ(a.status, 1);
  EXPECT_NE(a.out.find("Error: --tokens: \"x\" is not a token id"), std::string::npos) << a.out;
  Result b = vatic("debug generate " + fixture("gemma4-dense-tiny") + " --tokens 2,99999 --max-tokens 2");
  EXPECT_EQ(b.status, 1);
  EXPECT_NE(b.out.find("outside the vocabulary"), std::string::npos) << b.out;
  Result c = vatic("debug logits /nonexistent-model-dir --tokens 2 --out /tmp/x.safetensors");
  EXPECT_EQ(c.status, 1);
  EXPECT_NE(c.out.find("Error:"), std::string::npos) << c.out;
  Result d = vatic("debug drafts " + fixture("gemma4-dense-tiny") + " " + fixture("gemma4-e2b-tiny-assistant") +
                " --tokens 2,5,6");
  EXPECT_EQ(d.status, 1);  // a drafter for another target (hidden sizes differ)
  EXPECT_NE(d.out.find("Error:"), std::string::npos) << d.out;
}

}  // namespace
}  // namespace vatic
