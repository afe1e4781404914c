#include "weft/model/params.hpp"

#include <cmath>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"

namespace weft::model {

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

ParamLayout build_param_layout(const ModelConfig& cfg, const ModelShard& shard) {
    const int64_t C = cfg.n_embd, L = cfg.n_layer;
    // GPT-2's scaled initialisation of the projections into the residual stream.
    const float std_base = 0.02f, std_resid = 0.02f / std::sqrt(2.0f * float(L));
    ParamLayout layout;
    int64_t cursor = 0;
    int unit = 0;
    WEFT_CHECK(shard.units.empty() || int64_t(shard.units.size()) == L + 2,
               "internal: a model shard names {} units, the model has {}", shard.units.size(),
               L + 2);
    const int tp = shard.tp;
    WEFT_CHECK(tp >= 1 && shard.tp_rank >= 0 && shard.tp_rank < tp,
               "internal: tensor-parallel rank {} of {}", shard.tp_rank, tp);
    WEFT_CHECK(cfg.n_head % tp == 0,
               "{} attention heads do not split over tensor-parallel degree {}: the head count "
               "must be a multiple of --tp",
               cfg.n_head, tp);
    WEFT_CHECK(cfg.padded_vocab() % tp == 0,
               "internal: padded vocabulary {} is not a multiple of tensor-parallel degree {}",
               cfg.padded_vocab(), tp);
    layout.tp_rank = shard.tp_rank;
    layout.tp = tp;
    auto add = [&](std::string name, std::vector<int64_t> shape, Init init, float std,
                   int64_t rows_padded = -1, int tp_dim = -1, int tp_blocks = 1) {
        if (!shard.holds(unit)) return;
        ParamSpec p;
        p.name = std::move(name);
        p.rows_stored = rows_padded < 0 ? shape[0] : rows_padded;
        p.cols_stored = shape.size() > 1 ? shape[1] : 1;
        if (tp_dim == 0) p.rows_stored /= tp;
        if (tp_dim == 1) p.cols_stored /= tp;
        p.shape = std::move(shape);
        p.numel_stored = p.rows_stored * p.cols_stored;
        p.offset = cursor;
        p.unit = unit;
        p.decay = p.shape.size() == 2;
        p.init = init;
        p.init_std = std;
        p.tp_dim = tp_dim;
        p.tp_blocks = tp_blocks;
        cursor += (p.numel_stored + 15) / 16 * 16;
        layout.tensors.push_back(std::move(p));
    };
    int first_tensor = 0;
    auto close_unit = [&](int64_t start) {
        const int n = int(layout.tensors.size()) - first_tensor;
        layout.units.push_back({start, cursor - start, first_tensor, n, shard.holds(unit)});
        first_tensor += n;
        ++unit;
    };

    int64_t start = cursor;
    add("wte.weight", {cfg.vocab_size, C}, Init::normal, std_base, cfg.padded_vocab(), 0);
    add("wpe.weight", {cfg.n_positions, C}, Init::normal, std_base);
    close_unit(start);
    for (int64_t l = 0; l < L; ++l) {
        start = cursor;
        std::string h = "h." + std::to_string(l) + ".";
        add(h + "ln_1.weight", {C}, Init::ones, 0);
        add(h + "ln_1.bias", {C}, Init::zeros, 0);
        add(h + "attn.c_attn.weight", {3 * C, C}, Init::normal, std_base, -1, 0, 3);
        add(h + "attn.c_attn.bias", {3 * C}, Init::zeros, 0, -1, 0, 3);
        add(h + "attn.c_proj.weight", {C, C}, Init::normal, std_resid, -1, 1);
        add(h + "attn.c_proj.bias", {C}, Init::zeros, 0);
        add(h + "ln_2.weight", {C}, Init::ones, 0);
        add(h + "ln_2.bias", {C}, Init::zeros, 0);
        add(h + "mlp.c_fc.weight", {4 * C, C}, Init::normal, std_base, -1, 0);
        add(h + "mlp.c_fc.bias", {4 * C}, Init::zeros, 0, -1, 0);
        add(h + "mlp.c_proj.weight", {C, 4 * C}, Init::normal, std_resid, -1, 1);
        add(h + "mlp.c_proj.bias", {C}, Init::zeros, 0);
        close_unit(start);
    }
    start = cursor;
    add("ln_f.weight", {C}, Init::ones, 0);
    add("ln_f.bias", {C}, Init::zeros, 0);
    close_unit(start);
    layout.total = cursor;
    return layout;
}

int64_t logical_index(const ParamSpec& p, int tp_rank, int tp, int64_t i) {
    const int64_t r = i / p.cols_stored, c = i % p.cols_stored;
    const int64_t cols = p.shape.size() > 1 ? p.shape[1] : 1;
    int64_t row = r, col = c;
    if (p.tp_dim == 0) {
        // Block b of the logical rows holds rows_per_block * tp rows; this rank has its slice.
        const int64_t per_rank = p.rows_stored / p.tp_blocks;
        const int64_t b = r / per_rank;
        row = b * per_rank * tp + int64_t(tp_rank) * per_rank + r % per_rank;
    } else if (p.tp_dim == 1) {
        col = int64_t(tp_rank) * p.cols_stored + c;
    }
    if (row >= p.shape[0]) return -1;  // a padding row of the vocabulary
    return row * cols + col;
}

void take_shard(const ParamSpec& p, int tp_rank, int tp, const float* logical, float* shard) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.numel_stored; ++i) {
        const int64_t j = logical_index(p, tp_rank, tp, i);
        shard[i] = j < 0 ? 0.0f : logical[j];
    }
}

void place_shard(const ParamSpec& p, int tp_rank, int tp, const float* shard, float* logical) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.numel_stored; ++i) {
        const int64_t j = logical_index(p, tp_rank, tp, i);
        if (j >= 0) logical[j] = shard[i];
    }
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

namespace {
// Tensor `index` of a unit (its position among the unit's tensors).
float* at(float* base, const ParamLayout& layout, int unit, int index) {
    const Unit& u = layout.units[size_t(unit)];
    WEFT_CHECK(index < u.tensors, "internal: unit {} is not held by this rank", unit);
    const ParamSpec& p = layout.tensors[size_t(u.first_tensor + index)];
    return base + (p.offset - u.offset);
}
}  // namespace

EmbedView embed_view(float* base, const ParamLayout& layout) {
    return {at(base, layout, 0, 0), at(base, layout, 0, 1)};
}

BlockView block_view(float* base, const ParamLayout& layout, int layer) {
    float* p[12];
    for (int i = 0; i < 12; ++i) p[i] = at(base, layout, layer + 1, i);
    return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

FinalView final_view(float* base, const ParamLayout& layout, int n_layer) {
    return {at(base, layout, n_layer + 1, 0), at(base, layout, n_layer + 1, 1)};
}

}  // namespace weft::model
