#pragma once
// The bf16 working copy of `--dtype bf16 --offload optimizer` (docs/memory.md): the fp32 master
// weights live with the moments in the offload files, and memory holds the weights and the
// gradients the model reads and writes, each tensor as bf16 when every use of it rounds it to
// bf16 anyway (the block matrices, read only by the bf16 products: rounding them once here gives
// the products the bits they would round from the master) and as fp32 otherwise (embeddings,
// norms, biases, which are read in fp32). A unit the model asks for is widened into an fp32
// temporary (released after use, as a ZeRO-3 gather is); a unit of fp32 tensors only is handed
// out in place. Gradients of a unit accumulate in an fp32 temporary over its backward and are
// added into the stored copy when the unit is ready: a bf16 gradient is rounded once per
// micro-batch.
#include <cstdint>
#include <functional>
#include <vector>

#include "weft/core/buffer.hpp"
#include "weft/model/params.hpp"
#include "weft/parallel/buffer_pool.hpp"

namespace weft::parallel {

// Whether the working copy keeps tensor `t` of `layout` as bf16: a matrix of a transformer
// block (not the embeddings, the final norm or a head, not a vector, not an expert's).
bool kept_bf16(const model::ParamLayout& layout, const model::ParamSpec& t);

class WorkingCopy {
  public:
    // Over the whole padded buffer `layout` (which must outlive it); temporaries from `pool`.
    WorkingCopy(const model::ParamLayout& layout, BufferPool& pool);

    // Bytes of the stored weights (the gradients take as many) for `layout`.
    static int64_t stored_bytes(const model::ParamLayout& layout);
    // Floats of the largest unit that is widened (its temporary), 0 if none is.
    static int64_t widened_floats(const model::ParamLayout& layout);

    // The model's access (model::UnitAccess): the unit's fp32 weights until release, its fp32
    // gradient until grads_ready adds it into the stored gradients.
    // `reduce` (data parallelism: sums n floats over the ranks in place) is applied to the
    // unit's gradient before it is stored: to a widened unit's every micro-batch, to a unit
    // kept in place on the last only (`last_micro_batch`), where its sum is whole.
    using Reduce = std::function<void(float* data, int64_t n)>;
    float* params(int unit);
    float* grads(int unit);
    void release(int unit);
    void grads_ready(int unit, const Reduce& reduce = {}, bool last_micro_batch = true);
    void zero_grads();

    // Elements [begin, begin + n) of the padded buffer as fp32 (padding as zeros), and the
    // weights set from fp32 (rounded where kept as bf16).
    void read_params(int64_t begin, int64_t n, float* out) const;
    void read_grads(int64_t begin, int64_t n, float* out) const;
    void write_params(int64_t begin, int64_t n, const float* in);
    // kernels::sum_squares of grads [begin, begin + n) as fp32, bit for bit as one call on them.
    double grad_sum_squares(int64_t begin, int64_t n) const;

  private:
    struct Place {
        bool half;   // stored in half_ (else full_)
        int64_t at;  // index of the tensor's first element there
    };
    // f(tensor index, lo, hi) for the part [lo, hi) of every tensor overlapping [begin, end).
    template <class F>
    void for_pieces(int64_t begin, int64_t end, F f) const;
    void read(bool grads, int64_t begin, int64_t n, float* out) const;
    float* widen(int unit, const float* full, const uint16_t* half);

    const model::ParamLayout& layout_;
    BufferPool& pool_;
    std::vector<Place> place_;       // per tensor
    std::vector<int64_t> in_place_;  // per unit: its offset in full_ when it is all fp32, else -1
    Buffer full_, gfull_;            // the fp32 tensors
    std::vector<uint16_t> half_, ghalf_;
    std::vector<Buffer> temp_, gtemp_;  // per unit: widened weights, accumulating gradients
};

}  // namespace weft::parallel
