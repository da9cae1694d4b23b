#pragma once
// safetensors checkpoints: zero-copy reading of single files and sharded model directories, and writing.
//
// File layout: u64 little-endian N, N bytes of JSON header, then the data section. The header maps tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) and may hold a
// "__metadata__" object of string values. Every malformed input is refused with vatic::InvalidInput naming the file.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace vatic {

// One tensor's record in a safetensors header.
struct SafetensorsEntry {
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;  // absolute byte offsets in the file (data section start already added)
  uint64_t end = 0;
};

// One mapped .safetensors file. Tensors returned by get() are views into the mapping and keep it alive (a tensor
// whose offset is not a multiple of its element size is copied into aligned host memory instead).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // Throws vatic::NotFound naming the tensor and the file when absent.
  Tensor get(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return entries_.size(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::shared_ptr<MappedFile>& mapping() const { return file_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts in the file

 private:
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_offset_ = 0;
};

// The weights of a model: a directory holding `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"weight_map": {tensor: shard file}}), or a single .safetensors file path.
class TensorStore {
 public:
  explicit TensorStore(const std::filesystem::path& dir_or_file);
  // Tensors spread over several safetensors files (e.g. store blobs); a name may appear in only one of them.
  explicit TensorStore(const std::vector<std::filesystem::path>& files);
  // Tensors already in memory (on any device) rather than in files, e.g. random weights made for a benchmark:
  // `label` stands for the file in messages; `metadata` is what a file's __metadata__ would hold.
  TensorStore(std::map<std::string, Tensor> tensors, std::map<std::string, std::string> metadata,
              const std::string& label);

  bool has(const std::string& name) const { return where_.count(name) != 0 || memory_.count(name) != 0; }
  // Throws vatic::NotFound: "tensor NAME is missing from FILE".
  Tensor get(const std::string& name) const;
  // Like get(); also throws vatic::InvalidInput when the shape differs:
  // "tensor NAME in FILE has shape [64, 32] but config.json implies [64, 64]".
  Tensor require(const std::string& name, const Shape& expected_shape) const;
  // Like require(name, shape) but absent tensors yield an undefined Tensor.
  Tensor optional(const std::string& name, const Shape& expected_shape) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return where_.size() + memory_.size(); }
  // The file a tensor lives in (throws NotFound when absent).
  const std::filesystem::path& file_of(const std::string& name) const;
  // Every file the store reads (shards in index order of first appearance; the index file is not listed).
  std::vector<std::filesystem::path> files() const;  // none for a store in memory
  const std::filesystem::path& root() const { return root_; }
  // Where "missing" errors point: the single file, or the index file of a sharded checkpoint.
  const std::filesystem::path& source() const { return source_; }
  bool sharded() const { return sharded_; }
  uint64_t total_bytes() const;  // sum of tensor byte sizes
  const std::map<std::string, std::string>& metadata() const;  // of the first file
  // Of the file holding `name` (throws NotFound when absent).
  const std::map<std::string, std::string>& metadata_of(const std::string& name) const;

 private:
  std::filesystem::path root_;
  std::filesystem::path source_;
  bool sharded_ = false;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
  std::map<std::string, Tensor> memory_;  // a store in memory: its tensors (files_ is empty)
  std::map<std::string, std::string> memory_metadata_;
};

// Writes tensors (host memory, contiguous or strided) into a safetensors file atomically (temp file in the same
// folder, fsync, rename, fsync of the folder). The header is padded with spaces to a multiple of 8 bytes and lists
// tensors in name order; the data section holds them by descending element size, then name (as the reference
// writer does), so every tensor is aligned to its element size. Names must be unique, non-empty, not "__metadata__".
using NamedTensor = std::pair<std::string, Tensor>;
void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace vatic
