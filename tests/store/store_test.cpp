#include "store/store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "formats/model_source.h"
#include "formats/safetensors.h"
#include "models/loader.h"
#include "ops/ops.h"
#include "quant/quantize.h"
#include "store/sha256.h"
#include "util/error.h"
#include "util/files.h"

namespace fs = std::filesystem;
using namespace vatic;

namespace {

const fs::path kModels = fs::path(VATIC_FIXTURES_DIR) / "models";

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = fs::temp_directory_path() /
           fmt::format("vatic-store-{}-{}-{}", ::getpid(), ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       counter++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    store_ = std::make_unique<ModelStore>(dir_ / "models");
  }
  void TearDown() override { fs::remove_all(dir_); }

  Modelfile mf(const std::string& text) { return parse_modelfile(text, kModels); }
  ModelInfo create(const std::string& name, const std::string& text, const std::string& q = "",
                   const std::string& dq = "") {
    CreateOptions o;
    o.quantize = q;
    o.draft_quantize = dq;
    return store_->create(name, mf(text), o);
  }
  // Every file of the store (relative path -> sha256), to prove an operation changed nothing.
  std::map<std::string, std::string> snapshot() const {
    std::map<std::string, std::string> out;
    std::error_code ec;
    if (!fs::exists(store_->root())) return out;
    for (const auto& e : fs::recursive_directory_iterator(store_->root()))
      if (e.is_regular_file()) out[e.path().lexically_relative(store_->root()).string()] = sha256_file(e.path());
    return out;
  }
  size_t blob_count() const {
    size_t n = 0;
    std::error_code ec;
    if (!fs::is_directory(store_->root() / "blobs")) return 0;
    for (const auto& e : fs::directory_iterator(store_->root() / "blobs")) n += e.path().filename().string().starts_with("sha256-");
    return n;
  }
  // Every manifest names existing blobs whose content matches their digest.
  void expect_consistent() const {
    std::error_code ec;
    if (!fs::is_directory(store_->root() / "manifests")) return;
    for (const auto& e : fs::recursive_directory_iterator(store_->root() / "manifests")) {
      if (!e.is_regular_file() || e.path().filename().string().starts_with(".tmp-")) continue;
      Manifest m = Manifest::from_json(json::parse(read_file(e.path())));
      std::vector<ManifestLayer> all = m.layers;
      all.push_back(m.config);
      for (const auto& l : all) {
        fs::path p = store_->blob_path(l.digest);
        ASSERT_TRUE(fs::exists(p)) << e.path() << " names missing blob " << l.digest;
        EXPECT_EQ("sha256:" + sha256_file(p), l.digest) << p;
        EXPECT_EQ(fs::file_size(p), l.size);
      }
    }
  }
  // A modified copy of a fixture directory.
  fs::path copy_fixture(const std::string& name, const std::string& as) {
    fs::path d = dir_ / as;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(kModels / name)) fs::copy_file(e.path(), d / e.path().filename());
    return d;
  }
  void edit_config(const fs::path& d, const std::function<void(json&)>& f) {
    json j = json::parse(read_file(d / "config.json"));
    f(j);
    write_file_atomic(d / "config.json", j.dump(2));
  }
  void rewrite_weights(const fs::path& d, const std::function<void(std::vector<NamedTensor>&)>& f) {
    std::vector<NamedTensor> ts;
    {
      SafetensorsFile src(d / "model.safetensors");
      for (const auto& n : src.names()) {
        Tensor t = src.get(n);
        Tensor c = Tensor::empty(t.shape(), t.dtype());
        std::memcpy(c.raw(), t.raw(), t.nbytes());
        ts.push_back({n, c});
      }
    }
    f(ts);
    write_safetensors(d / "model.safetensors", ts);
  }
  void expect_invalid(const std::string& name, const Modelfile& m, const CreateOptions& o,
                      std::initializer_list<const char*> fragments) {
    auto before = snapshot();
    try {
      store_->create(name, m, o);
      ADD_FAILURE() << "create succeeded";
    } catch (const InvalidInput& e) {
      std::string msg = e.what();
      for (const char* f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg << "\n  missing: " << f;
    }
    EXPECT_EQ(snapshot(), before) << "a failed create changed the store";
  }

  fs::path dir_;
  std::unique_ptr<ModelStore> store_;
};

CreateOptions opts(const std::string& q, const std::string& dq = "", int group = 64) {
  CreateOptions o;
  o.quantize = q;
  o.draft_quantize = dq;
  o.group_size = group;
  return o;
}

const char* kE2b = "FROM ./gemma4-e2b-tiny\nDRAFT ./gemma4-e2b-tiny-assistant\n";
const char* kDense = "FROM ./gemma4-dense-tiny\nDRAFT ./gemma4-dense-tiny-assistant\n";

// Reads a tensor (dequantized to f32 when quantized) from a resolved model's blobs.
struct Loaded {
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;
  bool has(const std::string& n) const { return files.count(n) != 0; }
  const SafetensorsFile& file(const std::string& n) const { return *files.at(n); }
};
Loaded load(const std::vector<fs::path>& weights) {
  Loaded l;
  for (const auto& p : weights) {
    auto f = std::make_shared<SafetensorsFile>(p);
    for (const auto& n : f->names()) {
      EXPECT_FALSE(l.files.count(n)) << "tensor " << n << " in two blobs";
      l.files[n] = f;
    }
  }
  return l;
}

std::optional<TensorQuant> quant_of(const Loaded& l, const std::string& w) {
  if (l.file(w).entry(w).dtype != DType::U32) return std::nullopt;
  return tensor_quant_from_metadata(l.file(w).metadata(), w);
}

}  // namespace

TEST(ModelNameTest, ParsesAndValidates) {
  EXPECT_EQ(ModelName::parse("gemma4").str(), "gemma4:latest");
  EXPECT_EQ(ModelName::parse("gemma4:e2b-q4").str(), "gemma4:e2b-q4");
  ModelName n = ModelName::parse("me/gemma4:v1.2");
  EXPECT_EQ(n.space, "me");
  EXPECT_EQ(n.relative_manifest(), fs::path("me/gemma4/v1.2"));
  for (const char* bad : {"", "a/b/c", "../x", "x/..", "a:b:c", "a b", ".hidden", "x:", ":tag", "a/", "x:..",
                          "sp@ce", "a\\b"})
    EXPECT_THROW(ModelName::parse(bad), InvalidInput) << bad;
  EXPECT_THROW(ModelName::parse(std::string(81, 'a')), InvalidInput);
}

TEST(ModelSourceTest, FromDirectory) {
  ModelSource s = ModelSource::from_directory(kModels / "gemma4-e2b-tiny");
  EXPECT_EQ(s.config, kModels / "gemma4-e2b-tiny" / "config.json");
  ASSERT_EQ(s.weights.size(), 1u);
  EXPECT_EQ(s.tokenizer, kModels / "gemma4-e2b-tiny" / "tokenizer.json");
  EXPECT_FALSE(s.generation_config.empty());
  ModelSource a = ModelSource::from_directory(kModels / "gemma4-e2b-tiny-assistant");
  EXPECT_TRUE(a.tokenizer.empty());
  EXPECT_THROW(ModelSource::from_directory(kModels / "nope"), NotFound);
}

TEST_F(StoreTest, ModelSourceFromShardedDirectory) {
  fs::path d = copy_fixture("gemma4-dense-tiny", "sharded");
  std::vector<NamedTensor> a, b;
  json wm = json::object();
  {
    SafetensorsFile src(d / "model.safetensors");
    int i = 0;
    for (const auto& n : src.names()) {
      Tensor t = src.get(n);
      Tensor c = Tensor::empty(t.shape(), t.dtype());
      std::memcpy(c.raw(), t.raw(), t.nbytes());
      ((i++ % 2) ? a : b).push_back({n, c});
      wm[n] = (i % 2) ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    }
  }
  write_safetensors(d / "model-00001-of-00002.safetensors", a);
  write_safetensors(d / "model-00002-of-00002.safetensors", b);
  fs::remove(d / "model.safetensors");
  write_file_atomic(d / "model.safetensors.index.json", json{{"weight_map", wm}}.dump());
  ModelSource s = ModelSource::from_directory(d);
  EXPECT_EQ(s.weights.size(), 2u);
  ModelInfo info = store_->create("sharded", parse_modelfile("FROM ./sharded\n", dir_));
  EXPECT_EQ(info.architecture, "Gemma4ForCausalLM");
  // an indexed tensor missing from its shard is refused
  wm["model.extra.weight"] = "model-00001-of-00002.safetensors";
  write_file_atomic(d / "model.safetensors.index.json", json{{"weight_map", wm}}.dump());
  expect_invalid("sharded2", parse_modelfile("FROM ./sharded\n", dir_), {}, {"model.extra.weight"});
}

TEST_F(StoreTest, CreateEveryQuantizationCombination) {
  for (const char* text : {kE2b, kDense}) {
    for (const char* q : {"", "int8", "int4"}) {
      for (const char* dq : {"", "int8", "int4"}) {
        std::string name = fmt::format("m{}-{}-{}", text == kE2b ? "e2b" : "dense", *q ? q : "bf16", *dq ? dq : "bf16");
        SCOPED_TRACE(name);
        ModelInfo info = create(name, text, q, dq);
        EXPECT_EQ(info.quantization, *q ? q : "bfloat16");
        ASSERT_TRUE(info.draft.present);
        EXPECT_EQ(info.draft.architecture, "Gemma4AssistantForCausalLM");
        EXPECT_EQ(info.draft.quantization, *dq ? dq : "bfloat16");
        EXPECT_GT(info.parameter_count, 0);
        ModelSource src = store_->resolve(name);
        ASSERT_TRUE(src.draft);
        EXPECT_TRUE(fs::exists(src.config));
        EXPECT_TRUE(fs::exists(src.tokenizer));
        EXPECT_TRUE(fs::exists(src.draft->config));
        EXPECT_TRUE(src.draft->tokenizer.empty());
        EXPECT_EQ(src.renderer, text == kE2b ? "gemma4-small" : "gemma4-large");
        EXPECT_EQ(src.parser, "gemma4");
        Loaded t = load(src.weights), d = load(src.draft->weights);
        const std::string P = text == kE2b ? "model.language_model." : "model.";
        // The tied embedding/head takes 8 bits whenever the target is quantized; the drafter's head the asked type.
        auto emb = quant_of(t, P + "embed_tokens.weight");
        if (*q) {
          ASSERT_TRUE(emb);
          EXPECT_EQ(emb->type, QuantType::Int8);
          EXPECT_EQ(emb->group_size, 64);
          EXPECT_TRUE(t.has(P + "embed_tokens.scales"));
          EXPECT_TRUE(t.has(P + "embed_tokens.biases"));
          auto qp = quant_of(t, P + "layers.1.self_attn.q_proj.weight");
          ASSERT_TRUE(qp);
          EXPECT_EQ(qp->type, parse_quant_type(q));
        } else {
          EXPECT_FALSE(emb);
        }
        // (the drafter's hidden size is 32: its embedding cannot form groups of 64; pre_projection [32, 128] can)
        auto dpre = quant_of(d, "pre_projection.weight");
        EXPECT_EQ(dpre ? dpre->type : QuantType::None, parse_quant_type(dq));
        EXPECT_FALSE(quant_of(d, "model.embed_tokens.weight"));
        // Norms are never quantized; tensor names are those of the checkpoint.
        EXPECT_EQ(t.file(P + "norm.weight").entry(P + "norm.weight").dtype, DType::BF16);
        EXPECT_TRUE(d.has("pre_projection.weight"));
      }
    }
  }
  EXPECT_EQ(store_->list().size(), 18u);
  expect_consistent();
}

TEST_F(StoreTest, QuantizedBlobsDequantizeToTheSource) {
  create("q4", kE2b, "int4", "int8");
  ModelSource src = store_->resolve("q4");
  Loaded t = load(src.weights);
  SafetensorsFile orig(kModels / "gemma4-e2b-tiny" / "model.safetensors");
  int checked = 0;
  for (const auto& [name, f] : t.files) {
    auto q = quant_of(t, name);
    if (!q) continue;
    std::string base = quant_base_name(name);
    Tensor d = dequantize(f->get(name), f->get(base + ".scales"), f->get(base + ".biases"), quant_bits(q->type),
                          q->group_size);
    Tensor w = orig.get(name);
    ASSERT_EQ(d.shape(), w.shape()) << name;
    float max_err = 0, max_abs = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      float x = bf16_to_f32(w.data<uint16_t>()[i]);
      max_err = std::max(max_err, std::fabs(x - d.data<float>()[i]));
      max_abs = std::max(max_abs, std::fabs(x));
    }
    EXPECT_LT(max_err, max_abs * (q->type == QuantType::Int4 ? 0.15f : 0.01f)) << name;
    // metadata: the file-wide pair agrees with the per-tensor entry
    EXPECT_EQ(f->metadata().at(name), fmt::format("{}:{}", quant_type_name(q->type), q->group_size));
    ++checked;
  }
  EXPECT_GT(checked, 20);
  // int4 promotions: v_proj of layer 0 (a "more bits" layer) is int8, k_proj stays int4
  EXPECT_EQ(quant_of(t, "model.language_model.layers.0.self_attn.v_proj.weight")->type, QuantType::Int8);
  EXPECT_EQ(quant_of(t, "model.language_model.layers.0.self_attn.k_proj.weight")->type, QuantType::Int4);
  // the PLE table and unaligned down_proj (K = 96) stay bf16
  EXPECT_FALSE(quant_of(t, "model.language_model.embed_tokens_per_layer.weight"));
  EXPECT_FALSE(quant_of(t, "model.language_model.layers.0.mlp.down_proj.weight"));
}

TEST_F(StoreTest, DrafterHeadTakesTheRequestedTypeWithGroup32) {
  store_->create("g32", mf(kE2b), opts("int4", "int4", 32));
  Loaded d = load(store_->resolve("g32").draft->weights);
  auto head = quant_of(d, "model.embed_tokens.weight");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->type, QuantType::Int4);  // no 8-bit promotion for a drafter's head
  EXPECT_EQ(head->group_size, 32);
  EXPECT_FALSE(quant_of(d, "masked_embedding.centroids.weight"));
  Loaded t = load(store_->resolve("g32").weights);
  EXPECT_EQ(quant_of(t, "model.language_model.embed_tokens.weight")->type, QuantType::Int8);
  EXPECT_EQ(quant_of(t, "model.language_model.layers.0.mlp.down_proj.weight")->group_size, 32);  // K = 96
}

TEST_F(StoreTest, GlmStacksExpertsWhenQuantizing) {
  ModelInfo info = create("glm", "FROM ./glm4-moe-lite-tiny\n", "int4");
  EXPECT_EQ(info.architecture, "Glm4MoeLiteForCausalLM");
  EXPECT_FALSE(info.draft.present);
  ModelSource src = store_->resolve("glm");
  EXPECT_EQ(src.renderer, "glm-4.7");
  EXPECT_EQ(src.parser, "glm-4.7");
  Loaded t = load(src.weights);
  EXPECT_FALSE(t.has("model.layers.1.mlp.experts.0.gate_proj.weight"));
  ASSERT_TRUE(t.has("model.layers.1.mlp.experts.gate_proj.weight"));
  const auto& e = t.file("model.layers.1.mlp.experts.gate_proj.weight").entry("model.layers.1.mlp.experts.gate_proj.weight");
  EXPECT_EQ(e.dtype, DType::U32);
  EXPECT_EQ(e.shape, (Shape{8, 24, 64 * 4 / 32}));
  EXPECT_EQ(t.file("model.layers.1.mlp.experts.gate_proj.scales").entry("model.layers.1.mlp.experts.gate_proj.scales").shape,
            (Shape{8, 24, 1}));
  // down_proj (K = 24) cannot be grouped: stacked, kept bf16
  const auto& dn = t.file("model.layers.1.mlp.experts.down_proj.weight").entry("model.layers.1.mlp.experts.down_proj.weight");
  EXPECT_EQ(dn.dtype, DType::BF16);
  EXPECT_EQ(dn.shape, (Shape{8, 64, 24}));
  EXPECT_EQ(quant_of(t, "lm_head.weight")->type, QuantType::Int8);
  EXPECT_FALSE(quant_of(t, "model.layers.1.mlp.gate.weight"));
  // Unquantized import keeps the checkpoint's names
  create("glm-bf16", "FROM ./glm4-moe-lite-tiny\n");
  Loaded u = load(store_->resolve("glm-bf16").weights);
  EXPECT_TRUE(u.has("model.layers.1.mlp.experts.0.gate_proj.weight"));
  expect_consistent();
}

TEST_F(StoreTest, RecreateWritesNoNewBlobs) {
  ModelInfo a = create("m", kE2b, "int4", "int8");
  auto before = snapshot();
  size_t blobs = blob_count();
  ModelInfo b = create("m", kE2b, "int4", "int8");
  EXPECT_EQ(blob_count(), blobs);
  EXPECT_EQ(a.digest, b.digest);
  auto after = snapshot();
  EXPECT_EQ(after, before);  // byte-identical manifest, same blobs
  // a second name for the same weights shares every blob
  create("m2", kE2b, "int4", "int8");
  EXPECT_EQ(blob_count(), blobs);
  // the bf16 import shares the norms, tokenizer, config with the int4 one
  create("m3", kE2b);
  EXPECT_LT(blob_count(), 2 * blobs);
}

TEST_F(StoreTest, ListShowCopyRemove) {
  Modelfile m = mf(std::string(kE2b) +
                   "PARAMETER temperature 0.6\nPARAMETER stop <eot>\nPARAMETER draft_num_predict 3\n"
                   "SYSTEM Be brief.\nLICENSE Apache-2.0\nMESSAGE user hi\nMESSAGE assistant hello\n");
  store_->create("a:v1", m, {});
  ModelInfo info = store_->show("a:v1");
  EXPECT_EQ(info.name, "a:v1");
  EXPECT_EQ(info.architecture, "Gemma4ForConditionalGeneration");
  EXPECT_EQ(info.context_length, 4096);
  EXPECT_EQ(info.embedding_length, 64);
  EXPECT_EQ(info.capabilities, (std::vector<std::string>{"completion", "tools", "thinking"}));
  EXPECT_DOUBLE_EQ(info.params["temperature"].get<double>(), 0.6);
  EXPECT_EQ(info.params["draft_num_predict"].get<int>(), 3);
  EXPECT_EQ(info.system, "Be brief.");
  EXPECT_EQ(info.licenses, std::vector<std::string>{"Apache-2.0"});
  EXPECT_EQ(info.messages.size(), 2u);
  EXPECT_EQ(info.id().size(), 12u);
  EXPECT_EQ(info.digest, sha256_file(store_->manifest_path(ModelName::parse("a:v1"))));
  ModelSource src = store_->resolve("a:v1");
  EXPECT_EQ(src.system, "Be brief.");
  EXPECT_EQ(src.params["stop"], json::array({"<eot>"}));

  // show --modelfile: an equivalent Modelfile that re-creates the same model
  Modelfile again = store_->modelfile("a:v1");
  std::string text = format_modelfile(again);
  EXPECT_NE(text.find("FROM a:v1"), std::string::npos) << text;
  EXPECT_NE(text.find("PARAMETER temperature 0.6"), std::string::npos) << text;
  size_t blobs = blob_count();
  store_->create("b", parse_modelfile(text, dir_), {});
  EXPECT_EQ(blob_count(), blobs);
  EXPECT_EQ(store_->show("b").digest, info.digest);  // the same manifest, draft included

  store_->copy("a:v1", "ns/copy");
  EXPECT_EQ(store_->show("ns/copy").digest, info.digest);
  auto names = [&] {
    std::set<std::string> s;
    for (const auto& i : store_->list()) s.insert(i.name);
    return s;
  };
  EXPECT_EQ(names(), (std::set<std::string>{"a:v1", "b:latest", "ns/copy:latest"}));
  EXPECT_THROW(store_->copy("missing", "x"), NotFound);
  EXPECT_THROW(store_->show("missing"), NotFound);
  EXPECT_THROW(store_->resolve("missing"), NotFound);
  EXPECT_THROW(store_->copy("a:v1", "a:v1/x"), InvalidInput);

  store_->remove("a:v1");
  store_->remove("b");
  EXPECT_EQ(blob_count(), blobs);  // still used by ns/copy
  EXPECT_THROW(store_->remove("a:v1"), NotFound);
  store_->remove("ns/copy");
  EXPECT_EQ(blob_count(), 0u);  // garbage collected
  EXPECT_TRUE(store_->list().empty());
  EXPECT_FALSE(fs::exists(store_->root() / "manifests" / "ns"));
}

TEST_F(StoreTest, RemoveKeepsSharedBlobs) {
  create("q8", kDense, "int8");
  size_t one = blob_count();
  create("bf", kDense);
  size_t two = blob_count();
  EXPECT_GT(two, one);
  store_->remove("bf");
  EXPECT_EQ(blob_count(), one);
  expect_consistent();
  ModelSource s = store_->resolve("q8");
  for (const auto& w : s.weights) EXPECT_TRUE(fs::exists(w));
}

TEST_F(StoreTest, FromStoredModel) {
  create("base", kE2b);
  // re-quantizing an unquantized stored model, keeping its draft
  ModelInfo q = store_->create("base-q4", mf("FROM base\nPARAMETER temperature 0.1\n"), opts("int4"));
  EXPECT_EQ(q.quantization, "int4");
  EXPECT_TRUE(q.draft.present);
  EXPECT_EQ(q.draft.quantization, "bfloat16");
  // the same result as importing the directory with int4
  ModelInfo direct = create("direct-q4", kE2b, "int4");
  EXPECT_EQ(store_->resolve("base-q4").weights, store_->resolve("direct-q4").weights);
  // a quantized model is copied through, not re-quantized
  ModelInfo copy = store_->create("copy-q4", mf("FROM base-q4\n"), {});
  EXPECT_EQ(copy.quantization, "int4");
  EXPECT_EQ(store_->resolve("copy-q4").weights, store_->resolve("base-q4").weights);
  EXPECT_DOUBLE_EQ(copy.params["temperature"].get<double>(), 0.1);
  // DRAFT naming a stored model takes that model's drafter
  ModelInfo d = store_->create("dense-with-draft-of", mf("FROM ./gemma4-e2b-tiny\nDRAFT base\n"), opts("", "int8"));
  EXPECT_EQ(d.draft.quantization, "int8");
}

TEST_F(StoreTest, BadInputLeavesStoreUnchanged) {
  create("existing", kE2b, "int4");  // so the snapshot is not trivially empty
  CreateOptions none;
  // FROM
  expect_invalid("x", parse_modelfile("FROM ./does-not-exist\n", dir_), none, {"FROM", "no such directory"});
  expect_invalid("x", mf("FROM gemma4-e2b-tiny-assistant\n"), none, {"drafter", "DRAFT"});
  fs::path nocfg = copy_fixture("gemma4-dense-tiny", "nocfg");
  fs::remove(nocfg / "config.json");
  expect_invalid("x", parse_modelfile("FROM ./nocfg\n", dir_), none, {"config.json is missing"});
  fs::path noweights = copy_fixture("gemma4-dense-tiny", "noweights");
  fs::remove(noweights / "model.safetensors");
  expect_invalid("x", parse_modelfile("FROM ./noweights\n", dir_), none, {"model.safetensors"});
  fs::path arch = copy_fixture("gemma4-dense-tiny", "arch");
  edit_config(arch, [](json& j) { j["architectures"] = {"PhiForCausalLM"}; j["model_type"] = "phi"; });
  expect_invalid("x", parse_modelfile("FROM ./arch\n", dir_), none,
                 {"PhiForCausalLM", "Gemma4ForConditionalGeneration", "Glm4MoeLiteForCausalLM", "LlamaForCausalLM",
                  "Qwen3MoeForCausalLM", "Gemma3ForCausalLM"});
  // tensors
  fs::path missing = copy_fixture("gemma4-dense-tiny", "missing");
  rewrite_weights(missing, [](std::vector<NamedTensor>& ts) {
    std::erase_if(ts, [](const NamedTensor& t) { return t.first == "model.layers.1.mlp.up_proj.weight"; });
  });
  expect_invalid("x", parse_modelfile("FROM ./missing\n", dir_), none,
                 {"1 tensor missing or mis-shaped", "model.layers.1.mlp.up_proj.weight is missing"});
  fs::path shaped = copy_fixture("gemma4-dense-tiny", "shaped");
  edit_config(shaped, [](json& j) { j["intermediate_size"] = 128; });
  expect_invalid("x", parse_modelfile("FROM ./shaped\n", dir_), none,
                 {"model.layers.0.mlp.gate_proj.weight has shape [96, 64] but config.json implies [128, 64]"});
  // drafts that do not fit
  expect_invalid("x", mf("FROM ./gemma4-e2b-tiny\nDRAFT ./gemma4-dense-tiny-assistant\n"), none,
                 {"does not fit", "key/value heads"});
  fs::path wide = copy_fixture("gemma4-e2b-tiny-assistant", "wide");
  edit_config(wide, [](json& j) { j["backbone_hidden_size"] = 128; });
  expect_invalid("x", parse_modelfile(fmt::format("FROM {}\nDRAFT ./wide\n", (kModels / "gemma4-e2b-tiny").string()), dir_),
                 none, {"does not fit", "backbone_hidden_size / hidden_size: draft 128 vs target 64"});
  fs::path vocab = copy_fixture("gemma4-e2b-tiny-assistant", "vocab");
  edit_config(vocab, [](json& j) { j["text_config"]["vocab_size"] = 1024; });
  expect_invalid("x", parse_modelfile(fmt::format("FROM {}\nDRAFT ./vocab\n", (kModels / "gemma4-e2b-tiny").string()), dir_),
                 none, {"vocab_size"});
  // a draft model must speak the target's tokens
  expect_invalid("x", mf("FROM ./gemma4-e2b-tiny\nDRAFT ./glm4-moe-lite-tiny\n"), none, {"tokenizers differ"});
  expect_invalid("x", mf("FROM ../families/llama3-tiny\nDRAFT ../families/gemma3-tiny\n"), none,
                 {"tokenizers differ"});
  fs::path notok = copy_fixture("../families/qwen3-tiny", "notok");
  fs::remove(notok / "tokenizer.json");
  expect_invalid("x", parse_modelfile(fmt::format("FROM {}\nDRAFT ./notok\n", (kModels / "../families/qwen3-tiny").string()), dir_),
                 none, {"no tokenizer.json"});
  expect_invalid("x", mf("FROM ./glm4-moe-lite-tiny\nDRAFT ./gemma4-e2b-tiny-assistant\n"), none,
                 {"only for Gemma 4"});
  // options
  expect_invalid("x", mf("FROM ./gemma4-e2b-tiny\n"), opts("", "int8"),
                 {"--draft-quantize requires a DRAFT"});
  expect_invalid("x", mf(kE2b), opts("q3_K_M"), {"unsupported --quantize \"q3_K_M\"", "int8, int4"});
  expect_invalid("x", mf(kE2b), opts("", "nvfp4"), {"--draft-quantize", "int8, int4"});
  expect_invalid("x", mf(kE2b), opts("int8", "", 48), {"group size 48"});
  // a quantized source is not quantized again
  expect_invalid("x", mf("FROM existing\n"), opts("int8"), {"already quantized (int4)", "--quantize"});
  // names
  expect_invalid("../evil", mf(kE2b), none, {"invalid model name"});
  expect_invalid("existing:latest/x", mf(kE2b), none, {"invalid model name"});
  EXPECT_THROW(store_->create("x", mf("FROM not-a-model\n"), none), NotFound);
  // DRAFT == FROM is refused by the Modelfile parser
  EXPECT_THROW(mf("FROM ./gemma4-e2b-tiny\nDRAFT ./gemma4-e2b-tiny\n"), InvalidInput);
  expect_consistent();
}

TEST_F(StoreTest, FailureBeforeManifestLeavesNothing) {
  create("keep", kDense);
  auto before = snapshot();
  CreateOptions o;
  o.quantize = "int4";
  o.draft_quantize = "int8";
  bool called = false;
  o.before_manifest = [&] {
    called = true;
    EXPECT_GT(blob_count(), before.size() - 2);  // blobs were written by now
    throw Error("simulated crash");
  };
  EXPECT_THROW(store_->create("broken", mf(kE2b), o), Error);
  EXPECT_TRUE(called);
  EXPECT_EQ(snapshot(), before);
  EXPECT_FALSE(store_->exists("broken"));
}

TEST_F(StoreTest, ProgressIsReported) {
  std::vector<CreateProgress> seen;
  CreateOptions o;
  o.quantize = "int8";
  o.progress = [&](const CreateProgress& p) { seen.push_back(p); };
  store_->create("p", mf(kE2b), o);
  ASSERT_GT(seen.size(), 10u);
  EXPECT_EQ(seen.back().status, "success");
  EXPECT_EQ(seen.back().completed, seen.back().total);
  EXPECT_GT(seen.back().total, 1000000u);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].completed, seen[i - 1].completed);
  bool quantizing = false;
  for (const auto& p : seen) quantizing |= p.status.starts_with("quantizing ");
  EXPECT_TRUE(quantizing);
}

// kill -9 of a child process running create at random moments: no manifest may name a missing or partial blob,
// and the next create / rm cleans up the temp files and orphans. (The child runs the same ModelStore::create the
// `vatic create` command calls; tests/cli can drive the binary itself.)
TEST_F(StoreTest, KillNineDuringCreate) {
  const fs::path root = store_->root();
  const Modelfile m = mf(kE2b);
  auto run = [&](const std::string& name, int kill_after_us) {
    pid_t pid = ::fork();
    if (pid == 0) {
      try {
        ModelStore(root).create(name, m, opts("int4", "int8"));
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    if (kill_after_us >= 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(kill_after_us));
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  // Kill times are drawn over the duration of a whole create: take the fastest of three (the first run pays for
  // cold caches), so most kills land while the create is still running.
  int full_us = INT32_MAX;
  for (int c = 0; c < 3; c++) {
    auto t0 = std::chrono::steady_clock::now();
    int st = run("calibrate", -1);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "create failed: status " << st;
    full_us = std::min(full_us, static_cast<int>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                      std::chrono::steady_clock::now() - t0)
                                                      .count()));
    store_->remove("calibrate");
    ASSERT_EQ(blob_count(), 0u);
  }
  std::mt19937 rng(1234);
  int killed = 0;
  // A create that finished before its kill shrinks the window the next kill time is drawn from, so the kills keep
  // landing inside creates however fast they have become (or however slow the machine is right now).
  int window_us = full_us;
  for (int i = 0; i < 60 && killed < 20; ++i) {
    std::string name = fmt::format("k{}", i);
    store_->garbage_collect();  // orphans of the previous kill go, so every run writes (and can die) throughout
    int status = run(name, std::uniform_int_distribution<int>(0, window_us)(rng));
    killed += WIFSIGNALED(status);
    if (!WIFSIGNALED(status)) window_us = std::max(500, window_us * 3 / 4);
    expect_consistent();
    if (store_->exists(name)) {
      ModelSource s = store_->resolve(name);
      for (const auto& w : s.weights) ASSERT_TRUE(fs::exists(w));
    }
  }
  EXPECT_GE(killed, 12) << "kills rarely landed inside a create (window " << window_us << " us of " << full_us << ")";
  // a complete create afterwards works and removes the dead processes' temp files
  int st = run("final", -1);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  expect_consistent();
  for (const auto& e : fs::recursive_directory_iterator(store_->root()))
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp-")) << e.path();
  // removing every model leaves no blob behind (orphans of killed creates included)
  for (const auto& info : store_->list()) store_->remove(info.name);
  EXPECT_EQ(blob_count(), 0u);
}

namespace vatic {
namespace {

// The Llama, Qwen3, Qwen3-MoE and Gemma 3 families: import at every precision, what show reports, loading from the
// store, and the same logits as the directory for the unquantized import.
TEST_F(StoreTest, EveryFamilyImportsQuantizesAndLoads) {
  struct Case {
    const char* dir;
    const char* arch;
    const char* renderer;
    int64_t kv;
  };
  for (const Case& c : {Case{"llama3-tiny", "LlamaForCausalLM", "llama3", 3 * 2 * 16 * 8},
                        Case{"llama-untied-bias-tiny", "LlamaForCausalLM", "llama3", 3 * 2 * 16 * 8},
                        Case{"qwen3-tiny", "Qwen3ForCausalLM", "qwen3", 3 * 2 * 24 * 8},
                        Case{"qwen3-moe-tiny", "Qwen3MoeForCausalLM", "qwen3", 3 * 2 * 16 * 8},
                        Case{"gemma3-tiny", "Gemma3ForCausalLM", "gemma3", 1 * 2 * 16 * 8}}) {
    const fs::path src_dir = kModels / ".." / "families" / c.dir;
    auto direct = load_language_model(ModelSource::from_directory(src_dir), Device::CPU);
    const std::vector<int32_t> prompt = {0, 5, 9, 77, 300, 12, 41, 8, 19, 200, 3};
    auto ds = direct->new_state();
    std::vector<float> want = ops::to_vector(direct->forward(*ds, prompt, 1).logits);
    for (const char* q : {"", "int8", "int4"}) {
      const std::string name = fmt::format("{}-{}", c.dir, *q ? q : "bf16");
      SCOPED_TRACE(name);
      ModelInfo info = create(name, fmt::format("FROM ../families/{}\n", c.dir), q);
      EXPECT_EQ(info.architecture, c.arch);
      EXPECT_EQ(info.quantization, *q ? q : "bfloat16");
      EXPECT_EQ(info.kv_bytes_per_token, c.kv);
      EXPECT_EQ(info.context_length, 4096);
      EXPECT_EQ(info.embedding_length, 64);
      EXPECT_EQ(info.renderer, c.renderer);
      EXPECT_EQ(info.parser, c.renderer);
      const bool tools = std::string(c.renderer) != "gemma3";
      EXPECT_EQ(std::count(info.capabilities.begin(), info.capabilities.end(), "tools"), tools ? 1 : 0);
      EXPECT_EQ(std::count(info.capabilities.begin(), info.capabilities.end(), "thinking"),
                std::string(c.renderer) == "qwen3" ? 1 : 0);
      ModelSource src = store_->resolve(name);
      Loaded t = load(src.weights);
      if (*q) {
        // The tied embedding is the head: 8 bits; q_proj the asked type; norms never.
        auto head = quant_of(t, t.has("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight");
        ASSERT_TRUE(head);
        EXPECT_EQ(head->type, QuantType::Int8);
        auto qp = quant_of(t, "model.layers.1.self_attn.q_proj.weight");
        ASSERT_TRUE(qp);
        EXPECT_EQ(qp->type, parse_quant_type(q));
        EXPECT_EQ(t.file("model.norm.weight").entry("model.norm.weight").dtype, DType::BF16);
        if (std::string(c.dir) == "qwen3-moe-tiny") {
          // Experts stacked per projection; the router stays as it was.
          EXPECT_TRUE(t.has("model.layers.1.mlp.experts.gate_proj.weight"));
          EXPECT_FALSE(t.has("model.layers.1.mlp.experts.0.gate_proj.weight"));
          EXPECT_EQ(t.file("model.layers.1.mlp.gate.weight").entry("model.layers.1.mlp.gate.weight").dtype, DType::BF16);
        }
      }
      auto lm = load_language_model(src, Device::CPU);
      auto st = lm->new_state();
      std::vector<float> got = ops::to_vector(lm->forward(*st, prompt, 1).logits);
      ASSERT_EQ(got.size(), want.size());
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); i++) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
      }
      // Exact for the import as it was; int8 close; int4 (on these random weights) within a coarse bound.
      const double rel = std::sqrt(num / den), bound = !*q ? 0.0 : std::string(q) == "int8" ? 0.05 : 0.5;
      EXPECT_LE(rel, bound);
    }
  }
  expect_consistent();
}

TEST_F(StoreTest, DraftModelIsKeptWithItsTarget) {
  ModelInfo info = create("llama-spec", "FROM ../families/llama3-tiny\nDRAFT ../families/llama-untied-bias-tiny\n", "",
                          "int8");
  ASSERT_TRUE(info.draft.present);
  EXPECT_EQ(info.draft.architecture, "LlamaForCausalLM");
  EXPECT_EQ(info.draft.quantization, "int8");
  ModelSource src = store_->resolve("llama-spec");
  ASSERT_TRUE(src.draft);
  auto target = load_language_model(src, Device::CPU);
  auto drafter = load_drafter(*target, src.draft.get());
  ASSERT_TRUE(drafter);
  EXPECT_NE(drafter->name().find("draft model"), std::string::npos);
  // Re-created from the stored model, the drafter comes along.
  ModelInfo copy = create("llama-spec-2", "FROM llama-spec\n");
  EXPECT_TRUE(copy.draft.present);
  // A stored model without a drafter of its own drafts itself.
  create("small-llama", "FROM ../families/llama-untied-bias-tiny\n", "int8");
  ModelInfo by_name = create("llama-spec-3", "FROM ../families/llama3-tiny\nDRAFT small-llama\n");
  ASSERT_TRUE(by_name.draft.present);
  EXPECT_EQ(by_name.draft.quantization, "int8");
  ModelSource s3 = store_->resolve("llama-spec-3");
  ASSERT_TRUE(s3.draft);
  auto t3 = load_language_model(s3, Device::CPU);
  EXPECT_TRUE(load_drafter(*t3, s3.draft.get()));
  // A Qwen3 dense model drafts for Qwen3-MoE: same tokenizer.
  EXPECT_TRUE(create("qwen-spec", "FROM ../families/qwen3-moe-tiny\nDRAFT ../families/qwen3-tiny\n").draft.present);
  expect_consistent();
}

TEST_F(StoreTest, ChatTemplateWithoutARendererIsNamed) {
  fs::path d = copy_fixture("../families/qwen3-tiny", "mistralish");
  write_file_atomic(d / "chat_template.jinja", "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}");
  expect_invalid("x", parse_modelfile("FROM ./mistralish\n", dir_), CreateOptions(),
                 {"chat template", "llama3, qwen3, gemma3", "RENDERER"});
  // Naming the format (or raw) in the Modelfile is the way out.
  ModelInfo raw = store_->create("raw", parse_modelfile("FROM ./mistralish\nRENDERER raw\n", dir_), CreateOptions());
  EXPECT_EQ(raw.renderer, "raw");
  ModelInfo named =
      store_->create("named", parse_modelfile("FROM ./mistralish\nRENDERER llama3\nPARSER llama3\n", dir_), CreateOptions());
  EXPECT_EQ(named.renderer, "llama3");
  // The official template is recognised.
  fs::path ok = copy_fixture("../families/qwen3-tiny", "qwenok");
  write_file_atomic(ok / "chat_template.jinja", "{%- for m in messages %}{{- '<|im_start|>' + m.role }}{% endfor %}");
  EXPECT_EQ(store_->create("ok", parse_modelfile("FROM ./qwenok\n", dir_), CreateOptions()).renderer, "qwen3");
}

}  // namespace
}  // namespace vatic
