#include "weft/train/evaluate.hpp"

#include <algorithm>

#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"

namespace weft::train {

EvalResult evaluate_rows(const data::TokenFile& file, int64_t B, int64_t T, int64_t batches,
                         int64_t row0, int64_t rows, model::Activations& a,
                         const std::function<double()>& forward) {
    data::DataLoader loader(file, T, 0, /*sequential=*/true);
    WEFT_CHECK(loader.windows() >= B,
               "evaluation needs one batch of {} sequences of {} tokens, but the file holds {} "
               "tokens ({} sequences)",
               B, T, file.size(), loader.windows());
    WEFT_CHECK(rows % a.B == 0, "internal: {} evaluation rows in passes of {}", rows, a.B);
    // Never wrap around: a batch that would revisit the start is not taken.
    batches = std::min(batches, loader.windows() / B);
    double sum = 0;
    for (int64_t b = 0; b < batches; ++b) {
        for (int64_t first = row0; first < row0 + rows; first += a.B) {
            loader.sample_rows(b, first, a.B, B, a.positions, a.inputs.data(), a.targets.data());
            sum += forward();
        }
    }
    return {sum, batches * rows * a.T};
}

EvalResult evaluate(model::Model& model, const float* params, const data::TokenFile& file,
                    int64_t B, int64_t T, int64_t batches) {
    std::unique_ptr<model::Activations> act = model.new_activations(B, T, {});
    model::Activations& a = *act;
    // Forward only reads parameters; nothing is accumulated into gradients.
    model::FlatAccess access(model.layout(), const_cast<float*>(params), nullptr);
    EvalResult r = evaluate_rows(file, B, T, batches, 0, B, a,
                                 [&] { return model.forward(a, access, /*train=*/false, 1.0f); });
    return {r.loss / double(r.tokens), r.tokens};
}

}  // namespace weft::train
