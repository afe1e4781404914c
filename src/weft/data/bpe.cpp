#include "weft/data/bpe.hpp"

#include <mutex>
#include <queue>

namespace weft::data {

namespace {

// encoder.py's bytes_to_unicode, inverted: code point -> byte, or -1 if no byte maps to it.
// Printable Latin-1 bytes stand for themselves; the other 68 bytes take 256, 257, ... in order.
struct UnspellTable {
    int byte_of[256 + 68];
    UnspellTable() {
        for (int& b : byte_of) b = -1;
        int next = 256;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            byte_of[printable ? b : next++] = b;
        }
    }
};

}  // namespace

std::optional<std::string> byte_level_unspell(std::string_view spelled) {
    static const UnspellTable table;
    std::string bytes;
    bytes.reserve(spelled.size());
    for (size_t i = 0; i < spelled.size();) {
        auto b0 = static_cast<unsigned char>(spelled[i]);
        uint32_t cp = b0;
        size_t len = 1;
        // The alphabet ends below U+0800, so one- and two-byte UTF-8 is all there is to read.
        if (b0 >= 0xC0 && b0 < 0xE0 && i + 1 < spelled.size() &&
            (static_cast<unsigned char>(spelled[i + 1]) & 0xC0) == 0x80) {
            cp = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(spelled[i + 1]) & 0x3F);
            len = 2;
        } else if (b0 >= 0x80) {
            return std::nullopt;
        }
        if (cp >= std::size(table.byte_of) || table.byte_of[cp] < 0) return std::nullopt;
        bytes += static_cast<char>(table.byte_of[cp]);
        i += len;
    }
    return bytes;
}

// encode() is const and may be called from several threads, so the memo has its own lock.
struct BpeModel::Cache {
    // Looks up by string_view without building a string. A member, not file-local: a type with
    // internal linkage inside a class of the library's namespace draws -Wsubobject-linkage.
    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

bool BpeModel::add_merge(int32_t left, int32_t right, int32_t result) {
    auto rank = static_cast<int32_t>(merges_.size());
    return merges_.emplace(uint64_t(uint32_t(left)) << 32 | uint32_t(right), Merge{rank, result})
        .second;
}

// Hugging Face's Word::merge_all, which for merges learned in order (as every real file's are)
// also gives encoder.py's bpe(): repeatedly merge the adjacent pair of lowest rank, the leftmost
// of equals first. A heap over a linked list keeps a long pre-token (a run of a thousand spaces)
// at O(n log n) where rescanning the word after every merge would be O(n^2).
void BpeModel::merge(std::vector<int32_t>& word) const {
    struct Symbol {
        int32_t token;
        int32_t prev, next;  // -1 at the ends
        bool alive;
    };
    struct Candidate {
        int32_t rank, pos, result;
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    const auto n = static_cast<int32_t>(word.size());
    std::vector<Symbol> sym(word.size());
    for (int32_t i = 0; i < n; ++i) sym[i] = {word[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto push = [&](int32_t pos) {
        auto it = merges_.find(uint64_t(uint32_t(sym[pos].token)) << 32 |
                               uint32_t(sym[sym[pos].next].token));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.result});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
        Candidate top = queue.top();
        queue.pop();
        Symbol& s = sym[top.pos];
        if (!s.alive || s.next < 0) continue;
        // An entry goes stale when either side has merged since it was pushed.
        auto it = merges_.find(uint64_t(uint32_t(s.token)) << 32 | uint32_t(sym[s.next].token));
        if (it == merges_.end() || it->second.result != top.result) continue;
        Symbol& right = sym[s.next];
        s.token = top.result;
        right.alive = false;
        s.next = right.next;
        if (s.next >= 0) sym[s.next].prev = top.pos;
        if (s.prev >= 0) push(s.prev);
        if (s.next >= 0) push(top.pos);
    }
    size_t out = 0;
    for (int32_t i = 0; i >= 0; i = sym[i].next) word[out++] = sym[i].token;
    word.resize(out);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
        out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
        return;
    }
    {
        std::lock_guard lock(cache_->mutex);
        if (auto it = cache_->map.find(piece); it != cache_->map.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> word(piece.size());
    for (size_t i = 0; i < piece.size(); ++i)
        word[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    merge(word);
    out.insert(out.end(), word.begin(), word.end());
    std::lock_guard lock(cache_->mutex);
    // Bounded, so that encoding an endless stream of novel words cannot eat all memory.
    if (cache_->map.size() >= (size_t(1) << 20)) cache_->map.clear();
    cache_->map.emplace(std::string(piece), std::move(word));
}

}  // namespace weft::data
