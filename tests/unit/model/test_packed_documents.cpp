// Packed documents (--pack documents) in every dense family: a batch of rows packed with whole
// documents gives the loss and gradients of its documents run one a row, each as its own
// sequence from position 0 (<= 1e-6 relative, fp32 and bf16 products and activations alike), and
// changing one document changes no output of another.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "support/family_cases.hpp"
#include "support/model_run.hpp"
#include "weft/core/buffer.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/model/family.hpp"

using namespace weft;
using namespace weft::model;

namespace {

// Two rows of 16: documents of 5 and 11, then 1, 9 and 6.
constexpr int64_t B = 2, T = 16, V = 61;
const std::vector<int64_t> kCu{0, 5, 16, 17, 26, 32};

struct Packed {
    double loss;
    std::vector<float> losses, grads;
};

class PackedDocuments : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
  protected:
    void SetUp() override {
        bf16_ = std::get<1>(GetParam());
        if (bf16_) precision_.emplace(kernels::MatmulPrecision::bf16);
        cfg_ = test::small_family_config(std::get<0>(GetParam()), V, 32, 2);
        model_ = make_model(cfg_);
        params_ = Buffer(model_->layout().total);
        init_params(params_.data(), model_->layout(), 7);
    }

    // The batch packed: positions restarting at each document.
    Packed packed(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets) {
        std::unique_ptr<Activations> a = model_->new_activations(B, T, model_->activation_span());
        a->inputs = inputs;
        a->targets = targets;
        a->cu_seqlens = kCu;
        a->positions.resize(size_t(B * T));
        for (size_t d = 0; d + 1 < kCu.size(); ++d)
            for (int64_t r = kCu[d]; r < kCu[d + 1]; ++r) a->positions[size_t(r)] = r - kCu[d];
        Buffer grads(model_->layout().total);
        FlatAccess w(model_->layout(), params_.data(), grads.data());
        const double loss = model_->forward(*a, w, true, kScale);
        model_->backward(*a, w);
        return {loss,
                {a->losses.data(), a->losses.data() + B * T},
                {grads.data(), grads.data() + grads.size()}};
    }

    // Each document alone, a batch of one row of its own length; gradients summed.
    Packed one_a_row(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets) {
        Buffer grads(model_->layout().total);
        FlatAccess w(model_->layout(), params_.data(), grads.data());
        Packed r{0, {}, {}};
        for (size_t d = 0; d + 1 < kCu.size(); ++d) {
            const int64_t r0 = kCu[d], n = kCu[d + 1] - r0;
            std::unique_ptr<Activations> a =
                model_->new_activations(1, n, model_->activation_span());
            a->inputs.assign(inputs.begin() + r0, inputs.begin() + r0 + n);
            a->targets.assign(targets.begin() + r0, targets.begin() + r0 + n);
            r.loss += model_->forward(*a, w, true, kScale);
            model_->backward(*a, w);
            r.losses.insert(r.losses.end(), a->losses.data(), a->losses.data() + n);
        }
        r.grads.assign(grads.data(), grads.data() + grads.size());
        return r;
    }

    static constexpr float kScale = 1.0f / float(B * T);
    bool bf16_ = false;
    std::optional<kernels::MatmulPrecisionScope> precision_;
    ModelConfig cfg_;
    std::unique_ptr<Model> model_;
    Buffer params_;
};

std::vector<int32_t> tokens(uint64_t seed) {
    std::vector<int32_t> t(size_t(B * T));
    Philox rng = philox_for(seed, "packed");
    for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(rng.uniform(i) * float(V));
    return t;
}

// max |x - y| over max |y|.
double max_rel(const std::vector<float>& x, const std::vector<float>& y) {
    double d = 0, n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        d = std::max(d, std::abs(double(x[i]) - y[i]));
        n = std::max(n, std::abs(double(y[i])));
    }
    return d / n;
}

TEST_P(PackedDocuments, SameAsEachDocumentAlone) {
    const std::vector<int32_t> in = tokens(1), tg = tokens(2);
    const Packed p = packed(in, tg), r = one_a_row(in, tg);
    const double tol = 1e-6;
    ASSERT_EQ(model_->activation_span().bf16, bf16_);
    EXPECT_LE(std::abs(p.loss - r.loss) / std::abs(r.loss), tol) << p.loss << " vs " << r.loss;
    EXPECT_LE(max_rel(p.losses, r.losses), tol);
    EXPECT_LE(max_rel(p.grads, r.grads), tol);
    EXPECT_LE(test::rel_l2(p.grads, r.grads), tol);
    std::printf("loss %.3g, per-token losses %.3g, gradients %.3g (max), %.3g (L2)\n",
                std::abs(p.loss - r.loss) / std::abs(r.loss), max_rel(p.losses, r.losses),
                max_rel(p.grads, r.grads), test::rel_l2(p.grads, r.grads));
}

TEST_P(PackedDocuments, ADocumentChangesNoOtherOutput) {
    std::vector<int32_t> in = tokens(1), tg = tokens(2);
    const Packed a = packed(in, tg);
    for (int64_t r = 17; r < 26; ++r) in[size_t(r)] = (in[size_t(r)] + 5) % V;  // the 9 of row 1
    const Packed b = packed(in, tg);
    for (int64_t r = 0; r < B * T; ++r) {
        if (r >= 17 && r < 26) continue;
        EXPECT_EQ(a.losses[size_t(r)], b.losses[size_t(r)]) << "row " << r;
    }
    EXPECT_NE(a.losses[20], b.losses[20]);
}

INSTANTIATE_TEST_SUITE_P(Families, PackedDocuments,
                         ::testing::Combine(::testing::Values("tiny", "llama-tiny", "qwen2-tiny"),
                                            ::testing::Bool()),
                         test::family_case_name);

}  // namespace
