#include "weft/serve/stop_text.hpp"

#include <algorithm>

namespace weft::serve {

namespace {
// Bytes at the end of s that begin a UTF-8 character not yet complete.
size_t unfinished_utf8(const std::string& s) {
    for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
        const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > back ? back : 0;
    }
    return 0;
}
}  // namespace

std::string StopText::add(const std::string& piece, bool& stopped) {
    text_ += piece;
    stopped = false;
    // A match starts at or after sent_: whatever could begin one was held back.
    size_t first = std::string::npos;
    for (const std::string& s : stops_)
        if (!s.empty()) first = std::min(first, text_.find(s, sent_));
    if (first != std::string::npos) {
        stopped = true;
        std::string out = text_.substr(sent_, first - sent_);
        sent_ = text_.size();
        return out;
    }
    size_t hold = unfinished_utf8(text_);
    for (const std::string& s : stops_)
        for (size_t k = std::min(s.size(), text_.size() - sent_ + 1); k-- > hold + 1;)
            if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    std::string out = text_.substr(sent_, text_.size() - hold - sent_);
    sent_ = text_.size() - hold;
    return out;
}

std::string StopText::flush() {
    std::string out = text_.substr(sent_);
    sent_ = text_.size();
    return out;
}

}  // namespace weft::serve
