#include "weft/model/counts.hpp"

#include "weft/model/params.hpp"

namespace weft::model {

long double parameter_count(const ModelConfig& cfg) {
    // Every block declares the same tensors, so one block's count stands for all of them:
    // declaring the tensors of a 10^9-layer config to count them exhausted the machine.
    ModelConfig one = cfg;
    one.n_layer = 1;
    long double n = 0;
    for (const ParamSpec& p : build_param_layout(one).tensors)
        n += (long double)(p.numel_logical()) * (p.unit == 1 ? cfg.n_layer : 1);
    return n;
}

int64_t num_parameters(const ModelConfig& cfg) {
    return int64_t(parameter_count(cfg));
}

int64_t active_parameters(const ModelConfig& cfg) {
    if (cfg.n_experts == 0) return num_parameters(cfg);
    // Each layer's experts are three [E, F, C]-sized tensors; a token uses k of the E.
    const int64_t per_expert = 3 * cfg.ffn() * cfg.n_embd;
    return num_parameters(cfg) - cfg.n_layer * (cfg.n_experts - cfg.experts_per_token) * per_expert;
}

double attention_train_flops(const ModelConfig& cfg, double squares) {
    // In this order, so that train_flops_per_token's count stays what it was bit for bit.
    return 6.0 * double(cfg.n_layer) * squares * double(cfg.n_head * cfg.head_dim());
}

double train_flops_per_token(const ModelConfig& cfg, int64_t T) {
    return 6.0 * double(active_parameters(cfg)) + attention_train_flops(cfg, double(T));
}

}  // namespace weft::model
