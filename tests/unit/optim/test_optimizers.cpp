// The optimizers of the registry beside AdamW: each against a step computed by hand, their state
// sizes (the one count the memory estimate and the planner read), stepping sub-ranges with the
// state as flat buffers (what offloading streams), shards against the whole buffer, and MeZO's
// projected gradient against the directional derivative of a small loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support/check.hpp"
#include "weft/core/error.hpp"
#include "weft/optim/blockwise8.hpp"
#include "weft/optim/mezo.hpp"
#include "weft/optim/registry.hpp"

namespace weft::optim {
namespace {

using test::random_vector;

model::ParamSpec spec(const std::string& name, int64_t numel, int64_t offset, int unit,
                      bool decay) {
    model::ParamSpec s{};
    s.name = name;
    s.shape = {numel};
    s.rows_stored = numel;
    s.offset = offset;
    s.numel_stored = numel;
    s.unit = unit;
    s.decay = decay;
    return s;
}

// Two tensors of 8-bit size (8192 values: 4 blocks; 5000: 2 full blocks and one of 904) around a
// 100-value bias that stays fp32, with 28 floats of padding before unit 2 (unit 0, the
// embeddings, is empty here). `shift` moves unit 2 (a ZeRO layout pads units; offsets within
// them stay).
model::ParamLayout layout(int64_t shift = 0) {
    model::ParamLayout l;
    l.tensors.push_back(spec("big.weight", 8192, 0, 1, true));
    l.tensors.push_back(spec("small.bias", 100, 8192, 1, false));
    l.tensors.push_back(spec("big2.weight", 5000, 8320 + shift, 2, true));
    l.units = {{0, 0}, {0, 8320 + shift}, {8320 + shift, 5008}};
    l.total = 13328 + shift;
    return l;
}

// Random values, zero on the padding (as parameters and gradients are there).
std::vector<float> values(const model::ParamLayout& l, uint64_t seed, float scale = 1.0f) {
    auto p = random_vector(size_t(l.total), seed, scale);
    for (int64_t i = 8292; i < 8320; ++i) p[size_t(i)] = 0;
    for (int64_t i = l.total - 8; i < l.total; ++i) p[size_t(i)] = 0;
    return p;
}

std::vector<float> params(const model::ParamLayout& l, uint64_t seed) {
    return values(l, seed, 0.5f);
}

// Steps [0, size) as pieces [cuts[i], cuts[i+1]) with the state handed over as pointers at
// state_offset(k, a), as an offloading caller would.
void step_in_pieces(Optimizer& o, float* w, const float* g, const StepArgs& s,
                    const std::vector<int64_t>& cuts) {
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        std::vector<std::byte*> st;
        for (int k = 0; k < o.states(); ++k) st.push_back(o.state(k) + o.state_offset(k, cuts[i]));
        o.step_range(w, g, st.data(), cuts[i], cuts[i + 1], s);
    }
}

// Steps optimizer `name` 3 times over the whole buffer, as shards cut at `cuts`, and in pieces
// cut there with the state handed over as flat buffers: the three agree bit for bit. Returns
// the whole buffer's parameters.
std::vector<float> expect_shards_and_pieces_whole(const std::string& name,
                                                  const std::vector<int64_t>& cuts, uint64_t seed,
                                                  float lr, float grad_scale) {
    const auto l = layout();
    OptimConfig c;
    auto whole = params(l, seed), sharded = whole, pieces = whole;
    auto full = make_optimizer(name, l, 0, l.total),
         by_pieces = make_optimizer(name, l, 0, l.total);
    std::vector<std::unique_ptr<Optimizer>> shards;
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
        shards.push_back(make_optimizer(name, l, cuts[i], cuts[i + 1]));
    for (int64_t t = 1; t <= 3; ++t) {
        const auto g = random_vector(size_t(l.total), 10 * seed + uint64_t(t));
        const StepArgs s{c, lr, grad_scale, t};
        full->step(whole.data(), g.data(), s);
        for (auto& o : shards) o->step(sharded.data() + o->begin(), g.data() + o->begin(), s);
        step_in_pieces(*by_pieces, pieces.data(), g.data(), s, cuts);
    }
    for (int64_t i = 0; i < l.total; ++i) {
        EXPECT_EQ(sharded[size_t(i)], whole[size_t(i)]) << name << " " << i;
        EXPECT_EQ(pieces[size_t(i)], whole[size_t(i)]) << name << " " << i;
    }
    return whole;
}

TEST(Registry, KnowsItsOptimizersAndRefusesOthers) {
    EXPECT_EQ(optimizer_names(), "adamw, adamw8bit, lion, mezo");
    try {
        find_optimizer("sgd");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(),
                     "--optimizer 'sgd' is unknown; expected one of adamw, adamw8bit, lion, mezo");
    }
    OptimConfig c;
    c.optimizer = "adam";
    EXPECT_THROW(c.validate(), Error);
}

TEST(Registry, StateBytesPerOptimizer) {
    const auto l = layout();
    EXPECT_EQ(optimizer_state_bytes("adamw", l, 0, l.total), 8 * l.total);
    EXPECT_EQ(optimizer_state_bytes("lion", l, 0, l.total), 4 * l.total);
    EXPECT_EQ(optimizer_state_bytes("mezo", l, 0, l.total), 0);
    // 8-bit: m and v take a byte per value of the two large tensors and 4 per value of the bias
    // and the paddings, each piece aligned to 16 bytes: 8192 + 400 + 112 + 5000 (-> 13712) + 32;
    // and an absmax pair (8 bytes) for each of 4 + 3 blocks.
    EXPECT_EQ(optimizer_state_bytes("adamw8bit", l, 0, l.total), 2 * 13744 + 8 * 7);
    // The embeddings (unit 0) keep fp32 moments whatever their size.
    model::ParamLayout e;
    e.tensors.push_back(spec("wte.weight", 8192, 0, 0, true));
    e.units = {{0, 8192}};
    e.total = 8192;
    EXPECT_EQ(optimizer_state_bytes("adamw8bit", e, 0, e.total), 8 * 8192);
    // What is counted is what is held.
    for (const OptimizerSpec& s : optimizers()) {
        auto o = make_optimizer(s.name, l, 100, 9000);
        int64_t held = 0;
        for (int k = 0; k < o->states(); ++k) held += o->state_bytes(k);
        EXPECT_EQ(held, optimizer_state_bytes(s.name, l, 100, 9000)) << s.name;
    }
}

// ---------------------------------------------------------------------------------------------
// blockwise 8-bit

TEST(Blockwise8, DynamicMapsAreBitsandbytes) {
    const auto& s = dynamic_map(true);
    const auto& u = dynamic_map(false);
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
    EXPECT_TRUE(std::is_sorted(u.begin(), u.end()));
    EXPECT_EQ(s.back(), 1.0f);
    EXPECT_EQ(u.back(), 1.0f);
    EXPECT_EQ(u.front(), 0.0f);
    EXPECT_GT(s.front(), -1.0f);  // no -1: the signed map's negative side ends one code short
    EXPECT_EQ(std::count(s.begin(), s.end(), 0.0f), 1);
    // The smallest magnitudes: the midpoints of linspace(0.1, 1, 2) (signed: 0.55) and of
    // linspace(0.1, 1, 3) (unsigned: 0.325, 0.775), times 1e-6.
    EXPECT_FLOAT_EQ(*std::upper_bound(s.begin(), s.end(), 0.0f), 0.55e-6f);
    EXPECT_FLOAT_EQ(u[1], 0.325e-6f);
    EXPECT_FLOAT_EQ(u[2], 0.775e-6f);
}

TEST(Blockwise8, RoundTripErrorIsHalfAGapOfTheMap) {
    for (bool is_signed : {true, false}) {
        const auto& map = dynamic_map(is_signed);
        auto x = random_vector(kQuantBlock, is_signed ? 5 : 6, 0.01f);
        if (!is_signed)
            for (float& v : x) v = v * v;  // second moments are non-negative
        std::vector<uint8_t> q(x.size());
        std::vector<float> back(x.size());
        const float absmax = quantize_block(x.data(), kQuantBlock, is_signed, q.data());
        dequantize_block(q.data(), kQuantBlock, absmax, is_signed, back.data());
        double worst = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            // The code taken is the nearest: within half the gap to each neighbour.
            const int c = q[i];
            const double lo = c > 0 ? map[size_t(c)] - map[size_t(c - 1)] : 0;
            const double hi = c < 255 ? map[size_t(c + 1)] - map[size_t(c)] : 0;
            const double err = std::abs(double(back[i]) - double(x[i])) / absmax;
            EXPECT_LE(err, 0.5 * std::max(lo, hi) + 1e-6) << i;
            worst = std::max(worst, err);
        }
        // The top decade has 64 (signed) or 128 codes over [0.1, 1]: at most 0.9 / 64 / 2.
        EXPECT_LE(worst, 0.9 / 64 / 2 + 1e-6) << is_signed;
        EXPECT_EQ(back[size_t(
                      std::max_element(x.begin(), x.end(),
                                       [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                      x.begin())] != 0,
                  true);
    }
}

TEST(AdamW8bit, FirstStepIsAdamWsAndSmallTensorsStayExact) {
    const auto l = layout();
    OptimConfig c;
    auto w8 = params(l, 1), w32 = w8;
    auto o8 = make_optimizer("adamw8bit", l, 0, l.total);
    AdamW o32(l, 0, l.total);
    for (int64_t t = 1; t <= 3; ++t) {
        const auto g = values(l, 10 + uint64_t(t));
        o8->step(w8.data(), g.data(), {c, 1e-2f, 0.5f, t});
        o32.step(w32.data(), g.data(), {c, 1e-2f, 0.5f, t});
        if (t == 1) {
            // From zero moments (exact in 8 bits) the update is AdamW's; only the rounding of
            // the vector kernel may differ.
            for (int64_t i = 0; i < l.total; ++i)
                ASSERT_NEAR(w8[size_t(i)], w32[size_t(i)], 1e-6) << i;
        }
    }
    // The bias keeps fp32 moments: the same kernel, bit for bit.
    for (int64_t i = 8192; i < 8292; ++i) EXPECT_EQ(w8[size_t(i)], w32[size_t(i)]) << i;
    for (int64_t i = 8292; i < 8320; ++i) EXPECT_EQ(w8[size_t(i)], 0.0f) << "padding " << i;
    // After 3 steps the quantised moments are AdamW's within the map's resolution.
    std::vector<float> m8(size_t(l.total)), v8(size_t(l.total));
    o8->read_moment(0, 0, l.total, m8.data());
    o8->read_moment(1, 0, l.total, v8.data());
    double worst_m = 0, worst_v = 0;
    for (int64_t i = 0; i < l.total; ++i) {
        worst_m = std::max(worst_m, double(std::abs(m8[size_t(i)] - o32.exp_avg()[i])));
        worst_v = std::max(worst_v, double(std::abs(v8[size_t(i)] - o32.exp_avg_sq()[i])));
    }
    EXPECT_LT(worst_m, 0.02 * 0.5);  // |m| <= 0.5 |g| scale, a few codes' width
    EXPECT_LT(worst_v, 0.02 * 0.25);
    double worst_w = 0, mean_w = 0;
    for (int64_t i = 0; i < l.total; ++i) {
        const double d = std::abs(double(w8[size_t(i)]) - double(w32[size_t(i)]));
        worst_w = std::max(worst_w, d);
        mean_w += d / double(l.total);
    }
    std::printf("8-bit vs fp32 moments after 3 steps: |dw| max %.3g mean %.3g (lr 1e-2)\n", worst_w,
                mean_w);
    EXPECT_LT(worst_w, 0.2 * 1e-2);  // the 3 steps moved each weight by up to 3e-2
    EXPECT_LT(mean_w, 0.02 * 1e-2);
}

TEST(AdamW8bit, ShardsCutAtBlocksEqualTheWholeBufferAndPiecesEqualAStep) {
    const auto l = layout();
    OptimConfig c;
    // Boundaries of blocks (2048 and 6144 into big.weight, 2048 into big2.weight) or of the fp32
    // bias (anywhere in it).
    const auto whole = expect_shards_and_pieces_whole(
        "adamw8bit", {0, 2048, 6144, 8250, 8320 + 2048, l.total}, 2, 1e-2f, 1.0f);
    // A cut inside a block makes two blocks of it: the rest stays bitwise, the cut block close.
    auto cut = params(l, 2);
    std::vector<std::unique_ptr<Optimizer>> two;
    two.push_back(make_optimizer("adamw8bit", l, 0, 3000));
    two.push_back(make_optimizer("adamw8bit", l, 3000, l.total));
    for (int64_t t = 1; t <= 3; ++t) {
        const auto g = random_vector(size_t(l.total), 20 + uint64_t(t));
        for (auto& o : two)
            o->step(cut.data() + o->begin(), g.data() + o->begin(), {c, 1e-2f, 1.0f, t});
    }
    for (int64_t i = 0; i < l.total; ++i) {
        if (i >= 2048 && i < 4096)
            EXPECT_NEAR(cut[size_t(i)], whole[size_t(i)], 2e-3) << i;
        else
            ASSERT_EQ(cut[size_t(i)], whole[size_t(i)]) << i;
    }
    const auto full = make_optimizer("adamw8bit", l, 0, l.total);
    EXPECT_EQ(full->align_down(3000), 2048);
    EXPECT_EQ(full->align_down(8200), 8200);  // fp32: anywhere
}

TEST(AdamW8bit, MomentsWrittenAndReadBackWithinTheMap) {
    const auto l = layout();
    auto o = make_optimizer("adamw8bit", l, 0, l.total);
    auto m = random_vector(size_t(l.total), 30, 1e-3f);
    auto v = random_vector(size_t(l.total), 31, 1e-3f);
    for (float& x : v) x = x * x;
    o->write_moment(0, 0, l.total, m.data());
    o->write_moment(1, 0, l.total, v.data());
    std::vector<float> m2(m.size()), v2(v.size());
    o->read_moment(0, 0, l.total, m2.data());
    o->read_moment(1, 0, l.total, v2.data());
    for (int64_t i = 0; i < l.total; ++i) {
        if (i >= 8192 && i < 8320) {  // fp32: exact
            EXPECT_EQ(m2[size_t(i)], m[size_t(i)]);
            continue;
        }
        EXPECT_NEAR(m2[size_t(i)], m[size_t(i)], 0.9 / 64 / 2 * 5e-3) << i;  // absmax < 5e-3
    }
}

// --offload keeps the state in groups elsewhere: moments read through pointers at a group's
// first element (a block boundary) are the optimizer's own, and writing them there changes the
// copy as write_moment changes the optimizer's state, byte for byte.
TEST(AdamW8bit, MomentsOfStateHeldElsewhere) {
    const auto l = layout();
    auto o = make_optimizer("adamw8bit", l, 0, l.total);
    auto m = random_vector(size_t(l.total), 32, 1e-3f);
    o->write_moment(0, 0, l.total, m.data());
    const int64_t base = 4096, n = l.total - base;  // a group from the third block on
    ASSERT_EQ(o->align_down(base), base);
    std::vector<std::vector<std::byte>> copy;
    std::vector<std::byte*> at;
    for (int k = 0; k < o->states(); ++k) {
        copy.emplace_back(o->state(k) + o->state_offset(k, base), o->state(k) + o->state_bytes(k));
        at.push_back(copy.back().data());
    }
    std::vector<float> own(static_cast<size_t>(n)), held(own.size());
    o->read_moment(0, base, n, own.data());
    o->read_moment(at.data(), base, 0, base, n, held.data());
    EXPECT_EQ(own, held);
    auto m2 = random_vector(size_t(n), 33, 2e-3f);
    o->write_moment(0, base, n, m2.data());
    o->write_moment(at.data(), base, 0, base, n, m2.data());
    for (int k = 0; k < o->states(); ++k)
        EXPECT_EQ(std::memcmp(copy[size_t(k)].data(), o->state(k) + o->state_offset(k, base),
                              copy[size_t(k)].size()),
                  0)
            << k;
}

// ---------------------------------------------------------------------------------------------
// Lion

TEST(Lion, StepsBySignOfInterpolatedMomentumByHand) {
    model::ParamLayout l;
    l.tensors.push_back(spec("w", 1, 0, 0, true));
    l.tensors.push_back(spec("b", 1, 1, 0, false));
    l.units = {{0, 2}};
    l.total = 2;
    OptimConfig c;
    c.beta1 = 0.9f;
    c.beta2 = 0.99f;
    c.weight_decay = 0.1f;
    auto o = make_optimizer("lion", l, 0, 2);
    float w[2] = {0.5f, 0.5f};
    // Step 1, g = -2: c = 0.1 * -2 < 0, so w += lr (1 - wd w): 0.5 + 0.1 (1 - 0.05) = 0.595;
    // the bias has no decay: 0.6. m = 0.01 * -2 = -0.02.
    const float g1[2] = {-2.0f, -2.0f};
    o->step(w, g1, {c, 0.1f, 1.0f, 1});
    EXPECT_FLOAT_EQ(w[0], 0.595f);
    EXPECT_FLOAT_EQ(w[1], 0.6f);
    std::vector<float> m(2);
    o->read_moment(0, 0, 2, m.data());
    EXPECT_NEAR(m[0], -0.02f, 1e-7);
    // Step 2, g = +0.1: c = 0.9 * -0.02 + 0.1 * 0.1 = -0.008, still negative (the momentum
    // wins): w = 0.595 + 0.1 (1 - 0.0595) = 0.68905. m = 0.99 * -0.02 + 0.01 * 0.1 = -0.0188.
    const float g2[2] = {0.1f, 0.1f};
    o->step(w, g2, {c, 0.1f, 1.0f, 2});
    EXPECT_FLOAT_EQ(w[0], 0.68905f);
    o->read_moment(0, 0, 2, m.data());
    EXPECT_NEAR(m[0], -0.0188f, 1e-7);
    // A zero interpolation moves nothing but the decay.
    auto z = make_optimizer("lion", l, 0, 2);
    float w0[2] = {1.0f, 1.0f};
    const float zero[2] = {0, 0};
    z->step(w0, zero, {c, 0.1f, 1.0f, 1});
    EXPECT_FLOAT_EQ(w0[0], 0.99f);
    EXPECT_EQ(w0[1], 1.0f);
    EXPECT_EQ(o->moments(), 1);
    EXPECT_EQ(o->state_bytes(), 8);  // one fp32 state: half of AdamW's
}

TEST(Lion, ShardsAndPiecesEqualTheWholeBuffer) {
    expect_shards_and_pieces_whole("lion", {0, 7, 3001, 8200, 9999, layout().total}, 3, 1e-3f,
                                   0.7f);
}

TEST(AdamW, PiecesWithStateAsFlatBuffersEqualAStep) {
    expect_shards_and_pieces_whole("adamw", {0, 5, 4100, 8300, layout().total}, 4, 1e-3f, 1.0f);
}

// ---------------------------------------------------------------------------------------------
// MeZO

ZerothOrder& zo(std::unique_ptr<Optimizer>& o) {
    return dynamic_cast<ZerothOrder&>(*o);
}

// The perturbation z of step t: what perturb adds to zero parameters with scale 1.
std::vector<float> z_of(const model::ParamLayout& l, int64_t begin, int64_t end, uint64_t seed,
                        int64_t t) {
    auto o = make_optimizer("mezo", l, begin, end);
    std::vector<float> z(size_t(end - begin), 0.0f);
    zo(o).perturb(z.data(), 1.0f, seed, t);
    return z;
}

TEST(Mezo, TheSameZForAnElementWhateverTheRangeOrUnitPadding) {
    const auto l = layout();
    const auto z = z_of(l, 0, l.total, 7, 3);
    // Regenerated per step: another step, another z.
    const auto other = z_of(l, 0, l.total, 7, 4);
    EXPECT_NE(z[10], other[10]);
    // Normal: mean ~0, variance ~1 over the 13300 tensor values; padding untouched.
    double sum = 0, sq = 0;
    for (float x : z) sum += x, sq += double(x) * x;
    EXPECT_NEAR(sum / 13292, 0.0, 0.05);
    EXPECT_NEAR(sq / 13292, 1.0, 0.05);
    for (int64_t i = 8292; i < 8320; ++i) EXPECT_EQ(z[size_t(i)], 0.0f);
    // A shard draws the whole buffer's values for its elements.
    const auto part = z_of(l, 3000, 9000, 7, 3);
    for (int64_t i = 3000; i < 9000; ++i) ASSERT_EQ(part[size_t(i - 3000)], z[size_t(i)]) << i;
    // A layout whose unit 2 starts 16 floats later (a ZeRO layout's padding) draws the same z
    // for the same parameter.
    const auto shifted = layout(16);
    const auto zs = z_of(shifted, 0, shifted.total, 7, 3);
    for (int64_t i = 8320; i < 13320; ++i) ASSERT_EQ(zs[size_t(i + 16)], z[size_t(i)]) << i;
}

// L(w) = sum_i a_i w_i^4 / 4 + b_i w_i^2 / 2 over the tensors.
double loss(const std::vector<float>& w, const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const double x = w[i];
        s += a[i] * x * x * x * x / 4 + b[i] * x * x / 2;
    }
    return s;
}

TEST(Mezo, ProjectedGradientIsTheFiniteDifferenceAndApproachesTheDerivative) {
    const auto l = layout();
    OptimConfig c;
    c.seed = 11;
    c.weight_decay = 0.1f;
    const int64_t t = 5;
    const auto w0 = params(l, 6);
    auto a = random_vector(w0.size(), 60, 0.1f), b = random_vector(w0.size(), 61);
    for (float& x : a) x = std::abs(x);
    const auto z = z_of(l, 0, l.total, c.seed, t);
    double deriv = 0;  // grad L . z
    for (size_t i = 0; i < w0.size(); ++i) {
        const double x = w0[i];
        deriv += (a[i] * x * x * x + b[i] * x) * z[i];
    }
    double prev_err = 1e30;
    for (float eps : {1e-1f, 1e-2f}) {
        auto o = make_optimizer("mezo", l, 0, l.total);
        auto w = w0;
        zo(o).perturb(w.data(), eps, c.seed, t);
        const double plus = loss(w, a, b);
        zo(o).perturb(w.data(), -2 * eps, c.seed, t);
        const double minus = loss(w, a, b);
        zo(o).perturb(w.data(), eps, c.seed, t);
        for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w[i], w0[i], 1e-6) << "restored " << i;
        // The projected gradient is the finite difference along z: for this loss,
        // grad . z + eps^2 sum a_i w_i z_i^3 exactly (the quadratic part has no error).
        const double g = (plus - minus) / (2.0 * eps);
        double third = 0;
        for (size_t i = 0; i < w0.size(); ++i)
            third += double(a[i]) * w0[i] * double(z[i]) * z[i] * z[i];
        EXPECT_NEAR(g, deriv + double(eps) * eps * third, 2e-3 * std::abs(deriv)) << eps;
        const double err = std::abs(g - deriv);
        EXPECT_LT(err, prev_err / 10) << "eps " << eps << ": the error shrinks as eps^2";
        prev_err = err;
    }
    EXPECT_LT(prev_err, 1e-3 * std::abs(deriv));
    // The update: w -= lr (g z + wd w) on decayed tensors, lr g z on the bias, padding alone.
    auto o = make_optimizer("mezo", l, 0, l.total);
    auto w = w0;
    StepArgs s{c, 1e-2f, 1.0f, t, 0.75};
    o->step(w.data(), nullptr, s);
    for (int64_t i = 0; i < l.total; ++i) {
        const size_t u = size_t(i);
        const bool decay = i < 8192 || i >= 8320, pad = i >= 8292 && i < 8320;
        const float want =
            pad ? w0[u] : w0[u] - 1e-2f * (0.75f * z[u] + (decay ? 0.1f * w0[u] : 0.0f));
        ASSERT_NEAR(w[u], want, 1e-7) << i;
    }
    EXPECT_EQ(o->state_bytes(), 0);
    EXPECT_FALSE(find_optimizer("mezo").gradients);
}

}  // namespace
}  // namespace weft::optim
