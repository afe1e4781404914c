#include "weft/kernels/attention/varlen.hpp"

#include <omp.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/kernels/attention/paths.hpp"
#include "weft/kernels/profile.hpp"

namespace weft::kernels {

namespace {

// One document's part of a call: its queries (rows tq .. tq+nq of batch row b) against its keys
// (rows tk .. tk+nk), at positions q_pos0 and k_pos0 counted from the document's start, so that
// the kernel's causal prefix is the document's.
struct Segment {
    int64_t b, tq, tk, nq, nk, q_pos0, k_pos0;
};

// The kernel shape of one segment: a batch of one at the caller's strides.
AttentionShape segment_shape(const AttentionShape& s, const Segment& g) {
    AttentionShape one = s;
    one.B = 1;
    one.Tq = g.nq;
    one.Tk = g.nk;
    one.q_pos0 = g.q_pos0;
    one.k_pos0 = g.k_pos0;
    return one;
}

// Runs seg(g, lse_g) for every segment, lse_g being the segment's lse as a call of its own
// ([NH, nq]) in scratch: copied from the caller's lse `from` first (backward), or into the
// caller's lse `to` after (forward). Segments whose work (nq·nk) is at least a thread's share of
// the whole run alone on every thread, the largest first; the rest side by side, one a thread
// (the kernel's own threads then stay off: nested regions are inactive), so a batch of many short
// documents is not a series of barriers. Segments share no query and no key row, so none writes
// what another reads or writes.
template <class Seg>
void for_segments(const AttentionShape& s, std::vector<Segment> segs, const float* from, float* to,
                  Seg&& seg) {
    const int64_t T = s.Tq, NH = s.NH;
    auto work = [](const Segment& g) { return double(g.nq) * double(g.nk); };
    std::stable_sort(segs.begin(), segs.end(),
                     [&](const Segment& a, const Segment& b) { return work(a) > work(b); });
    auto run = [&](const Segment& g) {
        thread_local std::vector<float> scratch;
        scratch.resize(size_t(NH * g.nq));
        for (int64_t h = 0; h < NH && from; ++h)
            std::copy_n(from + (g.b * NH + h) * T + g.tq, g.nq, scratch.data() + h * g.nq);
        seg(g, scratch.data());
        for (int64_t h = 0; h < NH && to; ++h)
            std::copy_n(scratch.data() + h * g.nq, g.nq, to + (g.b * NH + h) * T + g.tq);
    };
    const int64_t threads = omp_get_max_threads();
    const double total = std::accumulate(segs.begin(), segs.end(), 0.0,
                                         [&](double w, const Segment& g) { return w + work(g); });
    size_t alone = 0;
    while (alone < segs.size() && threads > 1 && work(segs[alone]) * double(threads) >= total)
        run(segs[alone++]);
    const int64_t rest = int64_t(segs.size() - alone);
#pragma omp parallel for schedule(dynamic) if (rest > 1 && threads > 1)
    for (int64_t i = 0; i < rest; ++i) run(segs[alone + size_t(i)]);
}

// The documents of B rows of T as segments: each against itself, from position 0.
std::vector<Segment> document_segments(const AttentionShape& s, std::span<const int64_t> cu) {
    const int64_t T = s.Tq;
    std::vector<Segment> segs;
    segs.reserve(cu.size() - 1);
    for (size_t i = 0; i + 1 < cu.size(); ++i) {
        const int64_t n = cu[i + 1] - cu[i];
        segs.push_back({cu[i] / T, cu[i] % T, cu[i] % T, n, n, 0, 0});
    }
    return segs;
}

// What is visible of a block (queries at s.q_pos0 .. + Tq, keys at s.k_pos0 .. + Tk of one row)
// when the row's documents start at `starts`: per document, its queries from its first visible
// key on against its keys up to its last query.
std::vector<Segment> block_segments(const AttentionShape& s, std::span<const int64_t> starts) {
    const int64_t qa = s.q_pos0, qb = s.q_pos0 + s.Tq, ka = s.k_pos0, kb = s.k_pos0 + s.Tk;
    std::vector<Segment> segs;
    // The document holding the first position both ranges could share.
    size_t d =
        size_t(std::upper_bound(starts.begin(), starts.end(), std::max(qa, ka)) - starts.begin());
    d = d > 0 ? d - 1 : 0;
    for (; d < starts.size() && starts[d] < std::min(qb, kb); ++d) {
        const int64_t ds = starts[d], de = d + 1 < starts.size()
                                               ? starts[d + 1]
                                               : std::numeric_limits<int64_t>::max();
        const int64_t ks = std::max(ka, ds), qe = std::min(qb, de);
        const int64_t qs = std::max({qa, ds, ks}), ke = std::min({kb, de, qe});
        if (qs < qe && ks < ke)
            segs.push_back({0, qs - qa, ks - ka, qe - qs, ke - ks, qs - ds, ks - ds});
    }
    return segs;
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

std::vector<std::vector<int64_t>> row_starts(std::span<const int64_t> cu, int64_t B, int64_t T) {
    check_cu_seqlens(cu, B, T);
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(B));
    for (size_t i = 0; i + 1 < cu.size(); ++i) rows[size_t(cu[i] / T)].push_back(cu[i] % T);
    return rows;
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

void check_block(const AttentionShape& s, std::span<const int64_t> starts, const char* where) {
    detail::check_shape(s, where);
    WEFT_CHECK(s.B == 1, "{}: a block of one row, got B={}", where, s.B);
    WEFT_CHECK(!starts.empty() && starts.front() == 0 &&
                   std::adjacent_find(starts.begin(), starts.end(), std::greater_equal<>()) ==
                       starts.end(),
               "{}: {} document starts, expected strictly increasing ones from 0", where,
               starts.size());
}

// Each segment's forward, by `kernel` (attention_forward or its bf16 twin).
template <class Out, class In, class Kernel>
void segments_forward(Out* out, float* lse, const In* q, const In* k, const In* v,
                      const AttentionShape& s, std::vector<Segment> segs, Kernel&& kernel) {
    for_segments(s, std::move(segs), nullptr, lse, [&](const Segment& g, float* lse_g) {
        const int64_t qr = g.b * s.Tq + g.tq, kr = g.b * s.Tk + g.tk;
        kernel(out + qr * s.ldo, lse_g, q + qr * s.ldq, k + kr * s.ldkv, v + kr * s.ldkv,
               segment_shape(s, g));
    });
}

template <class In, class Kernel>
void segments_backward(float* dq, float* dk, float* dv, const In* dout, const In* q, const In* k,
                       const In* v, const In* out, const float* lse, const AttentionShape& s,
                       std::vector<Segment> segs, Kernel&& kernel) {
    for_segments(s, std::move(segs), lse, nullptr, [&](const Segment& g, float* lse_g) {
        const int64_t qr = g.b * s.Tq + g.tq, kr = g.b * s.Tk + g.tk;
        kernel(dq + qr * s.ldq, dk + kr * s.ldkv, dv + kr * s.ldkv, dout + qr * s.ldo,
               q + qr * s.ldq, k + kr * s.ldkv, v + kr * s.ldkv, out + qr * s.ldo, lse_g,
               segment_shape(s, g));
    });
}

// A block's forward: every query row unseen (lse -inf, output zeros), then each segment's; false
// with nothing written when no segment is visible.
template <class Out, class In, class Kernel>
bool block_forward(Out* out, float* lse, const In* q, const In* k, const In* v,
                   const AttentionShape& s, std::span<const int64_t> starts, Kernel&& kernel) {
    std::vector<Segment> segs = block_segments(s, starts);
    if (segs.empty()) return false;
    std::fill_n(lse, s.NH * s.Tq, -std::numeric_limits<float>::infinity());
    for (int64_t t = 0; t < s.Tq; ++t) std::fill_n(out + t * s.ldo, s.NH * s.HS, Out{});
    segments_forward(out, lse, q, k, v, s, std::move(segs), kernel);
    return true;
}

}  // namespace

void attention_forward_varlen(float* out, float* lse, const float* q, const float* k,
                              const float* v, const AttentionShape& s,
                              std::span<const int64_t> cu) {
    WEFT_PROFILE("attention_fwd");
    check_varlen(s, cu, "attention_forward_varlen");
    segments_forward(out, lse, q, k, v, s, document_segments(s, cu), attention_forward);
}

void attention_backward_varlen(float* dq, float* dk, float* dv, const float* dout, const float* q,
                               const float* k, const float* v, const float* out, const float* lse,
                               const AttentionShape& s, std::span<const int64_t> cu) {
    WEFT_PROFILE("attention_bwd");
    check_varlen(s, cu, "attention_backward_varlen");
    segments_backward(dq, dk, dv, dout, q, k, v, out, lse, s, document_segments(s, cu),
                      attention_backward);
}

void attention_forward_varlen_bf16(uint16_t* out, float* lse, const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, const AttentionShape& s,
                                   std::span<const int64_t> cu) {
    check_varlen(s, cu, "attention_forward_varlen_bf16");
    segments_forward(out, lse, q, k, v, s, document_segments(s, cu), attention_forward_bf16);
}

void attention_backward_varlen_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                                    const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    const uint16_t* out, const float* lse, const AttentionShape& s,
                                    std::span<const int64_t> cu) {
    check_varlen(s, cu, "attention_backward_varlen_bf16");
    segments_backward(dq, dk, dv, dout, q, k, v, out, lse, s, document_segments(s, cu),
                      attention_backward_bf16);
}

bool attention_forward_block_documents(float* out, float* lse, const float* q, const float* k,
                                       const float* v, const AttentionShape& s,
                                       std::span<const int64_t> starts) {
    WEFT_PROFILE("attention_fwd");
    check_block(s, starts, "attention_forward_block_documents");
    return block_forward(out, lse, q, k, v, s, starts, attention_forward);
}

void attention_backward_block_documents(float* dq, float* dk, float* dv, const float* dout,
                                        const float* q, const float* k, const float* v,
                                        const float* out, const float* lse, const AttentionShape& s,
                                        std::span<const int64_t> starts) {
    WEFT_PROFILE("attention_bwd");
    check_block(s, starts, "attention_backward_block_documents");
    segments_backward(dq, dk, dv, dout, q, k, v, out, lse, s, block_segments(s, starts),
                      attention_backward);
}

bool attention_forward_block_documents_bf16(uint16_t* out, float* lse, const uint16_t* q,
                                            const uint16_t* k, const uint16_t* v,
                                            const AttentionShape& s,
                                            std::span<const int64_t> starts) {
    check_block(s, starts, "attention_forward_block_documents_bf16");
    return block_forward(out, lse, q, k, v, s, starts, attention_forward_bf16);
}

void attention_backward_block_documents_bf16(float* dq, float* dk, float* dv, const uint16_t* dout,
                                             const uint16_t* q, const uint16_t* k,
                                             const uint16_t* v, const uint16_t* out,
                                             const float* lse, const AttentionShape& s,
                                             std::span<const int64_t> starts) {
    check_block(s, starts, "attention_backward_block_documents_bf16");
    segments_backward(dq, dk, dv, dout, q, k, v, out, lse, s, block_segments(s, starts),
                      attention_backward_bf16);
}

}  // namespace weft::kernels
