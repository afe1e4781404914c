#include "weft/kernels/moe_dispatch.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "weft/core/error.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {
constexpr int64_t kMinParallel = 1 << 14;
}  // namespace

int64_t moe_capacity(double factor, int64_t N, int64_t E, int64_t k) {
    WEFT_CHECK(factor >= 0 && std::isfinite(factor),
               "moe capacity factor {} must be 0 (dropless) or positive", factor);
    if (factor == 0) return -1;
    return int64_t(std::ceil(factor * double(N * k) / double(E)));
}

void moe_plan(MoePlan& plan, const int32_t* expert, const float* score, int64_t N, int64_t E,
              int64_t k, int64_t capacity) {
    WEFT_CHECK(N >= 0 && E >= 1 && k >= 1 && k <= E,
               "moe_plan: shape N={} E={} k={}, expected N >= 0 and 1 <= k <= E", N, E, k);
    plan.N = N, plan.E = E, plan.k = k, plan.dropped = 0;
    const int64_t S = N * k;
    plan.row_of_slot.assign(size_t(S), -1);
    // Slots of each expert in slot (= token) order: a counting sort.
    std::vector<int64_t> count(size_t(E) + 1, 0);
    for (int64_t s = 0; s < S; ++s) {
        WEFT_CHECK(expert[s] >= 0 && expert[s] < E,
                   "moe_plan: slot {} routes to expert {}, expected 0..{}", s, expert[s], E - 1);
        ++count[size_t(expert[s]) + 1];
    }
    std::vector<int64_t> start(size_t(E) + 1, 0);
    for (int64_t e = 0; e < E; ++e) start[size_t(e + 1)] = start[size_t(e)] + count[size_t(e + 1)];
    std::vector<int32_t> by_expert(static_cast<size_t>(S));
    {
        std::vector<int64_t> at(start.begin(), start.end() - 1);
        for (int64_t s = 0; s < S; ++s) by_expert[size_t(at[size_t(expert[s])]++)] = int32_t(s);
    }
    plan.offsets.assign(size_t(E) + 1, 0);
    plan.slot_of_row.clear();
    plan.slot_of_row.reserve(size_t(S));
    std::vector<int32_t> keep;
    for (int64_t e = 0; e < E; ++e) {
        auto first = by_expert.begin() + start[size_t(e)];
        auto last = by_expert.begin() + start[size_t(e + 1)];
        keep.assign(first, last);
        if (capacity >= 0 && int64_t(keep.size()) > capacity) {
            // The `capacity` best scores (ties to the earlier slot), then back to slot order.
            std::stable_sort(keep.begin(), keep.end(),
                             [&](int32_t a, int32_t b) { return score[a] > score[b]; });
            plan.dropped += int64_t(keep.size()) - capacity;
            keep.resize(size_t(capacity));
            std::sort(keep.begin(), keep.end());
        }
        for (int32_t s : keep) {
            plan.row_of_slot[size_t(s)] = int32_t(plan.slot_of_row.size());
            plan.slot_of_row.push_back(s);
        }
        plan.offsets[size_t(e + 1)] = int64_t(plan.slot_of_row.size());
    }
}

void moe_permute(float* xp, const float* x, const MoePlan& p, int64_t C) {
    WEFT_PROFILE("moe_permute");
    const int64_t R = p.rows();
#pragma omp parallel for schedule(static) if (R * C >= kMinParallel)
    for (int64_t r = 0; r < R; ++r)
        std::memcpy(xp + r * C, x + (p.slot_of_row[size_t(r)] / p.k) * C,
                    size_t(C) * sizeof(float));
}

void moe_permute_backward(float* dx, const float* dxp, const MoePlan& p, int64_t C,
                          bool accumulate) {
    WEFT_PROFILE("moe_permute_bwd");
#pragma omp parallel for schedule(static) if (p.N * C >= kMinParallel)
    for (int64_t t = 0; t < p.N; ++t) {
        float* d = dx + t * C;
        if (!accumulate) std::fill(d, d + C, 0.0f);
        for (int64_t j = 0; j < p.k; ++j) {
            const int32_t r = p.row_of_slot[size_t(t * p.k + j)];
            if (r < 0) continue;
            const float* g = dxp + int64_t(r) * C;
            for (int64_t c = 0; c < C; ++c) d[c] += g[c];
        }
    }
}

void moe_unpermute(float* y, const float* yp, const float* weight, const float* residual,
                   const MoePlan& p, int64_t C) {
    WEFT_PROFILE("moe_unpermute");
#pragma omp parallel for schedule(static) if (p.N * C >= kMinParallel)
    for (int64_t t = 0; t < p.N; ++t) {
        float* out = y + t * C;
        std::fill(out, out + C, 0.0f);
        for (int64_t j = 0; j < p.k; ++j) {
            const int64_t s = t * p.k + j;
            const int32_t r = p.row_of_slot[size_t(s)];
            if (r < 0) continue;
            const float w = weight[s];
            const float* src = yp + int64_t(r) * C;
            for (int64_t c = 0; c < C; ++c) out[c] += w * src[c];
        }
        if (residual)
            for (int64_t c = 0; c < C; ++c) out[c] += residual[t * C + c];
    }
}

void moe_unpermute_backward(float* dyp, float* dweight, const float* dy, const float* yp,
                            const float* weight, const MoePlan& p, int64_t C) {
    WEFT_PROFILE("moe_unpermute_bwd");
#pragma omp parallel for schedule(static) if (p.N * C >= kMinParallel)
    for (int64_t t = 0; t < p.N; ++t) {
        const float* g = dy + t * C;
        for (int64_t j = 0; j < p.k; ++j) {
            const int64_t s = t * p.k + j;
            const int32_t r = p.row_of_slot[size_t(s)];
            if (r < 0) {
                dweight[s] = 0;
                continue;
            }
            const float w = weight[s];
            const float* src = yp + int64_t(r) * C;
            float* d = dyp + int64_t(r) * C;
            float dot = 0;
            for (int64_t c = 0; c < C; ++c) {
                d[c] = w * g[c];
                dot += g[c] * src[c];
            }
            dweight[s] = dot;
        }
    }
}

}  // namespace weft::kernels
