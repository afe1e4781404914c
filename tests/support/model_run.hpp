#pragma once
// What the model unit tests share: a micro-batch of random tokens, and a model in one process
// with its parameters and gradient buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/check.hpp"
#include "weft/core/buffer.hpp"
#include "weft/core/philox.hpp"
#include "weft/model/model.hpp"
#include "weft/model/params.hpp"

namespace weft::test {

// Random inputs and targets below V, the same for the same seed.
inline void fill_tokens(model::Activations& a, int64_t V, uint64_t seed) {
    Philox rng = philox_for(seed, "tokens");
    for (size_t i = 0; i < a.inputs.size(); ++i) {
        a.inputs[i] = int32_t(rng.uniform(2 * i) * float(V));
        a.targets[i] = int32_t(rng.uniform(2 * i + 1) * float(V));
    }
}

template <class M>
struct ModelRun {
    M model;
    Buffer params, grads;
    explicit ModelRun(const model::ModelConfig& c, uint64_t seed = 5)
        : model(c), params(model.layout().total), grads(model.layout().total) {
        model::init_params(params.data(), model.layout(), seed);
    }
    // Mean loss over the micro-batch; gradients of that mean accumulated when `grad`.
    double step(model::Activations& a, bool grad) {
        model::FlatAccess w(model.layout(), params.data(), grads.data());
        const float scale = 1.0f / float(a.B * a.T);
        double sum = model.forward(a, w, grad, scale);
        if (grad) model.backward(a, w);
        return sum * scale;
    }
};

// The gradient of every tensor at `per_tensor` elements (element(tensor, k) the logical index of
// the k-th: the families pick embedding rows of tokens that occur) against central differences
// of step h, within 2e-3 + 2e-2 |difference|. `what` names the case in failures.
template <class M, class Element>
void expect_finite_difference_gradients(ModelRun<M>& run, model::Activations& a, int per_tensor,
                                        float h, Element element, const std::string& what = "") {
    run.grads.zero();
    run.step(a, true);
    std::vector<float> p(run.params.data(), run.params.data() + run.params.size());
    auto loss = [&] {
        std::copy(p.begin(), p.end(), run.params.data());
        return run.step(a, false);
    };
    int checked = 0;
    for (const model::ParamSpec& t : run.model.layout().tensors) {
        std::vector<size_t> idx;
        for (int k = 0; k < per_tensor; ++k) idx.push_back(size_t(t.offset + element(t, k)));
        const std::vector<double> fd = finite_difference(p, loss, idx, h);
        for (size_t j = 0; j < idx.size(); ++j) {
            EXPECT_NEAR(run.grads[int64_t(idx[j])], fd[j], 2e-3 + 2e-2 * std::abs(fd[j]))
                << t.name << " element " << idx[j] - size_t(t.offset) << what;
            ++checked;
        }
    }
    EXPECT_EQ(checked, per_tensor * int(run.model.layout().tensors.size()));
}

// The elements the Llama-model families check: embedding rows of tokens that occur, others
// spread over the tensor.
inline auto llama_element(const model::Activations& a, const model::ModelConfig& c) {
    return [&a, &c](const model::ParamSpec& t, int k) {
        if (t.name == "embed_tokens.weight") return int64_t(a.inputs[size_t(k)]) * c.n_embd + k;
        return (k * 7919 + 13) % t.numel_logical();
    };
}

// The span of the first `count` blocks without the head, its kept activations bf16 or fp32.
inline model::LayerSpan blocks_span(int count, bool bf16) {
    model::LayerSpan s;
    s.count = count;
    s.head = false;
    s.bf16 = bf16;
    return s;
}

// Bytes one more kept block adds to a family's activations (Acts::floats): what the families'
// analytic activation tests check a layer's count against.
template <class Acts>
int64_t one_block_bytes(const model::ModelConfig& c, int64_t B, int64_t T, bool bf16) {
    return 4 * (Acts::floats(c, B, T, blocks_span(2, bf16)) -
                Acts::floats(c, B, T, blocks_span(1, bf16)));
}

// The losses of a few plain SGD steps on one micro-batch and the last step's gradients: what the
// bf16 tests compare between ways of running the same model.
struct SgdTrace {
    std::vector<double> losses;
    std::vector<float> grads;
};

template <class M>
SgdTrace sgd_trace(ModelRun<M>& run, model::Activations& a, int steps, float lr) {
    SgdTrace t;
    for (int step = 0; step < steps; ++step) {
        run.grads.zero();
        t.losses.push_back(run.step(a, true));
        for (int64_t i = 0; i < run.params.size(); ++i) run.params[i] -= lr * run.grads[i];
    }
    t.grads.assign(run.grads.data(), run.grads.data() + run.grads.size());
    return t;
}

// ||x - y|| / ||y||, in double.
inline double rel_l2(const std::vector<float>& x, const std::vector<float>& y) {
    double d = 0, n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        d += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        n += double(y[i]) * y[i];
    }
    return std::sqrt(d / n);
}

}  // namespace weft::test
