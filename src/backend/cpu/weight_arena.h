#pragma once
// A model's weights in the CPU backend's own memory instead of the store's file mappings.
//
// A store keeps every tensor in a file of its own, so the weights of a decode step lie in a hundred or more small
// mappings of page-cache pages, each 4 KB page a TLB entry (in a virtual machine, each miss a two-level walk). The
// demo model's 23 MB of bf16 are some 5,600 pages, more than the second-level TLB holds, and every decode step
// walked them again. Copied one after the other into anonymous memory that the kernel may back with 2 MB pages
// (madvise MADV_HUGEPAGE), the same bytes are a dozen pages: the demo model's bf16 decode, one thread or two, was
// 7-32 % faster (best of alternating runs; docs/performance.md, fourteenth round).
//
// The copies count against a budget, so that a model too large to keep twice (the copy and the page cache it came
// from, until the kernel evicts the latter) stays mapped: by default half of the memory available when the first
// weight is placed, `VATIC_CPU_WEIGHT_COPY_MB` otherwise (0: every weight stays mapped). A tensor over the budget
// left is returned as it is. The values are the same bytes either way.
#include <cstddef>

#include "tensor/tensor.h"

namespace vatic::cpu {

// A contiguous copy of the host tensor `t` in huge-page-backed memory when it fits the budget, else `t` itself.
Tensor resident_copy(const Tensor& t);

// Bytes of the copies alive (for tests and benchmarks).
size_t resident_bytes();

}  // namespace vatic::cpu
