#pragma once
// The token embedding tied to the output head, across a pipeline: the first stage holds it for
// the embedding, the last a copy for the head, and each computes a gradient for its own copy.
// Both stages add the other's gradient to their own: the same sum, so the two copies take the
// same update and stay equal (as Megatron-LM all-reduces the word embeddings over those stages).
#include <cstdint>
#include <vector>

#include "weft/comm/mesh.hpp"
#include "weft/core/buffer.hpp"
#include "weft/model/model.hpp"
#include "weft/parallel/pipeline/partition.hpp"

namespace weft::train {

class TiedEmbedding {
  public:
    // `tied`: the model ties its head to the embedding. `floats`: the gradient of unit 0 (the
    // embeddings) as this rank stores it. `bf16` (--grad-reduce-dtype bf16): the gradients
    // travel as bf16 and both stages sum the two rounded gradients in fp32 in the same order
    // (the first stage's first), so the copies stay bit-identical.
    TiedEmbedding(comm::Group& pp, const pipeline::Partition& part, bool tied, int64_t floats,
                  bool bf16 = false);

    // Whether this rank holds one of the two copies: tied, pp > 1, the first or the last stage.
    bool holds_copy() const { return peer_ >= 0; }
    // Between the two stages (nothing elsewhere): unit 0's gradient in `w` += the other's. Call
    // after every reduction of the step, before the optimizer.
    void sum_gradients(model::UnitAccess& w);
    // What sum_gradients keeps: the other stage's gradient (bf16: both, rounded).
    int64_t scratch_bytes() const { return holds_copy() ? 4 * floats_ : 0; }

  private:
    comm::Group& pp_;
    int64_t floats_;
    // Kept from the first step on (GPT-2's is 154 MB): allocated every step, its pages were
    // faulted in and zeroed again each time.
    Buffer other_;
    std::vector<uint16_t> mine16_, other16_;
    int peer_ = -1;  // the other stage; -1 when this rank holds no copy
    bool first_ = false, bf16_ = false;
};

}  // namespace weft::train
