#pragma once
// Parallel Prompt Decoding's prompt tokens for a test model: K = 3 trained on the model's own
// greedy text (the contexts they will guess in, where what follows is the model's choice; random
// text would leave them nothing to learn), so that their guesses are kept.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "weft/decode/ppd_file.hpp"
#include "weft/model/generate.hpp"
#include "weft/train/ppd_train.hpp"

namespace weft::test {

struct PpdTraining {
    decode::PpdPrompts prompts;
    double first_loss = 0, last_loss = 0;  // of one batch, over its first `fit` steps
};

// `fit` steps on one batch (that they learn), then `steps` over the whole text.
inline PpdTraining train_ppd_prompts(const model::ModelConfig& cfg,
                                     const model::ParamLayout& layout, const float* params,
                                     int64_t fit = 20, int64_t steps = 60) {
    PpdTraining r;
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = 150;
    std::vector<int32_t> text;
    for (int32_t start = 1; start < 5; ++start) {
        const std::vector<int32_t> part =
            model::generate(cfg, layout, params, std::vector<int32_t>{start, 2 * start + 7}, o);
        text.insert(text.end(), part.begin(), part.end());
    }
    train::PpdTrainer t(cfg, params, 3, 5, "argmax");
    const int64_t B = 4, T = 32;
    std::vector<int32_t> batch(size_t(B * T));
    auto fill = [&](int64_t s) {
        for (int64_t b = 0; b < B; ++b)
            std::copy_n(text.begin() + (s * 37 + b * 131) % int64_t(text.size() - T), T,
                        batch.begin() + b * T);
    };
    // That they learn: the loss of one batch falls as they fit it. Then the whole text.
    fill(0);
    for (int64_t s = 0; s < fit; ++s) {
        const double loss = t.step(batch.data(), B, T, 20, 1e-2f, s);
        if (s == 0) r.first_loss = loss;
        r.last_loss = loss;
    }
    for (int64_t s = 0; s < steps; ++s) {
        fill(s);
        t.step(batch.data(), B, T, (s * 7) % (T - 4), 1e-2f, fit + s);
    }
    r.prompts = t.prompts();
    return r;
}

}  // namespace weft::test
