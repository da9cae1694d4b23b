#include "cli/cli.h"

int main(int argc, char** argv) { return vatic::cli::main(argc, argv); }
