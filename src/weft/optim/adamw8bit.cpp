// 8-bit AdamW (Dettmers et al. 2022, bitsandbytes' AdamW8bit with blockwise quantisation): both
// moments stored as 8-bit codes of the dynamic map (blockwise8.hpp; signed for m, unsigned for v)
// with one fp32 absmax per block of 2048 values; tensors under 4096 values (biases, norms), the
// embeddings (unit 0) and alignment padding keep fp32 moments. The embeddings are kept fp32 as
// Hugging Face's Trainer does with bitsandbytes (its override for nn.Embedding): the rows of
// tokens a batch lacks get no gradient, their m and v decay, and v, the square, falls below the
// smallest code of its block (3.25e-7 of the absmax) while m does not: m / (sqrt(0) + eps) is a
// step of 1e4 lr. Measured on tiny: the loss spiked from 6.5 to 9.5 every few steps past step
// 100 with them quantised. A step dequantises a block, updates it in fp32 as AdamW
// does, and requantises it with its new absmax: about 2 bytes a parameter instead of 8.
//
// Blocks start at each tensor's first element and every 2048 after, so a block is the same
// values whatever the layout, except where a ZeRO slice boundary cuts one: each rank then holds
// the piece on its side as a block of its own (ZeroLayout cuts units into equal slices, not at
// block boundaries). A sharded run therefore differs from a single process only in the absmax
// of the few blocks a slice boundary cuts. Checkpoints store the moments dequantised to fp32
// (read_moment) and requantise them on load (write_moment): the format is AdamW's, any layout
// resumes any other, and the cost is one requantisation of each block at a resume.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "weft/core/error.hpp"
#include "weft/kernels/adamw.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/optim/blockwise8.hpp"
#include "weft/optim/optimizer.hpp"
#include "weft/optim/registry.hpp"

namespace weft::optim {

namespace {

constexpr int64_t kAlign = 16;  // bytes; every piece's state starts aligned

int64_t align_up(int64_t x) {
    return (x + kAlign - 1) / kAlign * kAlign;
}

class AdamW8bit : public Optimizer {
  public:
    AdamW8bit(const model::ParamLayout& layout, int64_t begin, int64_t end, bool allocate)
        : Optimizer(layout, begin, end) {
        int64_t off[3] = {0, 0, 0};
        for (const Segment& s : segments()) {
            Piece p{s.begin,
                    s.end,
                    s.tensor && s.tensor->unit != 0 && s.tensor->numel_stored >= kQuantMinimum,
                    {},
                    0};
            if (p.quantised) p.phase = (this->begin() + s.begin - s.tensor->offset) % kQuantBlock;
            for (int k = 0; k < 3; ++k) p.off[k] = off[k];
            const int64_t n = s.end - s.begin;
            off[0] = align_up(off[0] + (p.quantised ? n : 4 * n));
            off[1] = align_up(off[1] + (p.quantised ? n : 4 * n));
            off[2] += p.quantised ? 8 * (block_of(p, s.end - 1) + 1) : 0;
            pieces_.push_back(p);
        }
        set_state_bytes({off[0], off[1], off[2]});
        if (allocate) this->allocate();
    }

    int moments() const override { return 2; }

    int64_t state_offset(int k, int64_t a) const override {
        if (a == size()) return state_bytes(k);
        const Piece& p = piece_at(a);
        const int64_t i = a - p.begin;
        if (k == 2) return p.off[2] + (p.quantised ? 8 * block_of(p, a) : 0);
        return p.off[k] + (p.quantised ? i : 4 * i);
    }

    std::string state_name(int k) const override {
        static const char* names[] = {"exp_avg_q8", "exp_avg_sq_q8", "absmax"};
        return names[k];
    }

    int64_t align_down(int64_t a) const override {
        if (a >= size()) return size();
        const Piece& p = piece_at(a);
        return p.quantised ? block_begin(p, block_of(p, a)) : a;
    }

    void step_range(float* params, const float* grads, std::byte* const* states, int64_t a,
                    int64_t b, const StepArgs& s) override {
        WEFT_PROFILE("adamw8bit");
        WEFT_CHECK(align_down(a) == a && (b == size() || align_down(b) == b),
                   "internal: adamw8bit steps [{}, {}), not on block boundaries", a, b);
        const int64_t base[3] = {state_offset(0, a), state_offset(1, a), state_offset(2, a)};
        auto at = [&](int k, int64_t x) { return states[k] + (state_offset(k, x) - base[k]); };
        kernels::AdamWParams kp;
        kp.lr = s.lr;
        kp.beta1 = s.c.beta1;
        kp.beta2 = s.c.beta2;
        kp.eps = s.c.eps;
        kp.step = s.t;
        kp.grad_scale = s.grad_scale;
        for (const Piece& p : pieces_) {
            const int64_t lo = std::max(a, p.begin), hi = std::min(b, p.end);
            if (lo >= hi) continue;
            kp.weight_decay = decays(p) ? s.c.weight_decay : 0.0f;
            if (!p.quantised) {
                kernels::adamw_update(params + lo, grads + lo, reinterpret_cast<float*>(at(0, lo)),
                                      reinterpret_cast<float*>(at(1, lo)), hi - lo, kp);
                continue;
            }
            const int64_t first = block_of(p, lo), last = block_of(p, hi - 1);
#pragma omp parallel for schedule(static) if (last > first)
            for (int64_t j = first; j <= last; ++j) {
                const int64_t bl = block_begin(p, j), bh = std::min(p.end, block_begin(p, j + 1));
                update_block(params + bl, grads + bl, reinterpret_cast<uint8_t*>(at(0, bl)),
                             reinterpret_cast<uint8_t*>(at(1, bl)),
                             reinterpret_cast<float*>(at(2, bl)), bh - bl, kp);
            }
        }
    }

    using Optimizer::read_moment;
    using Optimizer::write_moment;

    void read_moment(const std::byte* const* states, int64_t base, int k, int64_t a, int64_t n,
                     float* out) const override {
        auto at = [&](int j, int64_t x) {
            return states[j] + (state_offset(j, x) - state_offset(j, base));
        };
        for (const Piece& p : pieces_) {
            const int64_t lo = std::max(a, p.begin), hi = std::min(a + n, p.end);
            if (lo >= hi) continue;
            if (!p.quantised) {
                std::memcpy(out + (lo - a), at(k, lo), size_t(hi - lo) * sizeof(float));
                continue;
            }
            const auto& map = dynamic_map(k == 0);
            for (int64_t x = lo; x < hi; ++x) {
                const uint8_t q = uint8_t(*at(k, x));
                out[x - a] = map[q] * reinterpret_cast<const float*>(at(2, x))[k];
            }
        }
    }

    void write_moment(std::byte* const* states, int64_t base, int k, int64_t a, int64_t n,
                      const float* in) override {
        WEFT_CHECK(align_down(a) == a && (a + n == size() || align_down(a + n) == a + n),
                   "internal: adamw8bit writes [{}, {}), not on block boundaries", a, a + n);
        auto at = [&](int j, int64_t x) {
            return states[j] + (state_offset(j, x) - state_offset(j, base));
        };
        for (const Piece& p : pieces_) {
            const int64_t lo = std::max(a, p.begin), hi = std::min(a + n, p.end);
            if (lo >= hi) continue;
            if (!p.quantised) {
                std::memcpy(at(k, lo), in + (lo - a), size_t(hi - lo) * sizeof(float));
                continue;
            }
            for (int64_t j = block_of(p, lo); j <= block_of(p, hi - 1); ++j) {
                const int64_t bl = block_begin(p, j), bh = std::min(p.end, block_begin(p, j + 1));
                reinterpret_cast<float*>(at(2, bl))[k] = quantize_block(
                    in + (bl - a), bh - bl, k == 0, reinterpret_cast<uint8_t*>(at(k, bl)));
            }
        }
    }

  private:
    struct Piece {
        int64_t begin, end;  // a segment
        bool quantised;
        int64_t off[3];  // byte offsets of its first element in m, v and the absmax pairs
        int64_t phase;   // how far into its first block (counted from its tensor's start) it begins
    };

    static int64_t block_of(const Piece& p, int64_t x) {
        return (x - p.begin + p.phase) / kQuantBlock;
    }
    static int64_t block_begin(const Piece& p, int64_t j) {
        return j == 0 ? p.begin : p.begin + j * kQuantBlock - p.phase;
    }
    bool decays(const Piece& p) const {
        return segments()[size_t(&p - pieces_.data())].decay();
    }
    const Piece& piece_at(int64_t a) const {
        auto it = std::upper_bound(pieces_.begin(), pieces_.end(), a,
                                   [](int64_t x, const Piece& p) { return x < p.begin; });
        return *(it - 1);
    }

    // One block: dequantise, AdamW in fp32 (the kernel's portable formula), requantise.
    static void update_block(float* w, const float* grad, uint8_t* qm, uint8_t* qv, float* absmax,
                             int64_t n, const kernels::AdamWParams& p) {
        float m[kQuantBlock], v[kQuantBlock];
        dequantize_block(qm, n, absmax[0], true, m);
        dequantize_block(qv, n, absmax[1], false, v);
        const float inv_bc1 = float(1.0 / (1.0 - std::pow(double(p.beta1), double(p.step))));
        const float inv_bc2 = float(1.0 / (1.0 - std::pow(double(p.beta2), double(p.step))));
        for (int64_t i = 0; i < n; ++i) {
            const float g = grad[i] * p.grad_scale;
            m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
            v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
            const float mhat = m[i] * inv_bc1, vhat = v[i] * inv_bc2;
            w[i] -= p.lr * (mhat / (std::sqrt(vhat) + p.eps) + p.weight_decay * w[i]);
        }
        absmax[0] = quantize_block(m, n, true, qm);
        absmax[1] = quantize_block(v, n, false, qv);
    }

    std::vector<Piece> pieces_;
};

}  // namespace

OptimizerSpec adamw8bit_spec() {
    return {"adamw8bit",
            "AdamW with blockwise 8-bit moments (bitsandbytes' dynamic map, absmax per 2048)",
            2.0 + 8.0 / double(kQuantBlock),
            true,
            0.9f,
            0.95f,
            {4, 4, 8.0 / double(kQuantBlock)},
            factory<AdamW8bit>()};
}

}  // namespace weft::optim
