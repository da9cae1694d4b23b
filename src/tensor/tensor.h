#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/storage.h"
#include "util/error.h"

namespace vatic {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// A typed, strided view of a Storage. Copying a Tensor copies the view, not the data.
// Host pointers (data<T>()) are only for code that knows the tensor lives on the CPU:
// kernels of the CPU backend, loaders and tests. Model code goes through ops/.
class Tensor {
 public:
  Tensor() = default;
  // A contiguous view of `storage` starting at `byte_offset`.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, size_t byte_offset = 0);

  // New contiguous zero-filled host tensor (device tensors come from their backend: ops/ops.h).
  static Tensor empty(const Shape& shape, DType dtype);
  // Like empty() without the zero fill, for outputs an operation writes completely.
  static Tensor uninitialized(const Shape& shape, DType dtype);
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::CPU; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t stride(int i) const { return strides_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  size_t byte_offset() const { return offset_; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Views (no copies).
  Tensor reshape(const Shape& shape) const;              // requires contiguous; one dim may be -1
  Tensor slice(int dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor select(int dim, int64_t index) const;           // drops dim
  Tensor transpose(int d0, int d1) const;

  // Host access.
  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  std::string describe() const;  // "BF16[4, 64]"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::F32;
  Shape shape_;
  Shape strides_;
};

}  // namespace vatic
