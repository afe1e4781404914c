#include "weft/kernels/classifier_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "weft/core/error.hpp"
#include "weft/kernels/classifier.hpp"
#include "weft/kernels/isa.hpp"
#include "weft/kernels/matmul.hpp"
#include "weft/kernels/profile.hpp"
#include "weft/kernels/softmax_rows.hpp"

namespace weft::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_sizes(const char* where, int64_t N, int64_t C, int64_t Vr) {
    WEFT_CHECK(N >= 0 && C > 0 && Vr >= 0, "{}: bad sizes N={} C={} Vr={}", where, N, C, Vr);
}

}  // namespace

void classifier_shard_logits(float* logits, float* row_max, const float* x, const float* wte,
                             int64_t N, int64_t C, int64_t Vr) {
    WEFT_PROFILE("classifier");
    check_sizes("classifier_shard_logits", N, C, Vr);
    if (N == 0) return;
    if (Vr == 0) {  // a shard of padding rows only: it takes no part in any row's softmax
        std::fill(row_max, row_max + N, kNegInf);
        return;
    }
    gemm(false, true, N, Vr, C, 1.0f, x, C, wte, C, 0.0f, logits, Vr);
    const auto row_max_of = detail::softmax_row_ops().max;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) row_max[n] = row_max_of(logits + n * Vr, Vr);
}

void classifier_shard_sums(float* sums, float* logits, const float* row_max, const int32_t* targets,
                           int64_t N, int64_t Vr, int64_t v0, bool keep_exp) {
    WEFT_PROFILE("classifier");
    check_sizes("classifier_shard_sums", N, 1, Vr);
    const auto exp_sum = detail::softmax_row_ops().exp_sum;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        float* row = logits + n * Vr;
        const int64_t t = targets[n];
        sums[n] = 0.0f;
        sums[N + n] = 0.0f;
        if (t < 0) {
            if (keep_exp) std::fill(row, row + Vr, 0.0f);  // no gradient from this row
            continue;
        }
        // The target's logit is read before keep_exp overwrites it.
        if (t >= v0 && t < v0 + Vr) sums[N + n] = row[t - v0];
        sums[n] = exp_sum(row, Vr, row_max[n], keep_exp);
    }
}

void classifier_shard_finish(float* loss, float* dx, float* dwte, float* logits,
                             const float* row_max, const float* sums, const float* x,
                             const float* wte, const int32_t* targets, int64_t N, int64_t C,
                             int64_t Vr, int64_t v0, float scale) {
    WEFT_PROFILE("classifier");
    check_sizes("classifier_shard_finish", N, C, Vr);
    const bool grad = dx != nullptr || dwte != nullptr;
    const auto scale_row = detail::softmax_row_ops().scale;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const int64_t t = targets[n];
        if (t < 0) {
            if (loss) loss[n] = 0.0f;
            continue;
        }
        const float sum = sums[n], max = row_max[n], target_logit = sums[N + n];
        if (loss) loss[n] = std::log(sum) + max - target_logit;
        if (grad) {
            float* row = logits + n * Vr;
            scale_row(row, Vr, scale / sum);
            if (t >= v0 && t < v0 + Vr) row[t - v0] -= scale;
        }
    }
    if (!grad || N == 0) return;
    if (Vr == 0) {
        if (dx) std::fill(dx, dx + N * C, 0.0f);
        return;
    }
    if (dx) gemm(false, false, N, C, Vr, 1.0f, logits, Vr, wte, C, 0.0f, dx, C);
    if (dwte) gemm(true, false, Vr, C, N, 1.0f, logits, Vr, x, C, 1.0f, dwte, C);
}

int64_t classifier_shard_scratch_floats(int64_t N, int64_t Vr) {
    const int64_t R = classifier_chunk_rows(N);
    return R * Vr + 3 * R;
}

}  // namespace weft::kernels
