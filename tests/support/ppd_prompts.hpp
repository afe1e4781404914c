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

// `fit` steps on one window (that they learn), then `steps` over the whole text.
inline PpdTraining train_ppd_prompts(const model::ModelConfig& cfg,
                                     const model::ParamLayout& layout, const float* params,
                                     int64_t fit = 20, int64_t steps = 150) {
    PpdTraining r;
    const int64_t B = 4, T = 32;
    model::SampleOptions o;
    o.temperature = 0;
    o.tokens = T - 2;
    // Windows that start where the model's text starts (a two-token prompt, then its greedy
    // tokens): a prompt's target is the model's continuation of the window's tokens up to it,
    // which is the text's own only when the window holds all the context the text was written
    // from, as decoding's context does.
    std::vector<std::vector<int32_t>> texts;
    // Both dtypes' texts: bf16 products may lead greedy decoding elsewhere.
    for (bool bf16 : {false, true})
        for (int32_t a = 1; a <= 4; ++a)
            for (int32_t b = 9; b <= 16; ++b) {
                std::vector<int32_t> text = {a, b};
                const std::vector<int32_t> part =
                    model::generate(cfg, layout, params, text, o, {}, bf16);
                text.insert(text.end(), part.begin(), part.end());
                texts.push_back(std::move(text));
            }
    train::PpdTrainer t(cfg, params, 3, 5, "argmax");
    std::vector<int32_t> batch(size_t(B * T));
    auto fill = [&](int64_t s) {
        for (int64_t b = 0; b < B; ++b) {
            const std::vector<int32_t>& text = texts[size_t(s * 5 + b * 7) % texts.size()];
            std::copy_n(text.begin(), T, batch.begin() + b * T);
        }
    };
    // That they learn: the loss of one window (each prompt one target) falls as they fit it.
    // Then the whole text.
    for (int64_t b = 0; b < B; ++b) std::copy_n(texts[0].begin(), T, batch.begin() + b * T);
    for (int64_t s = 0; s < fit; ++s) {
        const double loss = t.step(batch.data(), B, T, 20, 3e-3f, s);
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
