#include "weft/model/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"
#include "weft/kernels/attention.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/gelu.hpp"
#include "weft/kernels/layernorm.hpp"
#include "weft/kernels/matmul.hpp"

namespace weft::model {

namespace k = weft::kernels;

void SampleOptions::validate() const {
    WEFT_CHECK(tokens >= 0, "--tokens must be non-negative, got {}", tokens);
    WEFT_CHECK(temperature >= 0, "--temperature must be non-negative, got {}", temperature);
    WEFT_CHECK(top_k >= 0, "--top-k must be non-negative, got {}", top_k);
    WEFT_CHECK(top_p > 0 && top_p <= 1, "--top-p must be in (0, 1], got {}", top_p);
}

int32_t pick_token(std::span<const float> logits, const SampleOptions& o, float u) {
    const int64_t V = int64_t(logits.size());
    if (o.temperature == 0)
        return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    int64_t keep = (o.top_k > 0 && o.top_k < V) ? o.top_k : V;
    // Candidates in decreasing logit order; ties broken by id so the choice is reproducible.
    auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), by_logit);
    idx.resize(size_t(keep));
    std::vector<double> p(idx.size());
    const double top = logits[idx[0]];
    double sum = 0;
    for (size_t i = 0; i < idx.size(); ++i)
        sum += p[i] = std::exp((logits[idx[i]] - top) / o.temperature);
    if (o.top_p < 1) {
        double cum = 0;
        size_t n = 0;
        while (n < p.size() && cum < o.top_p * sum) cum += p[n++];
        p.resize(n), idx.resize(n);
        sum = cum;
    }
    double target = double(u) * sum, acc = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        acc += p[i];
        if (target < acc) return idx[i];
    }
    return idx.back();
}

Generator::Generator(const ModelConfig& cfg, const ParamLayout& layout, const float* params)
    : cfg_(cfg), layout_(layout), params_(const_cast<float*>(params)) {
    const int64_t L = cfg.n_layer, P = cfg.n_positions, C = cfg.n_embd;
    kcache_ = Buffer(L * P * C);
    vcache_ = Buffer(L * P * C);
    logits_ = Buffer(cfg.vocab_size);
}

std::span<const float> Generator::feed(std::span<const int32_t> tokens) {
    const int64_t n = int64_t(tokens.size()), C = cfg_.n_embd, NH = cfg_.n_head;
    const int64_t P = cfg_.n_positions;
    WEFT_CHECK(n >= 1 && pos_ + n <= P, "internal: feeding {} tokens at position {} of {}", n, pos_,
               P);
    if (x_.size() < n * C) {
        x_ = Buffer(n * C), ln_ = Buffer(n * C), qkv_ = Buffer(n * 3 * C);
        att_ = Buffer(n * C), h_ = Buffer(n * 4 * C), hg_ = Buffer(n * 4 * C);
        stats_ = Buffer(2 * n);
    }
    EmbedView e = embed_view(params_ + layout_.units[0].offset, layout_);
    k::embedding_forward(x_.data(), tokens.data(), e.wte, e.wpe, 1, n, C, pos_);
    for (int l = 0; l < cfg_.n_layer; ++l) {
        BlockView p = block_view(params_ + layout_.units[l + 1].offset, layout_, l);
        float* kc = kcache_.data() + l * P * C;
        float* vc = vcache_.data() + l * P * C;
        k::layernorm_forward(ln_.data(), stats_.data(), stats_.data() + n, x_.data(), p.ln1_w,
                             p.ln1_b, n, C, cfg_.ln_eps);
        k::matmul_forward(qkv_.data(), ln_.data(), p.qkv_w, p.qkv_b, n, C, 3 * C);
        for (int64_t t = 0; t < n; ++t) {
            std::memcpy(kc + (pos_ + t) * C, qkv_.data() + t * 3 * C + C, size_t(C) * 4);
            std::memcpy(vc + (pos_ + t) * C, qkv_.data() + t * 3 * C + 2 * C, size_t(C) * 4);
        }
        k::AttentionShape s{1, n, pos_ + n, NH, C / NH, 3 * C, C, C, pos_};
        Buffer lse(NH * n);
        k::attention_forward(att_.data(), lse.data(), qkv_.data(), kc, vc, s);
        k::matmul_forward(ln_.data(), att_.data(), p.proj_w, p.proj_b, n, C, C);
        k::add_inplace(x_.data(), ln_.data(), n * C);
        k::layernorm_forward(ln_.data(), stats_.data(), stats_.data() + n, x_.data(), p.ln2_w,
                             p.ln2_b, n, C, cfg_.ln_eps);
        k::matmul_forward(h_.data(), ln_.data(), p.fc_w, p.fc_b, n, C, 4 * C);
        k::gelu_forward(hg_.data(), h_.data(), n * 4 * C);
        k::matmul_forward(ln_.data(), hg_.data(), p.fcproj_w, p.fcproj_b, n, 4 * C, C);
        k::add_inplace(x_.data(), ln_.data(), n * C);
    }
    FinalView f =
        final_view(params_ + layout_.units[cfg_.n_layer + 1].offset, layout_, int(cfg_.n_layer));
    const float* last = x_.data() + (n - 1) * C;
    k::layernorm_forward(ln_.data(), stats_.data(), stats_.data() + n, last, f.lnf_w, f.lnf_b, 1, C,
                         cfg_.ln_eps);
    k::classifier_logits(logits_.data(), ln_.data(), e.wte, 1, C, cfg_.vocab_size);
    pos_ += n;
    return {logits_.data(), size_t(cfg_.vocab_size)};
}

std::vector<int32_t> generate(const ModelConfig& cfg, const ParamLayout& layout,
                              const float* params, std::span<const int32_t> prompt,
                              const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token) {
    o.validate();
    WEFT_CHECK(!prompt.empty(), "the prompt must hold at least one token");
    Generator g(cfg, layout, params);
    std::vector<int32_t> context(prompt.begin(), prompt.end());
    const int64_t window = cfg.n_positions;
    if (int64_t(context.size()) > window)  // only the last window of a long prompt is seen
        context.erase(context.begin(), context.end() - window);
    std::span<const float> logits = g.feed(context);
    Philox rng = philox_for(o.seed, "sample");
    std::vector<int32_t> out;
    for (int64_t i = 0; i < o.tokens; ++i) {
        int32_t t = pick_token(logits, o, rng.uniform(uint64_t(i)));
        out.push_back(t);
        context.push_back(t);
        if (on_token) on_token(t);
        if (i + 1 == o.tokens) break;
        if (g.position() + 1 > window) {
            // Window full: keep the last half as context and rebuild the cache from it.
            context.erase(context.begin(), context.end() - window / 2);
            g.reset();
            logits = g.feed(context);
        } else {
            logits = g.feed(std::span<const int32_t>(&context.back(), 1));
        }
    }
    return out;
}

}  // namespace weft::model
