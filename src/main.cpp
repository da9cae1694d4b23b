#include <unistd.h>

#include <cstdlib>

#include "cli/cli.h"

int main(int argc, char** argv) {
  // The OpenMP runtime reads how long idle workers spin when it loads, before main. A decode step is a hundred or
  // so small parallel operations: workers that sleep at once pay a futex wake-up for each (two threads decoded the
  // demo model at 280 tok/s where spinning ones reach 1,000 and one thread 700, on an idle 2-core machine), while
  // workers that spin without end keep spinning between requests. vatic's default is a bounded spin, about a
  // millisecond, then sleep: re-exec once with it set, unless the user chose (OMP_WAIT_POLICY=passive suits a
  // machine whose cores are busy with other work, where waiting on a preempted worker costs more than the split
  // saves).
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    setenv("GOMP_SPINCOUNT", "30000", 1);
    execv("/proc/self/exe", argv);  // only returns on failure; then run with the runtime's default
  }
  return vatic::cli::main(argc, argv);
}
