#include "weft/model/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "weft/core/error.hpp"

namespace weft::model {

void ModelConfig::validate(const std::string& where) const {
    auto positive = [&](const char* name, int64_t v) {
        WEFT_CHECK(v > 0, "{}: {} must be positive, got {}", where, name, v);
    };
    positive("vocab_size", vocab_size);
    positive("n_positions", n_positions);
    positive("n_layer", n_layer);
    positive("n_head", n_head);
    positive("n_embd", n_embd);
    positive("vocab_multiple", vocab_multiple);
    WEFT_CHECK(n_embd % n_head == 0,
               "{}: n_embd {} is not divisible by n_head {} (each head needs an equal share of the "
               "width)",
               where, n_embd, n_head);
    WEFT_CHECK(ln_eps > 0, "{}: layer_norm_epsilon must be positive, got {}", where, ln_eps);
}

double ModelConfig::ln_eps_decimal() const {
    return std::stod(fmt::format("{}", ln_eps));
}

int64_t ModelConfig::num_parameters() const {
    const int64_t C = n_embd;
    const int64_t per_layer =
        2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
    return vocab_size * C + n_positions * C + n_layer * per_layer + 2 * C;
}

double ModelConfig::train_flops_per_token(int64_t T) const {
    return 6.0 * double(num_parameters()) + 6.0 * double(n_layer) * double(T) * double(n_embd);
}

ModelConfig config_for_tp(const ModelConfig& cfg, int tp) {
    WEFT_CHECK(tp >= 1, "tensor-parallel degree {} must be at least 1", tp);
    ModelConfig c = cfg;
    c.vocab_multiple = 128 * int64_t(tp);
    return c;
}

ModelConfig model_preset(const std::string& name) {
    ModelConfig c;
    auto set = [&](int64_t layers, int64_t heads, int64_t width) {
        c.n_layer = layers, c.n_head = heads, c.n_embd = width;
    };
    if (name == "tiny") {
        set(2, 4, 64);
        c.n_positions = 256;
    } else if (name == "gpt2") {
        set(12, 12, 768);
    } else if (name == "gpt2-medium") {
        set(24, 16, 1024);
    } else if (name == "gpt2-large") {
        set(36, 20, 1280);
    } else if (name == "gpt2-xl") {
        set(48, 25, 1600);
    } else {
        fail("unknown model preset '{}'; expected one of: {}", name,
             fmt::join(model_preset_names(), ", "));
    }
    return c;
}

std::vector<std::string> model_preset_names() {
    return {"tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"};
}

}  // namespace weft::model
