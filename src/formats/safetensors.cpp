#include "formats/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "util/error.h"
#include "util/json.h"

namespace vatic {

namespace fs = std::filesystem;

namespace {

// The reference implementation refuses headers above 100 MB; so do we (it also bounds the JSON parser's work).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

template <typename... Args>
[[noreturn]] void bad(const fs::path& path, fmt::format_string<Args...> f, Args&&... args) {
  throw InvalidInput(fmt::format("invalid safetensors file {}: {}", path.string(),
                                 fmt::format(f, std::forward<Args>(args)...)));
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw NotFound(fmt::format("safetensors file {} does not exist", path.string()));
  if (fs::is_directory(path, ec)) throw InvalidInput(fmt::format("{} is a directory, not a safetensors file",
                                                                 path.string()));
  try {
    file_ = std::make_shared<MappedFile>(path);
  } catch (const Error& e) {
    throw InvalidInput(e.what());
  }
  const uint64_t size = file_->size();
  const uint8_t* bytes = file_->bytes();
  if (size < 8) bad(path, "file is truncated: {} bytes, shorter than the 8-byte header length", size);
  const uint64_t n = read_u64_le(bytes);
  if (n > size - 8)
    bad(path, "header length {} runs past the end of the file ({} bytes; truncated?)", n, size);
  if (n > kMaxHeaderBytes) bad(path, "header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes);
  data_offset_ = 8 + n;
  const uint64_t data_size = size - data_offset_;

  json header;
  if (json_depth(std::string_view(reinterpret_cast<const char*>(bytes) + 8, n)) > kMaxJsonDepth)
    bad(path, "header JSON is nested deeper than {} levels", kMaxJsonDepth);
  try {
    header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::exception& e) {
    bad(path, "header is not valid JSON ({})", json_error_text(e));
  }
  if (!header.is_object()) bad(path, "header is not a JSON object");

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__ value for key \"{}\" is not a string", m.key());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad(path, "entry for tensor {} is not an object", name);
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end()) bad(path, "tensor {} has no dtype", name);
    if (sh == v.end()) bad(path, "tensor {} has no shape", name);
    if (off == v.end()) bad(path, "tensor {} has no data_offsets", name);
    if (!dt->is_string()) bad(path, "tensor {}: dtype is not a string", name);
    SafetensorsEntry e;
    const std::string dname = dt->get<std::string>();
    if (!parse_dtype(dname, &e.dtype))
      bad(path, "tensor {} has unknown dtype \"{}\" (supported: BF16, F16, F32, I32, I64, U8, I8, U32, F8_E4M3)", name,
          dname);
    if (!sh->is_array()) bad(path, "tensor {}: shape is not an array", name);
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        bad(path, "tensor {}: shape holds a value that is not a non-negative integer", name);
      uint64_t dv = d.get<uint64_t>();
      if (dv > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      e.shape.push_back(static_cast<int64_t>(dv & 0x7fffffffffffffffull));
      if (__builtin_mul_overflow(numel, dv, &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes) ||
        nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(path, "tensor {}: shape {} is too large", name, sh->dump());
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      bad(path, "tensor {}: data_offsets must be two non-negative integers", name);
    const uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en) bad(path, "tensor {}: data_offsets [{}, {}] begin after they end", name, b, en);
    if (en > data_size)
      bad(path, "tensor {}: data_offsets [{}, {}] run past the end of the data section ({} bytes)", name, b, en,
          data_size);
    if (en - b != nbytes)
      bad(path, "tensor {}: data_offsets [{}, {}] span {} bytes but {} {} needs {} bytes", name, b, en, en - b, dname,
          sh->dump(), nbytes);
    e.begin = data_offset_ + b;
    e.end = data_offset_ + en;
    auto [pos, inserted] = entries_.emplace(name, std::move(e));
    spans.push_back({b, en, &pos->first});
  }
  // Overlaps: sort by begin; each non-empty span must start at or after the previous non-empty one's end.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Span* prev = nullptr;
  for (const auto& s : spans) {
    if (s.begin == s.end) continue;
    if (prev && s.begin < prev->end)
      bad(path, "tensors {} [{}, {}) and {} [{}, {}) overlap", *prev->name, prev->begin, prev->end, *s.name, s.begin,
          s.end);
    prev = &s;
  }
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw NotFound(fmt::format("tensor {} is missing from {}", name, path_.string()));
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  if (e.begin % dtype_size(e.dtype) == 0) return Tensor(file_, e.dtype, e.shape, static_cast<size_t>(e.begin));
  // Misaligned for its element type (files from writers that do not order tensors by alignment): copy.
  Tensor t = Tensor::empty(e.shape, e.dtype);
  if (e.end > e.begin) std::memcpy(t.raw(), file_->bytes() + e.begin, e.end - e.begin);
  return t;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> r;
  r.reserve(entries_.size());
  for (const auto& [k, v] : entries_) r.push_back(k);
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// TensorStore

TensorStore::TensorStore(const std::vector<fs::path>& files) {
  if (files.empty()) throw InvalidInput("no safetensors files given");
  root_ = files.front().parent_path();
  source_ = files.front();
  sharded_ = files.size() > 1;
  for (const auto& f : files) {
    files_.push_back(std::make_shared<SafetensorsFile>(f));
    for (const auto& n : files_.back()->names()) {
      if (where_.count(n))
        throw InvalidInput(fmt::format("tensor {} appears in both {} and {}", n, files_[where_[n]]->path().string(),
                                       f.string()));
      where_[n] = files_.size() - 1;
    }
  }
}

TensorStore::TensorStore(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) throw NotFound(fmt::format("model weights not found: {} does not exist", p.string()));
  if (!fs::is_directory(p, ec)) {
    root_ = p.parent_path();
    source_ = p;
    files_.push_back(std::make_shared<SafetensorsFile>(p));
    for (const auto& n : files_[0]->names()) where_[n] = 0;
    return;
  }
  root_ = p;
  const fs::path index = p / "model.safetensors.index.json";
  const fs::path single = p / "model.safetensors";
  if (fs::exists(index, ec)) {
    sharded_ = true;
    source_ = index;
    json j;
    try {
      std::string text;
      {
        std::FILE* f = std::fopen(index.c_str(), "rb");
        if (!f) throw InvalidInput(fmt::format("cannot open {}: {}", index.string(), std::strerror(errno)));
        char buf[65536];
        size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
        std::fclose(f);
      }
      j = parse_json(text, "invalid safetensors index " + index.string());
    } catch (const json::exception& e) {
      throw InvalidInput(fmt::format("invalid safetensors index {}: not valid JSON ({})", index.string(),
                                     json_error_text(e)));
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw InvalidInput(fmt::format("invalid safetensors index {}: no \"weight_map\" object", index.string()));
    std::map<std::string, size_t> shard_ids;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        throw InvalidInput(fmt::format("invalid safetensors index {}: weight_map entry for {} is not a file name",
                                       index.string(), it.key()));
      const std::string shard = it.value().get<std::string>();
      fs::path rel(shard);
      if (shard.empty() || rel.is_absolute() || rel.filename() != rel)
        throw InvalidInput(fmt::format("invalid safetensors index {}: shard name \"{}\" for tensor {} is not a file "
                                       "name in the model directory",
                                       index.string(), shard, it.key()));
      auto sit = shard_ids.find(shard);
      if (sit == shard_ids.end()) {
        const fs::path sp = p / shard;
        if (!fs::exists(sp, ec))
          throw InvalidInput(fmt::format("shard {} named by {} (for tensor {}) is missing", sp.string(),
                                         index.string(), it.key()));
        files_.push_back(std::make_shared<SafetensorsFile>(sp));
        sit = shard_ids.emplace(shard, files_.size() - 1).first;
      }
      if (!files_[sit->second]->has(it.key()))
        throw InvalidInput(fmt::format("tensor {} is listed in {} but missing from its shard {}", it.key(),
                                       index.string(), files_[sit->second]->path().string()));
      where_[it.key()] = sit->second;
    }
    return;
  }
  if (fs::exists(single, ec)) {
    source_ = single;
    files_.push_back(std::make_shared<SafetensorsFile>(single));
    for (const auto& n : files_[0]->names()) where_[n] = 0;
    return;
  }
  throw NotFound(fmt::format("no model weights in {}: expected model.safetensors or model.safetensors.index.json",
                             p.string()));
}

TensorStore::TensorStore(std::map<std::string, Tensor> tensors, std::map<std::string, std::string> metadata,
                         const std::string& label)
    : root_(label), source_(label), memory_(std::move(tensors)), memory_metadata_(std::move(metadata)) {}

Tensor TensorStore::get(const std::string& name) const {
  if (auto m = memory_.find(name); m != memory_.end()) return m->second;
  auto it = where_.find(name);
  if (it == where_.end()) throw NotFound(fmt::format("tensor {} is missing from {}", name, source_.string()));
  return files_[it->second]->get(name);
}

Tensor TensorStore::require(const std::string& name, const Shape& expected) const {
  Tensor t = get(name);
  if (t.shape() != expected)
    throw InvalidInput(fmt::format("tensor {} in {} has shape {} but config.json implies {}", name,
                                   file_of(name).string(), shape_str(t.shape()), shape_str(expected)));
  return t;
}

Tensor TensorStore::optional(const std::string& name, const Shape& expected) const {
  if (!has(name)) return Tensor();
  return require(name, expected);
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> r;
  r.reserve(where_.size() + memory_.size());
  for (const auto& [k, v] : where_) r.push_back(k);
  for (const auto& [k, v] : memory_) r.push_back(k);
  return r;
}

const fs::path& TensorStore::file_of(const std::string& name) const {
  if (memory_.count(name)) return source_;
  auto it = where_.find(name);
  if (it == where_.end()) throw NotFound(fmt::format("tensor {} is missing from {}", name, source_.string()));
  return files_[it->second]->path();
}

std::vector<fs::path> TensorStore::files() const {
  std::vector<fs::path> r;
  for (const auto& f : files_) r.push_back(f->path());
  return r;
}

uint64_t TensorStore::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, t] : memory_) total += t.nbytes();
  for (const auto& [name, i] : where_) {
    const auto& e = files_[i]->entry(name);
    total += e.end - e.begin;
  }
  return total;
}

const std::map<std::string, std::string>& TensorStore::metadata_of(const std::string& name) const {
  if (memory_.count(name)) return memory_metadata_;
  auto it = where_.find(name);
  if (it == where_.end()) throw NotFound(fmt::format("tensor {} is missing from {}", name, source_.string()));
  return files_[it->second]->metadata();
}

const std::map<std::string, std::string>& TensorStore::metadata() const {
  return files_.empty() ? memory_metadata_ : files_.at(0)->metadata();
}

// ---------------------------------------------------------------------------------------------------------------
// Writer

namespace {

class FileWriter {
 public:
  explicit FileWriter(fs::path tmp) : tmp_(std::move(tmp)) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create {}: {}", tmp_.string(), std::strerror(errno));
  }
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("cannot write {}: {}", tmp_.string(), std::strerror(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  void commit(const fs::path& dest) {
    if (::fsync(fd_) != 0) fail("cannot flush {}: {}", tmp_.string(), std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close {}: {}", tmp_.string(), std::strerror(errno));
    if (::rename(tmp_.c_str(), dest.c_str()) != 0)
      fail("cannot rename {} to {}: {}", tmp_.string(), dest.string(), std::strerror(errno));
    committed_ = true;
    int dfd = ::open(dest.parent_path().empty() ? "." : dest.parent_path().c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  fs::path tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes the elements of a (possibly strided) host tensor in row-major order.
void write_tensor_data(FileWriter& w, const Tensor& t) {
  if (t.numel() == 0) return;
  if (t.is_contiguous()) {
    w.write(t.raw(), t.nbytes());
    return;
  }
  const size_t es = dtype_size(t.dtype());
  const int nd = t.ndim();
  // Innermost run: copy element by element into a buffer, flushing in chunks.
  std::vector<uint8_t> buf;
  buf.reserve(1 << 20);
  std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
  const uint8_t* base = static_cast<const uint8_t*>(t.raw());
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += idx[d] * t.stride(d);
    const uint8_t* src = base + off * static_cast<int64_t>(es);
    buf.insert(buf.end(), src, src + es);
    if (buf.size() >= (1 << 20)) {
      w.write(buf.data(), buf.size());
      buf.clear();
    }
    for (int d = nd - 1; d >= 0; d--) {
      if (++idx[d] < t.dim(d)) break;
      idx[d] = 0;
    }
  }
  if (!buf.empty()) w.write(buf.data(), buf.size());
}

}  // namespace

void write_safetensors(const fs::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : tensors) {
    VATIC_CHECK(!name.empty() && name != "__metadata__", "write_safetensors {}: invalid tensor name \"{}\"",
                path.string(), name);
    VATIC_CHECK(t.defined(), "write_safetensors {}: tensor {} is undefined", path.string(), name);
    VATIC_CHECK(t.device() == Device::CPU, "write_safetensors {}: tensor {} is not in host memory", path.string(),
                name);
    VATIC_CHECK(by_name.emplace(name, &t).second, "write_safetensors {}: duplicate tensor name {}", path.string(),
                name);
  }
  // Data order: larger element sizes first, then by name (what the reference writer does). With the header padded
  // to 8 bytes this keeps every tensor aligned to its element size, so readers can map them in place.
  std::vector<std::pair<std::string, const Tensor*>> sorted(by_name.begin(), by_name.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second->dtype()) > dtype_size(b.second->dtype());
  });
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::map<std::string, uint64_t> offsets;
  uint64_t offset = 0;
  for (const auto& [name, t] : sorted) {
    offsets[name] = offset;
    offset += t->nbytes();
  }
  for (const auto& [name, t] : by_name) {  // header keys in name order
    ordered_json e = ordered_json::object();
    e["dtype"] = dtype_name(t->dtype());
    e["shape"] = t->shape();
    e["data_offsets"] = {offsets[name], offsets[name] + t->nbytes()};
    header[name] = std::move(e);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = static_cast<uint8_t>((static_cast<uint64_t>(h.size()) >> (8 * i)) & 0xff);

  std::random_device rd;
  fs::path tmp = path;
  tmp += fmt::format(".tmp-{:x}", rd());
  FileWriter w(tmp);
  w.write(len, 8);
  w.write(h.data(), h.size());
  for (const auto& [name, t] : sorted) write_tensor_data(w, *t);
  w.commit(path);
}

}  // namespace vatic
