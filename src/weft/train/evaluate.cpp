#include "weft/train/evaluate.hpp"

#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"

namespace weft::train {

EvalResult evaluate(model::Gpt2& model, const float* params, const data::TokenFile& file, int64_t B,
                    int64_t T, int64_t batches) {
    data::DataLoader loader(file, T, 0, /*sequential=*/true);
    WEFT_CHECK(loader.windows() >= B,
               "evaluation needs one batch of {} sequences of {} tokens, but the file holds {} "
               "tokens ({} sequences)",
               B, T, file.size(), loader.windows());
    // Never wrap around: a batch that would revisit the start is not taken.
    batches = std::min(batches, loader.windows() / B);
    model::Activations a(model.config(), B, T);
    // Forward only reads parameters; nothing is accumulated into gradients.
    model::FlatAccess access(model.layout(), const_cast<float*>(params), nullptr);
    double sum = 0;
    for (int64_t b = 0; b < batches; ++b) {
        for (int64_t r = 0; r < B; ++r)
            loader.sample(b, r, B, a.inputs.data() + r * T, a.targets.data() + r * T);
        sum += model.forward(a, access, /*train=*/false, 1.0f);
    }
    const int64_t tokens = batches * B * T;
    return {sum / double(tokens), tokens};
}

}  // namespace weft::train
