#pragma once
// When and how the CPU backend splits work across the OpenMP threads.
//
// Decide before entering a region rather than in a `#pragma omp parallel ... if (...)` clause: libgomp starts and
// ends even a one-thread region through its team code, with futex calls (about 115 per decode step of the demo
// model, 5-10 % of the step at one thread, before this file).
#include <omp.h>

#include <cstdint>

namespace vatic::cpu {

// Whether work worth splitting (`big`) has more than one thread to go to.
inline bool use_threads(bool big) { return big && omp_get_max_threads() > 1; }

// body(i) for i in [0, n): static split across the threads when use_threads(big), else a plain loop here.
template <typename F>
void parallel_for(int64_t n, bool big, F&& body) {
  if (!use_threads(big)) {
    for (int64_t i = 0; i < n; i++) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) body(i);
}

}  // namespace vatic::cpu
