// The learning-rate schedule, global-norm clipping, OptimConfig validation, and AdamW over a
// parameter layout: decay per tensor, sub-ranges (ZeRO shards), alignment padding.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "support/check.hpp"
#include "weft/core/error.hpp"
#include "weft/model/params.hpp"
#include "weft/optim/optimizer.hpp"

namespace weft::optim {
namespace {

using test::random_vector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// learning_rate

TEST(LearningRate, LinearWarmupThenConstant) {
    OptimConfig c;
    c.lr = 1e-3f;
    c.lr_schedule = "constant";
    c.warmup = 4;
    for (int64_t s = 0; s < c.warmup; ++s)
        EXPECT_FLOAT_EQ(learning_rate(c, s, 20), c.lr * float(s + 1) / 4.0f) << "step " << s;
    EXPECT_FLOAT_EQ(learning_rate(c, 3, 20), c.lr);  // the last warm-up step reaches lr
    for (int64_t s = c.warmup; s < 30; ++s) EXPECT_EQ(learning_rate(c, s, 20), c.lr) << s;
}

TEST(LearningRate, CosineAfterWarmup) {
    OptimConfig c;
    c.lr = 6e-4f;
    c.min_lr_ratio = 0.1f;
    c.lr_schedule = "cosine";
    c.warmup = 10;
    const int64_t total = 111;  // 100 decay steps after the warm-up: steps 10 .. 110
    const float min_lr = c.lr * c.min_lr_ratio;

    for (int64_t s = 0; s < c.warmup; ++s)
        EXPECT_FLOAT_EQ(learning_rate(c, s, total), c.lr * float(s + 1) / float(c.warmup));
    EXPECT_FLOAT_EQ(learning_rate(c, c.warmup, total), c.lr);              // right after warm-up
    EXPECT_FLOAT_EQ(learning_rate(c, total - 1, total), min_lr);           // the last step
    EXPECT_FLOAT_EQ(learning_rate(c, 60, total), 0.5f * (c.lr + min_lr));  // the middle
    float prev = learning_rate(c, c.warmup, total);
    for (int64_t s = c.warmup + 1; s < total; ++s) {
        const float lr = learning_rate(c, s, total);
        EXPECT_LE(lr, prev) << "step " << s;
        EXPECT_GE(lr, min_lr * (1 - 1e-6f)) << "step " << s;
        prev = lr;
    }
    EXPECT_FLOAT_EQ(learning_rate(c, total + 50, total), min_lr);  // past the end: stays at min

    // Without warm-up the first step already has the full rate.
    c.warmup = 0;
    EXPECT_FLOAT_EQ(learning_rate(c, 0, total), c.lr);
    EXPECT_FLOAT_EQ(learning_rate(c, total - 1, total), min_lr);
}

// ---------------------------------------------------------------------------------------------
// clip_scale

TEST(ClipScale, ScalesOnlyAboveTheClip) {
    OptimConfig c;
    c.grad_clip = 1.0f;
    for (double norm : {0.0, 0.25, 0.999, 1.0}) EXPECT_EQ(clip_scale(c, norm), 1.0f) << norm;
    for (double norm : {1.5, 4.0, 1e6}) {
        const float s = clip_scale(c, norm);
        EXPECT_FLOAT_EQ(s, float(1.0 / (norm + 1e-6))) << norm;
        EXPECT_LE(double(s) * norm, 1.0 + 1e-6) << norm;
    }
    c.grad_clip = 2.5f;
    EXPECT_FLOAT_EQ(clip_scale(c, 10.0), float(2.5 / (10.0 + 1e-6)));

    c.grad_clip = 0.0f;  // disabled
    for (double norm : {0.0, 1.0, 1e6}) EXPECT_EQ(clip_scale(c, norm), 1.0f) << norm;
}

TEST(ClipScale, NonFiniteNormGivesOne) {
    // clip_scale tests std::isfinite(grad_norm) explicitly and returns 1 for NaN and infinity.
    OptimConfig c;
    c.grad_clip = 1.0f;
    EXPECT_EQ(clip_scale(c, std::numeric_limits<double>::quiet_NaN()), 1.0f);
    EXPECT_EQ(clip_scale(c, std::numeric_limits<double>::infinity()), 1.0f);
}

// ---------------------------------------------------------------------------------------------
// OptimConfig::validate

std::string validate_error(const OptimConfig& c) {
    try {
        c.validate();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(OptimConfigValidate, AcceptsDefaultsAndBoundaries) {
    OptimConfig c;
    EXPECT_NO_THROW(c.validate());
    c.lr_schedule = "constant";
    c.grad_clip = 0.0f;
    c.weight_decay = 0.0f;
    c.warmup = 0;
    c.min_lr_ratio = 0.0f;
    c.beta1 = 0.0f;
    EXPECT_NO_THROW(c.validate());
    c.min_lr_ratio = 1.0f;
    EXPECT_NO_THROW(c.validate());
}

TEST(OptimConfigValidate, ErrorsNameTheFlag) {
    struct Case {
        void (*mutate)(OptimConfig&);
        std::string expect;  // substring of the message
    };
    const Case cases[] = {
        {[](OptimConfig& c) { c.lr = 0.0f; }, "--lr must"},
        {[](OptimConfig& c) { c.lr = -1e-3f; }, "--lr must"},
        {[](OptimConfig& c) { c.lr = kNaN; }, "--lr must"},
        {[](OptimConfig& c) { c.weight_decay = -0.1f; }, "--weight-decay"},
        {[](OptimConfig& c) { c.grad_clip = -1.0f; }, "--grad-clip"},
        {[](OptimConfig& c) { c.lr_schedule = "linear"; }, "--lr-schedule"},
        {[](OptimConfig& c) { c.lr_schedule = "linear"; }, "'linear'"},
        {[](OptimConfig& c) { c.warmup = -1; }, "--warmup"},
        {[](OptimConfig& c) { c.beta1 = 1.0f; }, "beta1"},
        {[](OptimConfig& c) { c.beta2 = -0.1f; }, "beta2"},
        {[](OptimConfig& c) { c.eps = 0.0f; }, "eps"},
        {[](OptimConfig& c) { c.min_lr_ratio = 1.5f; }, "min_lr_ratio"},
    };
    for (const Case& k : cases) {
        OptimConfig c;
        k.mutate(c);
        const std::string msg = validate_error(c);
        EXPECT_NE(msg, "") << "no error; expected one naming " << k.expect;
        EXPECT_NE(msg.find(k.expect), std::string::npos)
            << "message '" << msg << "' does not contain '" << k.expect << "'";
    }
}

// ---------------------------------------------------------------------------------------------
// AdamW over a layout
//
// weft_optim links weft_kernels and weft_core but not weft_model, so model::build_param_layout
// is not available here; the layout is built by hand like build_param_layout's: tensors on
// 16-float (64-byte) boundaries with padding between them.
//
//   [ 0, 15)  a.weight [3, 5]   decay
//   [15, 16)  padding
//   [16, 21)  a.bias   [5]      no decay
//   [21, 32)  padding
//   [32, 44)  b.weight [2, 6]   decay
//   [44, 48)  padding

// Fields set by name, so that ParamSpec can grow members without breaking this test.
model::ParamSpec spec(std::string name, std::vector<int64_t> shape, int64_t offset, int unit,
                      bool decay) {
    model::ParamSpec t{};
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.rows_stored = t.shape[0];  // as build_param_layout: a 1-D tensor is rows of length 1
    t.numel_stored = t.rows_stored * (t.shape.size() > 1 ? t.shape[1] : 1);
    t.offset = offset;
    t.unit = unit;
    t.decay = decay;
    t.init = decay ? model::Init::normal : model::Init::zeros;
    t.init_std = decay ? 0.02f : 0.0f;
    return t;
}

model::ParamLayout tiny_layout() {
    model::ParamLayout l;
    l.tensors.push_back(spec("a.weight", {3, 5}, 0, 0, true));
    l.tensors.push_back(spec("a.bias", {5}, 16, 0, false));
    l.tensors.push_back(spec("b.weight", {2, 6}, 32, 1, true));
    l.units = {{0, 32}, {32, 16}};
    l.total = 48;
    return l;
}

enum class Kind { decay, no_decay, padding };

Kind kind_of(const model::ParamLayout& l, int64_t i) {
    for (const auto& t : l.tensors)
        if (i >= t.offset && i < t.offset + t.numel_stored)
            return t.decay ? Kind::decay : Kind::no_decay;
    return Kind::padding;
}

// Random tensor values; padding set to `pad` (a non-zero marker makes a stray decay visible).
std::vector<float> make_params(const model::ParamLayout& l, uint64_t seed, float pad) {
    auto p = random_vector(size_t(l.total), seed);
    for (int64_t i = 0; i < l.total; ++i)
        if (kind_of(l, i) == Kind::padding) p[size_t(i)] = pad;
    return p;
}

TEST(AdamW, ZeroGradientsShrinkOnlyDecayedTensors) {
    const auto layout = tiny_layout();
    OptimConfig c;
    c.weight_decay = 0.1f;
    const float lr = 0.05f;
    const auto before = make_params(layout, 40, 3.0f);
    auto params = before;
    std::vector<float> grads(size_t(layout.total), 0.0f);

    AdamW opt(layout, 0, layout.total);
    EXPECT_EQ(opt.exp_avg().size(), layout.total);
    opt.step(params.data(), grads.data(), c, lr, 1.0f, 1);

    // Zero gradients give zero moments and a zero Adam step: only decay moves a parameter,
    // param *= 1 - lr * wd (up to fp32 rounding: 4 ulps). Everything else stays bit-exact.
    const double factor = 1.0 - double(lr) * double(c.weight_decay);
    for (int64_t i = 0; i < layout.total; ++i) {
        const size_t u = size_t(i);
        if (kind_of(layout, i) == Kind::decay) {
            EXPECT_FLOAT_EQ(params[u], float(double(before[u]) * factor)) << "index " << i;
            EXPECT_NE(params[u], before[u]) << "index " << i;
        } else {
            EXPECT_EQ(params[u], before[u]) << "index " << i << " (bias or padding) changed";
        }
        EXPECT_EQ(opt.exp_avg().data()[i], 0.0f);
        EXPECT_EQ(opt.exp_avg_sq().data()[i], 0.0f);
    }
}

TEST(AdamW, SubRangeUpdatesOnlyItsRangeAndDecaysPerTensor) {
    const auto layout = tiny_layout();
    OptimConfig c;
    c.weight_decay = 0.1f;
    const float lr = 0.05f;
    // [7, 36) cuts a.weight after 7 of its 15 elements and b.weight after 4 of its 12, and holds
    // both paddings between them and all of a.bias.
    const int64_t begin = 7, end = 36;
    const auto before = make_params(layout, 41, 3.0f);
    auto params = before;
    // Gradients outside the range are NaN: the shard must not read them.
    std::vector<float> grads(size_t(layout.total), kNaN);
    for (int64_t i = begin; i < end; ++i) grads[size_t(i)] = 0.0f;

    AdamW opt(layout, begin, end);
    EXPECT_EQ(opt.begin(), begin);
    EXPECT_EQ(opt.end(), end);
    EXPECT_EQ(opt.exp_avg().size(), end - begin);
    EXPECT_EQ(opt.exp_avg_sq().size(), end - begin);
    opt.step(params.data() + begin, grads.data() + begin, c, lr, 1.0f, 1);

    const double factor = 1.0 - double(lr) * double(c.weight_decay);
    for (int64_t i = 0; i < layout.total; ++i) {
        const size_t u = size_t(i);
        const bool inside = i >= begin && i < end;
        if (inside && kind_of(layout, i) == Kind::decay)
            EXPECT_FLOAT_EQ(params[u], float(double(before[u]) * factor)) << "index " << i;
        else
            EXPECT_EQ(params[u], before[u]) << "index " << i << " changed";
    }
}

// ZeRO: shards that cut tensors anywhere, stepped one by one, give the whole-buffer update.
TEST(AdamW, ShardsTogetherEqualTheWholeBuffer) {
    const auto layout = tiny_layout();
    OptimConfig c;
    c.weight_decay = 0.1f;
    const int64_t cuts[] = {0, 7, 19, 36, 40, layout.total};

    auto whole = make_params(layout, 42, 0.0f);
    auto sharded = whole;
    AdamW full(layout, 0, layout.total);
    std::vector<AdamW> shards;
    for (size_t s = 0; s + 1 < std::size(cuts); ++s)
        shards.emplace_back(layout, cuts[s], cuts[s + 1]);

    for (int64_t t = 1; t <= 3; ++t) {
        const auto grads = random_vector(size_t(layout.total), 100 + uint64_t(t));
        const float lr = 0.01f * float(t), scale = 0.5f;
        full.step(whole.data(), grads.data(), c, lr, scale, t);
        for (AdamW& sh : shards)
            sh.step(sharded.data() + sh.begin(), grads.data() + sh.begin(), c, lr, scale, t);
    }
    for (int64_t i = 0; i < layout.total; ++i)
        EXPECT_FLOAT_EQ(sharded[size_t(i)], whole[size_t(i)]) << "index " << i;
    for (AdamW& sh : shards)
        for (int64_t i = sh.begin(); i < sh.end(); ++i) {
            EXPECT_FLOAT_EQ(sh.exp_avg().data()[i - sh.begin()], full.exp_avg().data()[i]) << i;
            EXPECT_FLOAT_EQ(sh.exp_avg_sq().data()[i - sh.begin()], full.exp_avg_sq().data()[i])
                << i;
        }
}

// --offload: an AdamW that keeps no moments, stepped group by group over moments the caller
// holds (step_range), computes bitwise what step() computes over the whole range, whatever the
// cuts, across tensor and decay boundaries.
TEST(AdamW, StepRangeOverCallersMomentsIsBitwiseStep) {
    const auto layout = tiny_layout();
    OptimConfig c;
    c.weight_decay = 0.1f;
    const int64_t begin = 3, end = layout.total, cuts[] = {0, 5, 6, 21, 33, end - begin};
    auto whole = make_params(layout, 7, 0.0f);
    auto grouped = whole;
    AdamW full(layout, begin, end);
    AdamW offloaded(layout, begin, end, /*allocate=*/false);
    EXPECT_EQ(offloaded.state_bytes(), 8 * (end - begin));  // counted, not held
    std::vector<float> m(size_t(end - begin)), v(size_t(end - begin));
    for (int64_t t = 1; t <= 3; ++t) {
        const auto grads = random_vector(size_t(layout.total), 200 + uint64_t(t));
        full.step(whole.data() + begin, grads.data() + begin, c, 0.01f, 0.5f, t);
        for (size_t k = 0; k + 1 < std::size(cuts); ++k) {
            const int64_t a = cuts[k], b = cuts[k + 1];
            std::byte* states[] = {reinterpret_cast<std::byte*>(m.data() + a),
                                   reinterpret_cast<std::byte*>(v.data() + a)};
            offloaded.step_range(grouped.data() + begin, grads.data() + begin, states, a, b,
                                 {c, 0.01f, 0.5f, t});
        }
    }
    for (int64_t i = 0; i < layout.total; ++i)
        EXPECT_EQ(grouped[size_t(i)], whole[size_t(i)]) << "index " << i;
    for (int64_t i = 0; i < end - begin; ++i) {
        EXPECT_EQ(m[size_t(i)], full.exp_avg().data()[i]) << i;
        EXPECT_EQ(v[size_t(i)], full.exp_avg_sq().data()[i]) << i;
    }
}

TEST(AdamW, RejectsRangeOutsideTheBuffer) {
    const auto layout = tiny_layout();
    EXPECT_THROW(AdamW(layout, 0, layout.total + 1), Error);
    EXPECT_THROW(AdamW(layout, -1, 10), Error);
    EXPECT_THROW(AdamW(layout, 20, 10), Error);
    EXPECT_NO_THROW(AdamW(layout, 10, 10));
}

}  // namespace
}  // namespace weft::optim
