#include <unistd.h>

#include <cstdlib>

#include "cli/cli.h"

int main(int argc, char** argv) {
  // The OpenMP runtime reads its wait policy when it loads, before main. Spinning workers steal the core the
  // compute thread needs whenever the machine has other work (and between the small operations of a decode step),
  // so vatic prefers sleeping workers unless the user chose otherwise: re-exec once with the policy set.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // only returns on failure; then run with the default policy
  }
  return vatic::cli::main(argc, argv);
}
