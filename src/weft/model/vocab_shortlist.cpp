#include "weft/model/vocab_shortlist.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "weft/core/error.hpp"

namespace weft::model {

VocabShortlist::VocabShortlist(std::vector<int32_t> ids, int64_t vocab)
    : ids_(std::move(ids)), vocab_(vocab) {
    std::sort(ids_.begin(), ids_.end());
    WEFT_CHECK(!ids_.empty() && ids_.front() >= 0 && ids_.back() < vocab &&
                   std::adjacent_find(ids_.begin(), ids_.end()) == ids_.end(),
               "internal: a vocabulary shortlist of {} ids that are not distinct ids below {}",
               ids_.size(), vocab);
}

const float* VocabShortlist::head(const float* w, int64_t C) const {
    std::vector<float>& h = heads_[w];
    if (h.empty()) {
        h.resize(ids_.size() * size_t(C));
        for (size_t i = 0; i < ids_.size(); ++i)
            std::copy_n(w + int64_t(ids_[i]) * C, C, h.data() + int64_t(i) * C);
    }
    return h.data();
}

void VocabShortlist::scatter(float* logits, const float* small) const {
    std::fill_n(logits, vocab_, -std::numeric_limits<float>::infinity());
    for (size_t i = 0; i < ids_.size(); ++i) logits[ids_[i]] = small[i];
}

std::vector<int32_t> most_frequent(std::span<const int64_t> counts, int64_t n) {
    std::vector<int32_t> ids(counts.size());
    std::iota(ids.begin(), ids.end(), 0);
    n = std::clamp<int64_t>(n, 0, int64_t(ids.size()));
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
        return counts[size_t(a)] > counts[size_t(b)] ||
               (counts[size_t(a)] == counts[size_t(b)] && a < b);
    });
    ids.resize(size_t(n));
    return ids;
}

}  // namespace weft::model
