#include "weft/kernels/attention/varlen.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/paths.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {

// One document of the batch: its first row in the flattened B*T rows, its row of the batch and
// offset in it, and its length.
struct Document {
    int64_t row, b, t0, n;
};

// The shape of one document run alone: a sequence of n at the caller's strides.
AttentionShape document_shape(const AttentionShape& s, int64_t n) {
    AttentionShape one = s;
    one.B = 1;
    one.Tq = one.Tk = n;
    return one;
}

// Runs doc(d, lse_d) for every document, lse_d being the document's lse as a sequence of its own
// ([NH, n]) in scratch: copied from the batch's lse `from` first (backward), or into the batch's
// lse `to` after (forward). Documents whose work (n²) is at least a
// thread's share of the whole run alone on every thread, the longest first; the rest side by
// side, one a thread (the kernel's own threads then stay off: nested regions are inactive), so
// a batch of many short documents is not a series of barriers.
template <class Doc>
void for_documents(const AttentionShape& s, std::span<const int64_t> cu, const float* from,
                   float* to, Doc&& doc) {
    const int64_t T = s.Tq, NH = s.NH;
    std::vector<Document> docs;
    docs.reserve(cu.size() - 1);
    for (size_t i = 0; i + 1 < cu.size(); ++i)
        docs.push_back({cu[i], cu[i] / T, cu[i] % T, cu[i + 1] - cu[i]});
    std::stable_sort(docs.begin(), docs.end(),
                     [](const Document& a, const Document& b) { return a.n > b.n; });
    auto run = [&](const Document& d) {
        thread_local std::vector<float> scratch;
        scratch.resize(size_t(NH * d.n));
        for (int64_t h = 0; h < NH && from; ++h)
            std::copy_n(from + (d.b * NH + h) * T + d.t0, d.n, scratch.data() + h * d.n);
        doc(d, scratch.data());
        for (int64_t h = 0; h < NH && to; ++h)
            std::copy_n(scratch.data() + h * d.n, d.n, to + (d.b * NH + h) * T + d.t0);
    };
    const int64_t threads = omp_get_max_threads();
    const double work = std::accumulate(docs.begin(), docs.end(), 0.0, [](double w, auto& d) {
        return w + double(d.n) * double(d.n);
    });
    size_t alone = 0;
    while (alone < docs.size() && threads > 1 &&
           double(docs[alone].n) * double(docs[alone].n) * double(threads) >= work)
        run(docs[alone++]);
    const int64_t rest = int64_t(docs.size() - alone);
#pragma omp parallel for schedule(dynamic) if (rest > 1 && threads > 1)
    for (int64_t i = 0; i < rest; ++i) run(docs[alone + size_t(i)]);
}

}  // namespace

void check_cu_seqlens(std::span<const int64_t> cu, int64_t B, int64_t T) {
    WEFT_CHECK(cu.size() >= 2 && cu.front() == 0 && cu.back() == B * T,
               "document boundaries: {} entries from {} to {}, expected at least 2, from 0 to "
               "B*T = {} (B={}, T={})",
               cu.size(), cu.empty() ? 0 : cu.front(), cu.empty() ? 0 : cu.back(), B * T, B, T);
    for (size_t i = 1; i < cu.size(); ++i) {
        // Row b*T must be a boundary: the next boundary after cu[i-1] is at most the row's end.
        const int64_t row_end = (cu[i - 1] / T + 1) * T;
        WEFT_CHECK(cu[i] > cu[i - 1] && cu[i] <= row_end,
                   "document boundaries: entry {} is {} after {}, expected a larger one no later "
                   "than the end of its row at {} (rows of T={})",
                   i, cu[i], cu[i - 1], row_end, T);
    }
}

namespace {

void check_varlen(const AttentionShape& s, std::span<const int64_t> cu, const char* where) {
    detail::check_shape(s, where);
    WEFT_CHECK(s.Tq == s.Tk && s.q_pos0 == 0 && s.k_pos0 == 0,
               "{}: packed documents need whole sequences (Tq = Tk, positions from 0), got "
               "Tq={}, Tk={}, q_pos0={}, k_pos0={}",
               where, s.Tq, s.Tk, s.q_pos0, s.k_pos0);
    check_cu_seqlens(cu, s.B, s.Tq);
}

}  // namespace

void attention_forward_varlen(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s,
                              std::span<const int64_t> cu) {
    WEFT_PROFILE("attention_fwd");
    check_varlen(s, cu, "attention_forward_varlen");
    for_documents(s, cu, nullptr, lse, [&](const Document& d, float* lse_d) {
        attention_forward(out + d.row * s.ldo, lse_d, q + d.row * s.ldq, k + d.row * s.ldkv,
                          v + d.row * s.ldkv, document_shape(s, d.n));
    });
}

void attention_backward_varlen(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s, std::span<const int64_t> cu) {
    WEFT_PROFILE("attention_bwd");
    check_varlen(s, cu, "attention_backward_varlen");
    for_documents(s, cu, lse, nullptr, [&](const Document& d, float* lse_d) {
        const int64_t r = d.row;
        attention_backward(dq + r * s.ldq, dk + r * s.ldkv, dv + r * s.ldkv, dout + r * s.ldo,
                           q + r * s.ldq, k + r * s.ldkv, v + r * s.ldkv, out + r * s.ldo, lse_d,
                           document_shape(s, d.n));
    });
}

void attention_forward_varlen_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, const AttentionShape& s,
                                   std::span<const int64_t> cu) {
    check_varlen(s, cu, "attention_forward_varlen_bf16");
    for_documents(s, cu, nullptr, lse, [&](const Document& d, float* lse_d) {
        attention_forward_bf16(out + d.row * s.ldo, lse_d, q + d.row * s.ldq, k + d.row * s.ldkv,
                               v + d.row * s.ldkv, document_shape(s, d.n));
    });
}

void attention_backward_varlen_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                                    const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const uint16_t* out, const float* lse, const AttentionShape& s,
                                    std::span<const int64_t> cu) {
    check_varlen(s, cu, "attention_backward_varlen_bf16");
    for_documents(s, cu, lse, nullptr, [&](const Document& d, float* lse_d) {
        const int64_t r = d.row;
        attention_backward_bf16(dq + r * s.ldq, dk + r * s.ldkv, dv + r * s.ldkv, dout + r * s.ldo,
                                q + r * s.ldq, k + r * s.ldkv, v + r * s.ldkv, out + r * s.ldo,
                                lse_d, document_shape(s, d.n));
    });
}

}  // namespace weft::kernels
