#include "weft/model/params.hpp"

#include <fmt/ranges.h>

#include <cmath>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/model/family.hpp"
#include "weft/model/limits.hpp"

namespace weft::model {

namespace {
// A tensor of more than two dimensions (the MoE experts' [E, F, C]) is rows of its first
// dimension, each the product of the others long.
int64_t trailing(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
    return n;
}
}  // namespace

int64_t ParamSpec::numel_logical() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

const ParamSpec& ParamLayout::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return t;
    fail("no parameter named '{}' in the model", name);
}

ParamDeclarer::ParamDeclarer(ParamLayout& layout, const ModelShard& shard, int64_t units)
    : layout_(layout), shard_(shard) {
    WEFT_CHECK(shard.units.empty() || int64_t(shard.units.size()) == units,
               "internal: a model shard names {} units, the model has {}", shard.units.size(),
               units);
    WEFT_CHECK(shard.tp >= 1 && shard.tp_rank >= 0 && shard.tp_rank < shard.tp,
               "internal: tensor-parallel rank {} of {}", shard.tp_rank, shard.tp);
    WEFT_CHECK(shard.ep >= 1 && shard.ep_rank >= 0 && shard.ep_rank < shard.ep,
               "internal: expert-parallel rank {} of {}", shard.ep_rank, shard.ep);
    layout.tp_rank = shard.tp_rank;
    layout.tp = shard.tp;
    layout.ep_rank = shard.ep_rank;
    layout.ep = shard.ep;
}

void ParamDeclarer::expert_tensor(std::string name, std::vector<int64_t> shape, Init init,
                                  float init_std) {
    const int64_t E = shape[0], ep = shard_.ep;
    WEFT_CHECK(E % ep == 0, "{}: {} experts do not split over expert-parallel degree {}", name, E,
               ep);
    const size_t at = layout_.tensors.size();
    expert_ = true;
    tensor(std::move(name), std::move(shape), init, init_std, kReplicated, E / ep);
    expert_ = false;
    if (layout_.tensors.size() == at) return;  // unit not held
    layout_.tensors.back().first_row = shard_.ep_rank * (E / ep);
}

void ParamDeclarer::tensor(std::string name, std::vector<int64_t> shape, Init init, float init_std,
                           TpSplit split, int64_t rows_stored) {
    // Before anything multiplies the sizes: products past int64 would wrap.
    int64_t elements = 1;
    for (int64_t d : shape)
        WEFT_CHECK(!__builtin_mul_overflow(elements, d, &elements) && elements <= kMaxParameters,
                   "tensor {} of shape [{}] is past what weft can hold (at most 2^53 = {} "
                   "elements); expected a smaller width",
                   name, fmt::join(shape, ", "), kMaxParameters);
    if (!shard_.holds(unit_)) return;
    const int tp = shard_.tp;
    ParamSpec p;
    p.name = std::move(name);
    p.rows_stored = rows_stored < 0 ? shape[0] : rows_stored;
    p.cols_stored = trailing(shape);
    const int64_t split_size = split.dim == 0 ? p.rows_stored : split.dim == 1 ? p.cols_stored : 0;
    WEFT_CHECK(split.dim < 0 || split_size % (int64_t(tp) * split.blocks) == 0,
               "{}: dimension {} of size {} does not split into {} blocks over tensor-parallel "
               "degree {}",
               p.name, split.dim, split_size, split.blocks, tp);
    if (split.dim == 0) p.rows_stored /= tp;
    if (split.dim == 1) p.cols_stored /= tp;
    p.shape = std::move(shape);
    p.numel_stored = p.rows_stored * p.cols_stored;
    p.expert = expert_;
    if (int64_t(layout_.tensors.size()) > first_tensor_ &&
        layout_.tensors.back().expert != p.expert) {
        const int64_t a = shard_.expert_align, in_unit = cursor_ - unit_start_;
        cursor_ = unit_start_ + (in_unit + a - 1) / a * a;
    }
    p.offset = cursor_;
    p.unit = unit_;
    p.decay = p.shape.size() >= 2;
    p.init = init;
    p.init_std = init_std;
    p.tp_dim = split.dim;
    p.tp_blocks = split.blocks;
    cursor_ += (p.numel_stored + 15) / 16 * 16;
    layout_.tensors.push_back(std::move(p));
}

void ParamDeclarer::end_unit() {
    const int n = int(layout_.tensors.size()) - first_tensor_;
    layout_.units.push_back(
        {unit_start_, cursor_ - unit_start_, first_tensor_, n, shard_.holds(unit_)});
    first_tensor_ += n;
    unit_start_ = cursor_;
    layout_.total = cursor_;
    ++unit_;
}

ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard) {
    ParamLayout layout;
    ParamDeclarer d(layout, shard, cfg.n_layer + 2);
    family_of(cfg).declare(cfg, d);
    WEFT_CHECK(int64_t(layout.units.size()) == cfg.n_layer + 2,
               "internal: family {} declared {} units for {} layers (expected {})", cfg.family,
               layout.units.size(), cfg.n_layer, cfg.n_layer + 2);
    return layout;
}

int64_t logical_index(const ParamSpec& p, int tp_rank, int tp, int64_t i) {
    const int64_t r = i / p.cols_stored, c = i % p.cols_stored;
    const int64_t cols = trailing(p.shape);
    int64_t row = r, col = c;
    if (p.tp_dim == 0) {
        // Block b of the logical rows holds rows_per_block * tp rows; this rank has its slice.
        const int64_t per_rank = p.rows_stored / p.tp_blocks;
        const int64_t b = r / per_rank;
        row = b * per_rank * tp + int64_t(tp_rank) * per_rank + r % per_rank;
    } else if (p.tp_dim == 1) {
        col = int64_t(tp_rank) * p.cols_stored + c;
    }
    row += p.first_row;                // an expert slice starts at its first expert
    if (row >= p.shape[0]) return -1;  // a padding row of the vocabulary
    return row * cols + col;
}

void take_shard(const ParamSpec& p, int tp_rank, int tp, const float* logical, float* shard) {
    std::fill_n(shard, p.numel_stored, 0.0f);  // padding rows stay zero
    for_each_logical_run(p, tp_rank, tp, 0, p.numel_stored, [&](int64_t i, int64_t j, int64_t n) {
        std::copy_n(logical + j, n, shard + i);
    });
}

void place_shard(const ParamSpec& p, int tp_rank, int tp, const float* shard, float* logical) {
    for_each_logical_run(p, tp_rank, tp, 0, p.numel_stored, [&](int64_t i, int64_t j, int64_t n) {
        std::copy_n(shard + i, n, logical + j);
    });
}

void init_params(float* flat, const ParamLayout& layout, uint64_t seed) {
    for (const auto& p : layout.tensors) {
        float* dst = flat + p.offset;
        const int tr = layout.tp_rank, tp = layout.tp;
        const Philox rng = philox_for(seed, p.name);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < p.numel_stored; ++i) {
            const int64_t j = logical_index(p, tr, tp, i);
            if (j < 0) {
                dst[i] = 0.0f;
                continue;
            }
            switch (p.init) {
                case Init::zeros:
                    dst[i] = 0.0f;
                    break;
                case Init::ones:
                    dst[i] = 1.0f;
                    break;
                case Init::normal:
                    dst[i] = p.init_std * rng.normal(uint64_t(j));
                    break;
            }
        }
    }
}

float* unit_tensor(float* base, const ParamLayout& layout, int unit, int index) {
    const Unit& u = layout.units[size_t(unit)];
    WEFT_CHECK(index < u.tensors, "internal: unit {} is not held by this rank", unit);
    const ParamSpec& p = layout.tensors[size_t(u.first_tensor + index)];
    return base + (p.offset - u.offset);
}

}  // namespace weft::model
