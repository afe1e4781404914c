#pragma once
// What the tensor-parallel tests (unit, with thread ranks; MPI, with real ranks) share: the
// micro-batches, a training run of one rank's shard, and the comparison of a shard's gradients
// with the single-process model's.
//
// Tolerances: losses within 1e-5 relative; every gradient element within 1e-4 of itself plus
// 1e-4 of its tensor's largest gradient. The ranks' partial sums change only the rounding order,
// but attention with the test's enlarged weights amplifies that: the worst element seen is 1.5e-5
// of its tensor's largest on AVX-512 (tiny, tp = 2, a key weight) and 6e-5 on an AVX2-only CPU,
// whose GEMM kernels sum in another order (tp = 4, a qkv bias); a real mistake is off by far
// more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "weft/core/philox.hpp"
#include "weft/model/model.hpp"

namespace weft::test {

struct TokenBatch {
    std::vector<int32_t> inputs, targets;
};

inline std::vector<TokenBatch> make_token_batches(const model::ModelConfig& c, int64_t B, int64_t T,
                                                  int micro_batches) {
    std::vector<TokenBatch> out;
    for (int m = 0; m < micro_batches; ++m) {
        Philox rng = philox_for(uint64_t(100 + m), "tokens");
        TokenBatch b;
        for (int64_t i = 0; i < B * T; ++i) {
            b.inputs.push_back(int32_t(rng.uniform(uint64_t(2 * i)) * float(c.vocab_size)));
            int32_t t = int32_t(rng.uniform(uint64_t(2 * i + 1)) * float(c.vocab_size));
            b.targets.push_back(i % 7 == 3 ? -1 : t);  // some ignored positions
        }
        out.push_back(std::move(b));
    }
    return out;
}

struct TrainRun {
    double loss = 0;  // mean over all the micro-batches' tokens
    model::ParamLayout layout;
    std::vector<float> grads;
};

// Forward and backward of every micro-batch, gradients accumulated, from the same initial
// parameters (by logical index) for any shard.
inline TrainRun train_micro_batches(model::Model& m, const std::vector<TokenBatch>& batches,
                                    int64_t B, int64_t T, bool recompute) {
    const model::ParamLayout& layout = m.layout();
    Buffer params(layout.total), grads(layout.total);
    model::init_params(params.data(), layout, 7);
    // Weights larger than GPT-2's 0.02 keep every path of the gradient well above rounding, and
    // noise on the biases and gains (initialised to 0 and 1) lets a bias added more than once
    // show. By logical index, so every shard holds the same model.
    for (const model::ParamSpec& p : layout.tensors) {
        const Philox rng = philox_for(11, p.name);
        float* x = params.data() + p.offset;
        for (int64_t i = 0; i < p.numel_stored; ++i) {
            const int64_t j = model::logical_index(p, layout.tp_rank, layout.tp, i);
            if (j >= 0) x[i] = 5.0f * x[i] + 0.1f * rng.normal(uint64_t(j));
        }
    }
    model::FlatAccess w(layout, params.data(), grads.data());
    const float scale = 1.0f / float(int64_t(batches.size()) * B * T);
    TrainRun run;
    model::LayerSpan span;
    span.recompute = recompute;
    for (const TokenBatch& b : batches) {
        std::unique_ptr<model::Activations> act = m.new_activations(B, T, span);
        model::Activations& a = *act;
        a.inputs = b.inputs;
        a.targets = b.targets;
        run.loss += m.forward(a, w, true, scale) * scale;
        m.backward(a, w);
    }
    run.layout = layout;
    run.grads.assign(grads.data(), grads.data() + grads.size());
    return run;
}

// Every gradient tensor of `run` (tensor-parallel rank `rank` of `tp`) against the matching
// slice of the single-process gradient `ref`.
inline void expect_grad_shards(const TrainRun& ref, const TrainRun& run, int rank, int tp) {
    int checked = 0;
    for (const model::ParamSpec& p : run.layout.tensors) {
        const model::ParamSpec& q = ref.layout.find(p.name);
        std::vector<float> expect(size_t(p.numel_stored));
        model::take_shard(p, rank, tp, ref.grads.data() + q.offset, expect.data());
        const float* got = run.grads.data() + p.offset;
        double largest = 0;
        for (float v : expect) largest = std::max(largest, double(std::abs(v)));
        int64_t bad = 0, worst_at = 0;
        double worst = 0;  // the largest difference in units of the element's tolerance
        for (int64_t i = 0; i < p.numel_stored; ++i) {
            const double d = std::abs(double(got[i]) - expect[size_t(i)]);
            const double tol = 1e-4 * std::abs(expect[size_t(i)]) + 1e-4 * largest;
            if (!(d <= tol)) ++bad;
            if (!(d <= worst * tol)) worst = tol > 0 ? d / tol : d, worst_at = i;
        }
        EXPECT_EQ(bad, 0) << p.name << " rank " << rank << " of " << tp << ": element " << worst_at
                          << " is " << got[worst_at] << ", expected " << expect[size_t(worst_at)]
                          << " (" << worst << " times the tolerance; largest gradient " << largest
                          << ")";
        // A slice of the vocabulary's padding has no gradient; everything else has one.
        if (model::logical_index(p, rank, tp, 0) >= 0) {
            EXPECT_GT(largest, 0) << p.name << " has no gradient at all";
        }
        ++checked;
    }
    EXPECT_EQ(checked, int(ref.layout.tensors.size()));
}

}  // namespace weft::test
