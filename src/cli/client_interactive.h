#pragma once
#include <string>

#include "cli/client_api.h"
#include "cli/client_session.h"

namespace vatic::cli {

// The `vatic run` chat loop: prompts, `"""` multi-line input and the /commands. With `editline`, input is read
// through libedit (line editing, history in ~/.vatic/history, Ctrl-C clears the line, Ctrl-D exits); otherwise
// line by line from stdin. `first_prompt`, when not empty, is sent before the first read. Returns the exit code.
int run_interactive(const ApiClient& client, Session& session, const std::string& first_prompt, bool editline);

}  // namespace vatic::cli
