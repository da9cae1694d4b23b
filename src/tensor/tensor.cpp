#include "tensor/tensor.h"

#include <cstring>

namespace vatic {

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

static Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, size_t byte_offset)
    : storage_(std::move(storage)), offset_(byte_offset), dtype_(dtype), shape_(std::move(shape)) {
  strides_ = contiguous_strides(shape_);
  for (auto d : shape_) VATIC_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape_));
  VATIC_CHECK(offset_ + nbytes() <= storage_->size(), "tensor {} at offset {} exceeds its storage of {} bytes",
              describe(), offset_, storage_->size());
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  return Tensor(host_storage(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype)), dtype, shape);
}

Tensor Tensor::uninitialized(const Shape& shape, DType dtype) {
  return Tensor(host_storage(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), false), dtype, shape);
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape) {
  VATIC_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_floats: {} values for shape {}",
              values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.raw(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_ints(const std::vector<int32_t>& values, const Shape& shape) {
  VATIC_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_ints: {} values for shape {}",
              values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::I32);
  std::memcpy(t.raw(), values.data(), values.size() * 4);
  return t;
}

// Called by most operations on every input; compares in place rather than building the contiguous strides.
bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (int i = ndim() - 1; i >= 0; i--) {
    if (strides_[i] != acc) return false;
    acc *= shape_[i];
  }
  return true;
}

Tensor Tensor::reshape(const Shape& shape) const {
  VATIC_CHECK(is_contiguous(), "reshape of a non-contiguous tensor {}", describe());
  Shape s = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == -1) {
      VATIC_CHECK(infer < 0, "reshape: more than one -1 in {}", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[infer] = known ? numel() / known : 0;
  VATIC_CHECK(shape_numel(s) == numel(), "reshape {} to {}: element counts differ", describe(), shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  if (d < 0) d += ndim();
  VATIC_CHECK(d >= 0 && d < ndim() && start >= 0 && start <= end && end <= shape_[d], "slice [{}, {}) of dim {} of {}",
              start, end, d, describe());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(start * strides_[d]) * dtype_size(dtype_);
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  if (d < 0) d += ndim();
  Tensor t = slice(d, index, index + 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  if (d0 < 0) d0 += ndim();
  if (d1 < 0) d1 += ndim();
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

void* Tensor::raw() const {
  VATIC_CHECK(storage_, "access to an undefined tensor");
  return static_cast<uint8_t*>(storage_->data()) + offset_;
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype_)) + shape_str(shape_); }

}  // namespace vatic
