#pragma once
// A generated text checked against the request's stop strings as it grows token by token: the
// text is released to the client except for a tail that may still become a stop string (or is
// an unfinished UTF-8 character), so that a stream never sends what a stop string then ends.
#include <string>
#include <vector>

namespace weft::serve {

class StopText {
  public:
    explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}
    // Adds one token's bytes; returns the text now safe to send. `stopped`: a stop string
    // appeared; the text before it has been returned and the rest is dropped.
    std::string add(const std::string& piece, bool& stopped);
    // The held-back tail, at the end of the generation.
    std::string flush();

  private:
    std::vector<std::string> stops_;
    std::string text_;
    size_t sent_ = 0;
};

}  // namespace weft::serve
