#include "weft/parallel/working_copy.hpp"

#include <algorithm>
#include <cstring>

#include "weft/core/error.hpp"
#include "weft/kernels/elementwise.hpp"
#include "weft/kernels/precision.hpp"

namespace weft::parallel {

bool kept_bf16(const model::ParamLayout& layout, const model::ParamSpec& t) {
    const int last = int(layout.units.size()) - 1;
    return t.unit >= 1 && t.unit < last && t.rows_stored > 1 && t.cols_stored > 1 && !t.expert;
}

namespace {

bool unit_in_place(const model::ParamLayout& layout, int unit) {
    const model::Unit& u = layout.units[size_t(unit)];
    for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i)
        if (kept_bf16(layout, layout.tensors[size_t(i)])) return false;
    return true;
}

}  // namespace

int64_t WorkingCopy::stored_bytes(const model::ParamLayout& layout) {
    int64_t bytes = 0;
    for (int u = 0; u < int(layout.units.size()); ++u) {
        const model::Unit& unit = layout.units[size_t(u)];
        if (unit_in_place(layout, u)) {
            bytes += 4 * unit.size;
            continue;
        }
        for (int i = unit.first_tensor; i < unit.first_tensor + unit.tensors; ++i) {
            const model::ParamSpec& t = layout.tensors[size_t(i)];
            bytes += (kept_bf16(layout, t) ? 2 : 4) * t.numel_stored;
        }
    }
    return bytes;
}

int64_t WorkingCopy::widened_floats(const model::ParamLayout& layout) {
    int64_t most = 0;
    for (int u = 0; u < int(layout.units.size()); ++u)
        if (!unit_in_place(layout, u)) most = std::max(most, layout.units[size_t(u)].size);
    return most;
}

WorkingCopy::WorkingCopy(const model::ParamLayout& layout, BufferPool& pool)
    : layout_(layout),
      pool_(pool),
      place_(layout.tensors.size()),
      in_place_(layout.units.size(), -1),
      temp_(layout.units.size()),
      gtemp_(layout.units.size()) {
    int64_t full = 0, half = 0;
    for (int u = 0; u < int(layout.units.size()); ++u) {
        const model::Unit& unit = layout.units[size_t(u)];
        const bool whole = unit_in_place(layout, u);
        if (whole) in_place_[size_t(u)] = full;
        for (int i = unit.first_tensor; i < unit.first_tensor + unit.tensors; ++i) {
            const model::ParamSpec& t = layout.tensors[size_t(i)];
            if (whole) {
                place_[size_t(i)] = {false, full + (t.offset - unit.offset)};
            } else if (kept_bf16(layout, t)) {
                place_[size_t(i)] = {true, half};
                half += t.numel_stored;
            } else {
                place_[size_t(i)] = {false, full};
                full += t.numel_stored;
            }
        }
        if (whole) full += unit.size;
    }
    full_ = Buffer(full);
    gfull_ = Buffer(full);
    half_.assign(size_t(half), 0);
    ghalf_.assign(size_t(half), 0);
}

template <class F>
void WorkingCopy::for_pieces(int64_t begin, int64_t end, F f) const {
    const auto& ts = layout_.tensors;
    // The first tensor that ends after begin (tensors are in buffer order).
    auto it = std::partition_point(ts.begin(), ts.end(), [&](const model::ParamSpec& t) {
        return t.offset + t.numel_stored <= begin;
    });
    for (; it != ts.end() && it->offset < end; ++it) {
        const int64_t lo = std::max(begin, it->offset);
        const int64_t hi = std::min(end, it->offset + it->numel_stored);
        if (lo < hi) f(size_t(it - ts.begin()), lo, hi);
    }
}

void WorkingCopy::read(bool grads, int64_t begin, int64_t n, float* out) const {
    std::fill_n(out, n, 0.0f);  // alignment padding
    const float* full = (grads ? gfull_ : full_).data();
    const uint16_t* half = (grads ? ghalf_ : half_).data();
    for_pieces(begin, begin + n, [&](size_t i, int64_t lo, int64_t hi) {
        const Place& p = place_[i];
        const int64_t at = p.at + (lo - layout_.tensors[i].offset);
        if (p.half)
            kernels::convert_bf16_to_fp32(out + (lo - begin), half + at, hi - lo);
        else
            std::copy_n(full + at, hi - lo, out + (lo - begin));
    });
}

void WorkingCopy::read_params(int64_t begin, int64_t n, float* out) const {
    read(false, begin, n, out);
}

void WorkingCopy::read_grads(int64_t begin, int64_t n, float* out) const {
    read(true, begin, n, out);
}

void WorkingCopy::write_params(int64_t begin, int64_t n, const float* in) {
    for_pieces(begin, begin + n, [&](size_t i, int64_t lo, int64_t hi) {
        const Place& p = place_[i];
        const int64_t at = p.at + (lo - layout_.tensors[i].offset);
        if (p.half)
            kernels::convert_fp32_to_bf16(half_.data() + at, in + (lo - begin), 1, hi - lo,
                                          hi - lo);
        else
            std::copy_n(in + (lo - begin), hi - lo, full_.data() + at);
    });
}

double WorkingCopy::grad_sum_squares(int64_t begin, int64_t n) const {
    // kernels::sum_squares adds the sums of its blocks in order: the same blocks, widened one at
    // a time, give the same bits.
    const int64_t block = kernels::kSumSquaresBlock;
    Buffer piece(std::min(n, block));
    double total = 0;
    for (int64_t a = 0; a < n; a += block) {
        const int64_t m = std::min(block, n - a);
        read_grads(begin + a, m, piece.data());
        total += kernels::sum_squares(piece.data(), m);
    }
    return total;
}

float* WorkingCopy::widen(int unit, const float* full, const uint16_t* half) {
    const model::Unit& u = layout_.units[size_t(unit)];
    Buffer b = pool_.take_zeroed(u.size);
    for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i) {
        const model::ParamSpec& t = layout_.tensors[size_t(i)];
        const Place& p = place_[size_t(i)];
        float* dst = b.data() + (t.offset - u.offset);
        if (p.half)
            kernels::convert_bf16_to_fp32(dst, half + p.at, t.numel_stored);
        else
            std::copy_n(full + p.at, t.numel_stored, dst);
    }
    temp_[size_t(unit)] = std::move(b);
    return temp_[size_t(unit)].data();
}

float* WorkingCopy::params(int unit) {
    if (const int64_t at = in_place_[size_t(unit)]; at >= 0) return full_.data() + at;
    if (temp_[size_t(unit)].size() > 0) return temp_[size_t(unit)].data();
    return widen(unit, full_.data(), half_.data());
}

float* WorkingCopy::grads(int unit) {
    if (const int64_t at = in_place_[size_t(unit)]; at >= 0) return gfull_.data() + at;
    Buffer& g = gtemp_[size_t(unit)];
    if (g.size() == 0) g = pool_.take_zeroed(layout_.units[size_t(unit)].size);
    return g.data();
}

void WorkingCopy::release(int unit) {
    pool_.give(std::move(temp_[size_t(unit)]));
}

void WorkingCopy::grads_ready(int unit, const Reduce& reduce, bool last_micro_batch) {
    const model::Unit& u = layout_.units[size_t(unit)];
    if (const int64_t at = in_place_[size_t(unit)]; at >= 0) {
        if (reduce && last_micro_batch) reduce(gfull_.data() + at, u.size);
        return;
    }
    Buffer& g = gtemp_[size_t(unit)];
    if (g.size() == 0) return;  // no gradient this micro-batch
    if (reduce) reduce(g.data(), u.size);
    for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i) {
        const model::ParamSpec& t = layout_.tensors[size_t(i)];
        const Place& p = place_[size_t(i)];
        float* src = g.data() + (t.offset - u.offset);
        if (p.half) {
            // The micro-batch's fp32 sum, plus what earlier ones left, rounded once.
            kernels::add_bf16_to_fp32(src, ghalf_.data() + p.at, t.numel_stored);
            kernels::convert_fp32_to_bf16(ghalf_.data() + p.at, src, 1, t.numel_stored,
                                          t.numel_stored);
        } else {
            kernels::add_inplace(gfull_.data() + p.at, src, t.numel_stored);
        }
    }
    pool_.give(std::move(g));
}

void WorkingCopy::zero_grads() {
    gfull_.zero();
    std::fill(ghalf_.begin(), ghalf_.end(), uint16_t(0));
}

}  // namespace weft::parallel
