#pragma once
// Stop strings on streamed text: text that might be the start of a stop string is held back until it is certain,
// and the output ends just before the first match.
#include <string>
#include <string_view>
#include <vector>

namespace vatic::runner {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds text; returns what is now certain to be output. After a match, stopped() is true and later calls return "".
  std::string push(std::string_view text);
  // End of output: returns everything still held back (no match possible any more).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace vatic::runner
