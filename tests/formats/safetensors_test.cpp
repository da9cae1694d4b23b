#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <string>

#include "util/json.h"

namespace vatic {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "vatic-st-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; i++) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string st_bytes(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Expects opening `bytes` as a safetensors file to throw InvalidInput whose message contains the file path and
// every string in `parts`.
void expect_invalid(const std::string& bytes, std::initializer_list<std::string> parts) {
  TempDir d;
  fs::path p = d / "bad.safetensors";
  write_bytes(p, bytes);
  try {
    SafetensorsFile f(p);
    FAIL() << "no error for a malformed file; expected one mentioning " << *parts.begin();
  } catch (const InvalidInput& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    for (const auto& s : parts) EXPECT_NE(msg.find(s), std::string::npos) << "missing \"" << s << "\" in: " << msg;
  }
}

TEST(Safetensors, RoundTripAllDtypesStridedAndMetadata) {
  TempDir d;
  fs::path p = d / "rt.safetensors";
  Tensor f32 = Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor f32t = f32.transpose(0, 1);  // non-contiguous [3, 2]
  ASSERT_FALSE(f32t.is_contiguous());
  Tensor bf16 = Tensor::empty({4}, DType::BF16);
  for (int i = 0; i < 4; i++) bf16.data<uint16_t>()[i] = f32_to_bf16(0.5f * static_cast<float>(i));
  Tensor f16 = Tensor::empty({2}, DType::F16);
  f16.data<uint16_t>()[0] = f32_to_f16(1.5f);
  f16.data<uint16_t>()[1] = f32_to_f16(-2.0f);
  Tensor i32 = Tensor::from_ints({7, -8, 9}, {3});
  Tensor i64 = Tensor::empty({2}, DType::I64);
  i64.data<int64_t>()[0] = -(int64_t{1} << 40);
  i64.data<int64_t>()[1] = 42;
  Tensor u8 = Tensor::empty({5}, DType::U8);
  for (int i = 0; i < 5; i++) u8.data<uint8_t>()[i] = static_cast<uint8_t>(250 + i);
  Tensor u32 = Tensor::empty({1, 2}, DType::U32);
  u32.data<uint32_t>()[0] = 0xdeadbeef;
  u32.data<uint32_t>()[1] = 7;
  Tensor empty = Tensor::empty({0, 4}, DType::F32);
  Tensor sliced = Tensor::from_floats({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}).slice(1, 1, 3);  // [3, 2]

  write_safetensors(p,
                    {{"z.f32", f32}, {"a.f32t", f32t}, {"b.bf16", bf16}, {"c.f16", f16}, {"d.i32", i32},
                     {"e.i64", i64}, {"f.u8", u8}, {"g.u32", u32}, {"h.empty", empty}, {"i.sliced", sliced}},
                    {{"format", "pt"}, {"note", "hello"}});

  // Header is 8-byte aligned, space padded, data in sorted name order.
  std::ifstream in(p, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw[8], '{');
  json h = json::parse(raw.substr(8, n));
  // Data: by descending element size, then name, so everything is aligned; header keys in name order.
  EXPECT_EQ(h["e.i64"]["data_offsets"][0], 0);
  EXPECT_EQ(h["a.f32t"]["data_offsets"][0], 16);
  EXPECT_EQ(h["f.u8"]["data_offsets"][1], raw.size() - 8 - n);
  EXPECT_EQ((8 + n) % 8, 0u);
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    DType dt;
    ASSERT_TRUE(parse_dtype(it.value()["dtype"].get<std::string>(), &dt));
    EXPECT_EQ(it.value()["data_offsets"][0].get<uint64_t>() % dtype_size(dt), 0u) << it.key();
  }
  {
    auto key_at = raw.find("\"a.f32t\""), key_z = raw.find("\"z.f32\""), key_m = raw.find("__metadata__");
    EXPECT_LT(key_m, key_at);
    EXPECT_LT(key_at, key_z);
  }
  EXPECT_EQ(h["__metadata__"]["note"], "hello");

  SafetensorsFile f(p);
  EXPECT_EQ(f.size(), 10u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.names().front(), "a.f32t");
  Tensor t = f.get("a.f32t");
  EXPECT_EQ(t.dtype(), DType::F32);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  const float want_t[] = {1, 4, 2, 5, 3, 6};
  for (int i = 0; i < 6; i++) EXPECT_EQ(t.data<float>()[i], want_t[i]);
  // Zero-copy: the tensor's storage is the mapping.
  EXPECT_EQ(t.storage().get(), f.mapping().get());
  EXPECT_EQ(f.get("z.f32").data<float>()[5], 6.0f);
  Tensor b = f.get("b.bf16");
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(bf16_to_f32(b.data<uint16_t>()[3]), 1.5f);
  EXPECT_EQ(f16_to_f32(f.get("c.f16").data<uint16_t>()[0]), 1.5f);
  EXPECT_EQ(f.get("d.i32").data<int32_t>()[1], -8);
  EXPECT_EQ(f.get("e.i64").data<int64_t>()[0], -(int64_t{1} << 40));
  EXPECT_EQ(f.get("f.u8").data<uint8_t>()[4], 254);
  EXPECT_EQ(f.get("g.u32").shape(), (Shape{1, 2}));
  EXPECT_EQ(f.get("g.u32").data<uint32_t>()[0], 0xdeadbeefu);
  EXPECT_EQ(f.get("h.empty").shape(), (Shape{0, 4}));
  const float want_s[] = {1, 2, 5, 6, 9, 10};
  for (int i = 0; i < 6; i++) EXPECT_EQ(f.get("i.sliced").data<float>()[i], want_s[i]);
  EXPECT_THROW(f.get("nope"), NotFound);

  // The store reads a single file given by path, too.
  TensorStore s(p);
  EXPECT_EQ(s.size(), 10u);
  EXPECT_FALSE(s.sharded());
  // No temp files are left behind.
  int count = 0;
  for (auto& e : fs::directory_iterator(d.path())) count += e.is_regular_file();
  EXPECT_EQ(count, 1);
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir d;
  Tensor t = Tensor::from_floats({1}, {1});
  EXPECT_THROW(write_safetensors(d / "x.safetensors", {{"a", t}, {"a", t}}), Error);
  EXPECT_THROW(write_safetensors(d / "x.safetensors", {{"__metadata__", t}}), Error);
  EXPECT_THROW(write_safetensors(d / "x.safetensors", {{"", t}}), Error);
  EXPECT_THROW(write_safetensors(d / "x.safetensors", {{"u", Tensor()}}), Error);
  EXPECT_FALSE(fs::exists(d / "x.safetensors"));
}

TEST(Safetensors, MisalignedTensorsAreCopied) {
  TempDir d;
  std::string hdr = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  float v = 2.5f;
  std::string data(1, '\x07');
  data.append(reinterpret_cast<const char*>(&v), 4);
  write_bytes(d / "m.safetensors", st_bytes(hdr, 0) + data);
  SafetensorsFile f(d / "m.safetensors");
  Tensor b = f.get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 4, 0u);
  EXPECT_NE(b.storage().get(), f.mapping().get());
  EXPECT_EQ(b.data<float>()[0], 2.5f);
  EXPECT_EQ(f.get("a").storage().get(), f.mapping().get());
}

TEST(Safetensors, ReadsF8AndI8) {
  TempDir d;
  std::string hdr = R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}})";
  std::string bytes = st_bytes(hdr, 0) + std::string("\x38\x40\xff", 3);
  write_bytes(d / "f8.safetensors", bytes);
  SafetensorsFile f(d / "f8.safetensors");
  EXPECT_EQ(f.get("a").dtype(), DType::F8_E4M3);
  EXPECT_EQ(f8e4m3_to_f32(f.get("a").data<uint8_t>()[0]), 1.0f);
  EXPECT_EQ(f.get("b").data<int8_t>()[0], -1);
}

TEST(Safetensors, ShardedDirectoryWithIndex) {
  TempDir d;
  Tensor a = Tensor::from_floats({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_floats({5, 6}, {2});
  Tensor c = Tensor::from_ints({9}, {1});
  write_safetensors(d / "model-00001-of-00002.safetensors", {{"model.a", a}, {"model.b", b}});
  write_safetensors(d / "model-00002-of-00002.safetensors", {{"model.c", c}});
  json idx = {{"metadata", {{"total_size", 28}}},
              {"weight_map",
               {{"model.a", "model-00001-of-00002.safetensors"},
                {"model.b", "model-00001-of-00002.safetensors"},
                {"model.c", "model-00002-of-00002.safetensors"}}}};
  write_bytes(d / "model.safetensors.index.json", idx.dump());

  TensorStore s(d.path());
  EXPECT_TRUE(s.sharded());
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.names(), (std::vector<std::string>{"model.a", "model.b", "model.c"}));
  EXPECT_EQ(s.files().size(), 2u);
  EXPECT_EQ(s.file_of("model.c"), d / "model-00002-of-00002.safetensors");
  EXPECT_EQ(s.get("model.a").data<float>()[3], 4.0f);
  EXPECT_EQ(s.get("model.c").data<int32_t>()[0], 9);
  EXPECT_EQ(s.require("model.b", {2}).data<float>()[1], 6.0f);
  EXPECT_EQ(s.total_bytes(), 28u);
  EXPECT_FALSE(s.optional("model.zzz", {1}).defined());
  try {
    s.require("model.a", {2, 4});
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), "tensor model.a in " + (d / "model-00001-of-00002.safetensors").string() +
                                         " has shape [2, 2] but config.json implies [2, 4]");
  }
  try {
    s.get("model.layers.3.self_attn.q_proj.weight");
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_EQ(std::string(e.what()), "tensor model.layers.3.self_attn.q_proj.weight is missing from " +
                                         (d / "model.safetensors.index.json").string());
  }

  // A shard the index names is missing.
  json idx2 = idx;
  idx2["weight_map"]["model.d"] = "model-00003-of-00003.safetensors";
  write_bytes(d / "model.safetensors.index.json", idx2.dump());
  try {
    TensorStore bad(d.path());
    FAIL();
  } catch (const InvalidInput& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("model-00003-of-00003.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  }
  // A tensor the index assigns to a shard that lacks it.
  json idx3 = idx;
  idx3["weight_map"]["model.d"] = "model-00002-of-00002.safetensors";
  write_bytes(d / "model.safetensors.index.json", idx3.dump());
  try {
    TensorStore bad(d.path());
    FAIL();
  } catch (const InvalidInput& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("tensor model.d"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
  }
  // Index that is not JSON / has no weight_map.
  write_bytes(d / "model.safetensors.index.json", "{not json");
  EXPECT_THROW(TensorStore{d.path()}, InvalidInput);
  write_bytes(d / "model.safetensors.index.json", "{}");
  EXPECT_THROW(TensorStore{d.path()}, InvalidInput);
  // Shard names may not escape the directory.
  write_bytes(d / "model.safetensors.index.json", R"({"weight_map":{"x":"../x.safetensors"}})");
  EXPECT_THROW(TensorStore{d.path()}, InvalidInput);
}

TEST(Safetensors, SingleFileDirectoryAndMissingWeights) {
  TempDir d;
  EXPECT_THROW(TensorStore{d.path()}, NotFound);
  EXPECT_THROW(TensorStore{d / "nope"}, NotFound);
  write_safetensors(d / "model.safetensors", {{"model.norm.weight", Tensor::from_floats({1, 2}, {2})}});
  TensorStore s(d.path());
  EXPECT_EQ(s.source(), d / "model.safetensors");
  try {
    s.get("model.layers.3.self_attn.q_proj.weight");
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_EQ(std::string(e.what()),
              "tensor model.layers.3.self_attn.q_proj.weight is missing from " + (d / "model.safetensors").string());
  }
}

// --- malformed files: one test per case -------------------------------------------------------------------------

TEST(SafetensorsMalformed, EmptyAndShorterThanEightBytes) {
  expect_invalid("", {"truncated"});
  expect_invalid(std::string("\x10\x00\x00", 3), {"truncated"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEnd) {
  expect_invalid(le64(1000) + "{}", {"header length 1000", "past the end"});
  expect_invalid(le64(~uint64_t{0}) + "{}", {"past the end"});
}

TEST(SafetensorsMalformed, InvalidJson) {
  expect_invalid(st_bytes("{\"a\": ", 0), {"not valid JSON"});
  expect_invalid(st_bytes(std::string(5, '\xff'), 0), {"not valid JSON"});
  expect_invalid(st_bytes("", 0), {"not valid JSON"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  expect_invalid(st_bytes("[1, 2]", 0), {"not a JSON object"});
  expect_invalid(st_bytes(R"({"a": 5})", 0), {"tensor a", "not an object"});
  expect_invalid(st_bytes(R"({"__metadata__": [1]})", 0), {"__metadata__"});
  expect_invalid(st_bytes(R"({"__metadata__": {"k": 1}})", 0), {"__metadata__", "not a string"});
}

TEST(SafetensorsMalformed, MissingFields) {
  expect_invalid(st_bytes(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4), {"tensor a", "no dtype"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), {"tensor a", "no shape"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [1]}})", 4), {"tensor a", "no data_offsets"});
  expect_invalid(st_bytes(R"({"a": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4), {"dtype"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4), {"shape"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
                 {"non-negative integer"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
                 {"non-negative integer"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4), {"data_offsets"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, -4]}})", 4), {"data_offsets"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4),
                 {"tensor a", "past the end of the data section"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 18446744073709551615]}})", 4),
                 {"tensor a"});
}

TEST(SafetensorsMalformed, BeginAfterEnd) {
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", 4),
                 {"tensor a", "begin after they end"});
}

TEST(SafetensorsMalformed, ByteSizeMismatch) {
  expect_invalid(st_bytes(R"({"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})", 8),
                 {"tensor a", "span 8 bytes", "needs 6 bytes"});
}

TEST(SafetensorsMalformed, Overlap) {
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                          12),
                 {"overlap", "a", "b"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  expect_invalid(st_bytes(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8),
                 {"tensor a", "unknown dtype \"F64\""});
}

TEST(SafetensorsMalformed, HugeShapesDoNotOverflow) {
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 0]}})", 0),
                 {"tensor a", "too large"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4]}})", 4),
                 {"tensor a", "too large"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "BF16", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0),
                 {"tensor a", "too large"});
  // A huge dim times a zero dim is fine: zero elements.
  TempDir d;
  write_bytes(d / "z.safetensors",
              st_bytes(R"({"a": {"dtype": "F32", "shape": [0, 1000000000000], "data_offsets": [0, 0]}})", 0));
  SafetensorsFile f(d / "z.safetensors");
  EXPECT_EQ(f.get("a").numel(), 0);
}

TEST(SafetensorsMalformed, DeeplyNestedJsonDoesNotOverflowTheStack) {
  // Refused by the nesting limit before the header is parsed.
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 4]}})", 4),
                 {"nested deeper"});
  expect_invalid(st_bytes(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": )" + deep + "}}", 4),
                 {"nested deeper"});
  expect_invalid(st_bytes(R"({"a": )" + deep + "}", 0), {"nested deeper"});
}

TEST(SafetensorsMalformed, PathIsADirectoryOrMissing) {
  TempDir d;
  EXPECT_THROW(SafetensorsFile{d.path()}, InvalidInput);
  EXPECT_THROW(SafetensorsFile{d / "missing.safetensors"}, NotFound);
}

TEST(SafetensorsMalformed, TruncationAtEveryLengthNeverCrashes) {
  TempDir d;
  fs::path p = d / "ok.safetensors";
  write_safetensors(p, {{"a", Tensor::from_floats({1, 2, 3}, {3})}, {"b", Tensor::from_ints({4}, {1})}});
  std::ifstream in(p, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t n = 0; n < raw.size(); n++) {
    write_bytes(d / "t.safetensors", raw.substr(0, n));
    EXPECT_THROW(SafetensorsFile{d / "t.safetensors"}, InvalidInput) << "length " << n;
  }
  // Single flipped bytes in the header either parse or throw InvalidInput; never anything else.
  uint64_t hn = 0;
  std::memcpy(&hn, raw.data(), 8);
  for (size_t i = 0; i < 8 + hn; i++) {
    for (int v : {0x00, 0x22, 0x7b, 0x7d, 0x39, 0xff}) {
      std::string m = raw;
      m[i] = static_cast<char>(v);
      write_bytes(d / "m.safetensors", m);
      try {
        SafetensorsFile f(d / "m.safetensors");
        for (const auto& name : f.names()) (void)f.get(name);
      } catch (const InvalidInput&) {
      }
    }
  }
}

// --- fixtures ---------------------------------------------------------------------------------------------------

TEST(Safetensors, ReadsEveryFixtureModel) {
  const fs::path models = fs::path(VATIC_FIXTURES_DIR) / "models";
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(models)) {
    if (!e.is_directory()) continue;
    dirs++;
    TensorStore s(e.path());
    SCOPED_TRACE(e.path().string());
    EXPECT_GT(s.size(), 10u);
    uint64_t bytes = 0;
    for (const auto& name : s.names()) {
      Tensor t = s.get(name);
      bytes += t.nbytes();
      // Touch the data: first and last byte.
      if (t.nbytes() > 0) {
        volatile uint8_t first = static_cast<const uint8_t*>(t.raw())[0];
        volatile uint8_t last = static_cast<const uint8_t*>(t.raw())[t.nbytes() - 1];
        (void)first;
        (void)last;
      }
      EXPECT_TRUE(t.dtype() == DType::BF16 || t.dtype() == DType::I64 || t.dtype() == DType::F32) << name;
    }
    EXPECT_EQ(bytes, s.total_bytes());
    // All data is accounted for: header + data == file size.
    SafetensorsFile f(e.path() / "model.safetensors");
    EXPECT_EQ(f.data_offset() + bytes, fs::file_size(e.path() / "model.safetensors"));
    EXPECT_EQ(f.metadata().at("format"), "pt");
  }
  EXPECT_EQ(dirs, 7);

  TensorStore e2b(models / "gemma4-e2b-tiny");
  EXPECT_EQ(e2b.get("model.language_model.embed_tokens.weight").shape(), (Shape{512, 64}));
  EXPECT_EQ(e2b.get("model.language_model.layers.9.mlp.gate_proj.weight").shape(), (Shape{192, 64}));
  TensorStore asst(models / "gemma4-e2b-tiny-assistant");
  EXPECT_EQ(asst.get("masked_embedding.token_ordering").dtype(), DType::I64);
  TensorStore glm(models / "glm4-moe-lite-tiny");
  EXPECT_EQ(glm.get("model.layers.0.self_attn.kv_b_proj.weight").shape(), (Shape{128, 16}));
}

TEST(Safetensors, ReferenceOutputsAreReadable) {
  const fs::path ref = fs::path(VATIC_FIXTURES_DIR) / "models" / "gemma4-e2b-tiny.reference.safetensors";
  SafetensorsFile f(ref);
  EXPECT_GT(f.size(), 0u);
  for (const auto& n : f.names()) EXPECT_EQ(f.get(n).dtype(), DType::F32) << n;
}

}  // namespace
}  // namespace vatic
