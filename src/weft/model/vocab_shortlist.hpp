#pragma once
// A shortlist of the vocabulary for rows that only propose tokens (a draft model's rows, Parallel
// Prompt Decoding's prompt rows: docs/decoding.md): their logits are computed over the listed ids
// alone, through a gathered copy of the head's rows, and every other id's logit is -inf. On a
// small model the head is most of a row's work (50257 x C against the blocks' few C x C), so a
// 4096-id shortlist makes such a row several times cheaper. The rows that decide the output (a
// verify's tree) never take it.
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace weft::model {

class VocabShortlist {
  public:
    // `ids`: distinct ids in [0, vocab); kept in increasing order.
    VocabShortlist(std::vector<int32_t> ids, int64_t vocab);
    const std::vector<int32_t>& ids() const { return ids_; }
    // The rows of the head weight `w` [vocab, C] at the ids, [ids, C]: gathered on the first call
    // for that weight and kept (a weight does not move while a model runs, and the bf16 products
    // round the copy once, by its address).
    const float* head(const float* w, int64_t C) const;
    // Writes logits[vocab] from the shortlist's `small` [ids]: -inf at every other id.
    void scatter(float* logits, const float* small) const;

  private:
    std::vector<int32_t> ids_;
    int64_t vocab_;
    mutable std::map<const float*, std::vector<float>> heads_;
};

// The `n` ids counted most often in `counts` [vocab] (ties by id), n clamped to the vocabulary.
std::vector<int32_t> most_frequent(std::span<const int64_t> counts, int64_t n);

}  // namespace weft::model
