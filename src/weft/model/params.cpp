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

ParamLayout build_param_layout(const ModelConfig& cfg) {
    const int64_t C = cfg.n_embd, L = cfg.n_layer;
    // GPT-2's scaled initialisation of the projections into the residual stream.
    const float std_base = 0.02f, std_resid = 0.02f / std::sqrt(2.0f * float(L));
    ParamLayout layout;
    int64_t cursor = 0;
    int unit = 0;
    auto add = [&](std::string name, std::vector<int64_t> shape, Init init, float std,
                   int64_t rows_stored = -1, int tp_dim = -1) {
        ParamSpec p;
        p.name = std::move(name);
        p.rows_stored = rows_stored < 0 ? shape[0] : rows_stored;
        int64_t row = shape.size() > 1 ? shape[1] : 1;
        p.shape = std::move(shape);
        p.numel_stored = p.rows_stored * row;
        p.offset = cursor;
        p.unit = unit;
        p.decay = p.shape.size() == 2;
        p.init = init;
        p.init_std = std;
        p.tp_dim = tp_dim;
        cursor += (p.numel_stored + 15) / 16 * 16;
        layout.tensors.push_back(std::move(p));
    };
    auto close_unit = [&](int64_t start) {
        layout.units.push_back({start, cursor - start});
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
        add(h + "attn.c_attn.weight", {3 * C, C}, Init::normal, std_base, -1, 0);
        add(h + "attn.c_attn.bias", {3 * C}, Init::zeros, 0, -1, 0);
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

void init_params(float* flat, const ParamLayout& layout, uint64_t seed) {
    for (const auto& p : layout.tensors) {
        float* dst = flat + p.offset;
        const int64_t n = p.numel_logical();
        switch (p.init) {
            case Init::zeros:
                for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
                break;
            case Init::ones:
                for (int64_t i = 0; i < n; ++i) dst[i] = 1.0f;
                break;
            case Init::normal: {
                Philox rng = philox_for(seed, p.name);
#pragma omp parallel for schedule(static)
                for (int64_t i = 0; i < n; ++i) dst[i] = p.init_std * rng.normal(uint64_t(i));
                break;
            }
        }
    }
}

namespace {
float* at(float* base, const ParamLayout& layout, int unit, size_t index) {
    const ParamSpec& p = layout.tensors[index];
    WEFT_CHECK(p.unit == unit, "internal: tensor {} is not in unit {}", p.name, unit);
    return base + (p.offset - layout.units[unit].offset);
}
}  // namespace

EmbedView embed_view(float* base, const ParamLayout& layout) {
    return {at(base, layout, 0, 0), at(base, layout, 0, 1)};
}

BlockView block_view(float* base, const ParamLayout& layout, int layer) {
    const int u = layer + 1;
    const size_t first = 2 + size_t(layer) * 12;
    float* p[12];
    for (size_t i = 0; i < 12; ++i) p[i] = at(base, layout, u, first + i);
    return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
}

FinalView final_view(float* base, const ParamLayout& layout, int n_layer) {
    const size_t first = 2 + size_t(n_layer) * 12;
    return {at(base, layout, n_layer + 1, first), at(base, layout, n_layer + 1, first + 1)};
}

}  // namespace weft::model
