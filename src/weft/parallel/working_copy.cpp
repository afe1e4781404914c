#include "weft/parallel/working_copy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
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

// Records start and end on a direct-I/O block, their tensors on a cache line.
constexpr int64_t kRecordAlign = offload::kBlockFloats * int64_t(sizeof(float));
constexpr int64_t kTensorAlign = 64;
// Pool buffers of records are at least 1 MiB, which Buffer starts on a page (direct I/O).
constexpr int64_t kMinRecordFloats = int64_t(1) << 18;
enum Kind { kRead = 0, kWrite = 1, kWeights = 0, kGrads = 2 };
// A record moves in requests of at most this many bytes (a multiple of the direct-I/O block).
constexpr int64_t kPieceBytes = int64_t(256) << 20;

int64_t round_up(int64_t n, int64_t m) {
    return (n + m - 1) / m * m;
}

bool unit_in_place(const model::ParamLayout& layout, int unit, bool bf16) {
    if (!bf16) return true;
    const model::Unit& u = layout.units[size_t(unit)];
    for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i)
        if (kept_bf16(layout, layout.tensors[size_t(i)])) return false;
    return true;
}

// Where each tensor goes in its unit's record, and each record's size (the one layout that
// stored_bytes, resident_bytes and the copy itself read).
struct Records {
    std::vector<int64_t> tensor_at;
    std::vector<bool> half, in_place;
    std::vector<int64_t> unit_bytes;
};

Records lay_out(const model::ParamLayout& layout, bool bf16) {
    Records r;
    r.tensor_at.resize(layout.tensors.size());
    r.half.resize(layout.tensors.size());
    for (int u = 0; u < int(layout.units.size()); ++u) {
        const model::Unit& unit = layout.units[size_t(u)];
        const bool whole = unit_in_place(layout, u, bf16);
        int64_t bytes = whole ? unit.size * int64_t(sizeof(float)) : 0;
        for (int i = unit.first_tensor; i < unit.first_tensor + unit.tensors; ++i) {
            const model::ParamSpec& t = layout.tensors[size_t(i)];
            if (whole) {
                r.tensor_at[size_t(i)] = (t.offset - unit.offset) * int64_t(sizeof(float));
                continue;
            }
            const bool half = kept_bf16(layout, t);
            bytes = round_up(bytes, kTensorAlign);
            r.tensor_at[size_t(i)] = bytes;
            r.half[size_t(i)] = half;
            bytes += (half ? 2 : 4) * t.numel_stored;
        }
        r.in_place.push_back(whole);
        r.unit_bytes.push_back(round_up(std::max<int64_t>(bytes, 1), kRecordAlign));
    }
    return r;
}

std::byte* bytes_of(Buffer& b) {
    return reinterpret_cast<std::byte*>(b.data());
}

using Clock = std::chrono::steady_clock;

}  // namespace

int64_t WorkingCopy::stored_bytes(const model::ParamLayout& layout, bool bf16) {
    int64_t bytes = 0;
    for (int64_t b : lay_out(layout, bf16).unit_bytes) bytes += b;
    return bytes;
}

int64_t WorkingCopy::resident_bytes(const model::ParamLayout& layout, bool bf16) {
    const std::vector<int64_t> b = lay_out(layout, bf16).unit_bytes;
    auto held = [](int64_t bytes) {
        return std::max(bytes, kMinRecordFloats * int64_t(sizeof(float)));
    };
    if (b.size() < 3) return held(b[0]) + (b.size() > 1 ? held(b[1]) : 0);
    const int64_t block = *std::max_element(b.begin() + 1, b.end() - 1);
    return held(std::max(b.front(), b.back())) + 2 * held(block);
}

int64_t WorkingCopy::widened_floats(const model::ParamLayout& layout, bool bf16) {
    int64_t most = 0;
    for (int u = 0; u < int(layout.units.size()); ++u)
        if (!unit_in_place(layout, u, bf16)) most = std::max(most, layout.units[size_t(u)].size);
    return most;
}

WorkingCopy::WorkingCopy(const model::ParamLayout& layout, BufferPool& pool, bool bf16,
                         const std::filesystem::path& dir, int rank, bool gradients)
    : layout_(layout), pool_(pool), temp_(layout.units.size()), gtemp_(layout.units.size()) {
    Records r = lay_out(layout, bf16);
    tensor_at_ = std::move(r.tensor_at);
    half_ = std::move(r.half);
    in_place_ = std::move(r.in_place);
    unit_bytes_ = std::move(r.unit_bytes);
    for (const model::Unit& u : layout.units) {
        int64_t n = 0;
        for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i)
            n += layout.tensors[size_t(i)].numel_stored;
        unit_numel_.push_back(n);
    }
    int64_t total = 0;
    for (int64_t b : unit_bytes_) {
        unit_at_.push_back(total);
        total += b;
    }
    if (dir.empty()) {
        store_ = Buffer(total / int64_t(sizeof(float)));
        if (gradients) gstore_ = Buffer(total / int64_t(sizeof(float)));
        zero_owed_.assign(layout.units.size(), 0);
        return;
    }
    std::vector<int64_t> floats;
    for (int64_t b : unit_bytes_) floats.push_back(b / int64_t(sizeof(float)));
    const size_t n = layout.units.size();
    files_ = std::make_unique<offload::StateFiles>(
        dir, rank,
        gradients ? std::vector<std::string>{"weights", "grads"}
                  : std::vector<std::string>{"weights"},
        floats);
    ahead_.resize(n), wout_.resize(n), gout_.resize(n);
    busy_.assign(4 * n, 0);
    has_grads_.assign(n, 0);
    // A read ahead, a write of the weights and one of the gradients per unit at most (more
    // requests wait for room: IoRing submits when its queue is full).
    ring_ = std::make_unique<offload::IoRing>(unsigned(std::min<size_t>(4 * n, 256)));
}

WorkingCopy::~WorkingCopy() = default;

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

Buffer WorkingCopy::take_record(int unit, bool zeroed) {
    // Records written behind go back to the pool as soon as they are on disk, so that a new one
    // takes their memory rather than more.
    while (const auto c = ring_->peek()) done(*c);
    // Of one size for every block, and for the two ends when they are alike (an embedding and
    // an untied head), so that a buffer the pool keeps serves any unit of its kind: the count of
    // resident_bytes. (A final norm's record beside a tied embedding's stays its own size.)
    const size_t u = size_t(unit), n = unit_bytes_.size();
    int64_t bytes = unit_bytes_[u];
    if (u == 0 || u + 1 == n) {
        const int64_t other = unit_bytes_[u == 0 ? n - 1 : 0];
        if (other >= bytes && 4 * other <= 5 * bytes) bytes = other;
    } else if (n > 2) {
        bytes = *std::max_element(unit_bytes_.begin() + 1, unit_bytes_.end() - 1);
    }
    const int64_t floats = std::max(bytes / int64_t(sizeof(float)), kMinRecordFloats);
    return zeroed ? pool_.take_zeroed(floats) : pool_.take(floats);
}

void WorkingCopy::start(int unit, int kind, Buffer& buf) {
    // One transfer per record at a time, in the order they were asked for.
    wait(unit, kind);
    wait(unit, kind ^ kWrite);
    const int stream = kind & kGrads ? 1 : 0;
    const int64_t bytes = unit_bytes_[size_t(unit)];
    const int64_t at = files_->offset(stream, unit);
    // In pieces: one request moves at most 2 GiB less a page (Linux's MAX_RW_COUNT).
    for (int64_t piece = 0; piece * kPieceBytes < bytes; ++piece) {
        const int64_t from = piece * kPieceBytes, n = std::min(kPieceBytes, bytes - from);
        const uint64_t tag = uint64_t(piece) << 40 | uint64_t(unit) << 2 | uint64_t(kind);
        std::byte* p = bytes_of(buf) + from;
        if (kind & kWrite)
            ring_->write(files_->direct_fd(stream), p, size_t(n), at + from, tag);
        else
            ring_->read(files_->direct_fd(stream), p, size_t(n), at + from, tag);
        busy_[size_t(4 * unit + kind)]++;
    }
    ring_->submit();
}

void WorkingCopy::wait(int unit, int kind) {
    while (busy_[size_t(4 * unit + kind)] > 0) reap();
}

void WorkingCopy::reap() {
    const auto t0 = Clock::now();
    const offload::IoRing::Completion c = ring_->wait();
    io_.io_wait_s += std::chrono::duration<double>(Clock::now() - t0).count();
    done(c);
}

void WorkingCopy::done(const offload::IoRing::Completion& c) {
    const int unit = int((c.tag >> 2) & 0xffffffffu), kind = int(c.tag & 3);
    const int64_t from = int64_t(c.tag >> 40) * kPieceBytes;
    const int64_t bytes = std::min(kPieceBytes, unit_bytes_[size_t(unit)] - from);
    const int left = --busy_[size_t(4 * unit + kind)];
    if (c.result != bytes) {
        while (ring_->in_flight() > 0) ring_->wait();  // the buffers outlive every transfer
        fail(
            "offload: {} unit {}'s {} in {} at byte {}: {}; the offloaded parameters are "
            "incomplete and will not be used again: resume from the last checkpoint",
            kind & kWrite ? "writing" : "reading", unit, kind & kGrads ? "gradients" : "weights",
            files_->path(kind & kGrads ? 1 : 0).string(),
            files_->offset(kind & kGrads ? 1 : 0, unit) + from,
            c.result < 0 ? std::strerror(int(-c.result))
                         : fmt::format("short transfer of {} bytes of {} (the disk is full?)",
                                       c.result, bytes));
    }
    (kind & kWrite ? io_.written_bytes : io_.read_bytes) += bytes;
    if (kind & kWrite && left == 0)
        pool_.give(std::move((kind & kGrads ? gout_ : wout_)[size_t(unit)]));
}

void WorkingCopy::read_ahead(int unit) {
    if (!files_ || unit < 1 || unit >= int(temp_.size())) return;
    if (temp_[size_t(unit)].size() > 0 || ahead_[size_t(unit)].size() > 0) return;
    ahead_[size_t(unit)] = take_record(unit, false);
    start(unit, kRead | kWeights, ahead_[size_t(unit)]);
}

void WorkingCopy::drop_ahead() {
    for (int u = 0; u < int(ahead_.size()); ++u)
        if (ahead_[size_t(u)].size() > 0) {
            wait(u, kRead | kWeights);
            pool_.give(std::move(ahead_[size_t(u)]));
        }
}

std::byte* WorkingCopy::record(int unit, bool grads, bool overwrite) {
    if (!files_) return bytes_of(grads ? gstore_ : store_) + unit_at_[size_t(unit)];
    if (cursor_ != unit) {
        leave_cursor();
        cursor_ = unit;
    }
    Buffer& b = grads ? cur_g_ : cur_w_;
    bool& loaded = grads ? cursor_g_ : cursor_w_;
    if (loaded) {
        if (!grads && !overwrite) merge_weights();
        return bytes_of(b);
    }
    const int kind = kRead | (grads ? kGrads : kWeights);
    if (grads && gahead_unit_ == unit) {
        wait(unit, kind);
        b = std::move(gahead_);
        gahead_unit_ = -1;
    } else {
        // A gradient record not written this step holds zeros; weights about to be overwritten
        // need no read (the update writes every element of its units).
        const bool zeros = grads && !has_grads_[size_t(unit)];
        const bool unread = zeros || (!grads && overwrite);
        // Its write behind first: that buffer back in the pool serves this one.
        if (!zeros) wait(unit, kWrite | (grads ? kGrads : kWeights));
        b = take_record(unit, zeros);
        if (!unread) {
            start(unit, kind, b);
            wait(unit, kind);
        }
        if (!grads && overwrite) {
            cur_w_fresh_ = true;
            written_.clear();
        }
    }
    loaded = true;
    // The passes that read the gradients (the norm, the update) go in buffer order.
    if (grads) grads_ahead(unit + 1);
    return bytes_of(b);
}

void WorkingCopy::grads_ahead(int unit) {
    if (unit >= int(unit_bytes_.size()) || !has_grads_[size_t(unit)] || gahead_unit_ == unit)
        return;
    drop_grads_ahead();
    gahead_ = take_record(unit, false);
    start(unit, kRead | kGrads, gahead_);
    gahead_unit_ = unit;
}

void WorkingCopy::drop_grads_ahead() {
    if (gahead_unit_ < 0) return;
    wait(gahead_unit_, kRead | kGrads);
    pool_.give(std::move(gahead_));
    gahead_unit_ = -1;
}

void WorkingCopy::merge_weights() {
    if (!cur_w_fresh_) return;
    cur_w_fresh_ = false;
    const int u = cursor_;
    std::sort(written_.begin(), written_.end());
    int64_t covered = 0, end = 0;
    for (const auto& [lo, hi] : written_) {
        covered += std::max<int64_t>(0, hi - std::max(lo, end));
        end = std::max(end, hi);
    }
    if (covered < unit_numel_[size_t(u)]) {
        // Written in part (a rank's slices of the unit): the rest is the file's.
        Buffer old = take_record(u, false);
        start(u, kRead | kWeights, old);
        wait(u, kRead | kWeights);
        for (const auto& [lo, hi] : written_)
            for_pieces(lo, hi, [&](size_t i, int64_t a, int64_t z) {
                const int64_t w = half_[i] ? 2 : 4;
                const int64_t at = tensor_at_[i] + (a - layout_.tensors[i].offset) * w;
                std::memcpy(bytes_of(old) + at, bytes_of(cur_w_) + at, size_t((z - a) * w));
            });
        pool_.give(std::move(cur_w_));
        cur_w_ = std::move(old);
    }
    written_.clear();
}

void WorkingCopy::leave_cursor() {
    if (!files_ || cursor_ < 0) return;
    const int u = cursor_;
    if (dirty_) {
        merge_weights();
        // The write before this one is done first: the cursor's unit and one written behind.
        if (behind_ >= 0) wait(behind_, kWrite | kWeights);
        wait(u, kWrite | kWeights);
        wout_[size_t(u)] = std::move(cur_w_);
        start(u, kWrite | kWeights, wout_[size_t(u)]);
        behind_ = u;
    } else {
        pool_.give(std::move(cur_w_));
    }
    pool_.give(std::move(cur_g_));
    cursor_ = -1;
    cursor_w_ = cursor_g_ = dirty_ = cur_w_fresh_ = false;
}

void WorkingCopy::flush() {
    if (!files_) return;
    leave_cursor();
    if (behind_ >= 0) wait(behind_, kWrite | kWeights);
    behind_ = -1;
}

int64_t WorkingCopy::unit_end(int64_t at) const {
    const auto& us = layout_.units;
    auto it = std::partition_point(us.begin(), us.end(),
                                   [&](const model::Unit& u) { return u.offset + u.size <= at; });
    return it == us.end() ? layout_.total : it->offset + it->size;
}

offload::PassStats WorkingCopy::take_io_stats() {
    return std::exchange(io_, {});
}

void WorkingCopy::read(bool grads, int64_t begin, int64_t n, float* out) {
    std::fill_n(out, n, 0.0f);  // alignment padding
    for_pieces(begin, begin + n, [&](size_t i, int64_t lo, int64_t hi) {
        const model::ParamSpec& t = layout_.tensors[i];
        const std::byte* r = record(t.unit, grads) + tensor_at_[i];
        const int64_t k = lo - t.offset;
        if (half_[i])
            kernels::convert_bf16_to_fp32(out + (lo - begin),
                                          reinterpret_cast<const uint16_t*>(r) + k, hi - lo);
        else
            std::copy_n(reinterpret_cast<const float*>(r) + k, hi - lo, out + (lo - begin));
    });
}

void WorkingCopy::read_params(int64_t begin, int64_t n, float* out) {
    read(false, begin, n, out);
}

void WorkingCopy::read_grads(int64_t begin, int64_t n, float* out) {
    read(true, begin, n, out);
}

void WorkingCopy::write_params(int64_t begin, int64_t n, const float* in) {
    if (files_) drop_ahead();  // read before these weights changed
    for_pieces(begin, begin + n, [&](size_t i, int64_t lo, int64_t hi) {
        const model::ParamSpec& t = layout_.tensors[i];
        std::byte* r = record(t.unit, false, /*overwrite=*/true) + tensor_at_[i];
        if (files_) dirty_ = true;  // before the cursor moves on: it writes the unit back
        if (cur_w_fresh_) written_.emplace_back(lo, hi);
        const int64_t k = lo - t.offset;
        if (half_[i])
            kernels::convert_fp32_to_bf16(reinterpret_cast<uint16_t*>(r) + k, in + (lo - begin), 1,
                                          hi - lo, hi - lo);
        else
            std::copy_n(in + (lo - begin), hi - lo, reinterpret_cast<float*>(r) + k);
    });
}

double WorkingCopy::grad_sum_squares(int64_t begin, int64_t n) {
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

float* WorkingCopy::widen(int unit, const std::byte* rec) {
    const model::Unit& u = layout_.units[size_t(unit)];
    Buffer b = pool_.take_zeroed(u.size);
    for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i) {
        const model::ParamSpec& t = layout_.tensors[size_t(i)];
        float* dst = b.data() + (t.offset - u.offset);
        const std::byte* src = rec + tensor_at_[size_t(i)];
        if (half_[size_t(i)])
            kernels::convert_bf16_to_fp32(dst, reinterpret_cast<const uint16_t*>(src),
                                          t.numel_stored);
        else
            std::copy_n(reinterpret_cast<const float*>(src), t.numel_stored, dst);
    }
    temp_[size_t(unit)] = std::move(b);
    return temp_[size_t(unit)].data();
}

void WorkingCopy::set_forward(bool forward) {
    forward_ = forward;
    if (!forward) settle_grads();
}

void WorkingCopy::await_update(int unit) {
    const model::Unit& u = layout_.units[size_t(unit)];
    blocked_s_ += fence_.wait(u.offset + u.size);
}

void WorkingCopy::claim_grads(int unit) {
    if (!owed_) return;
    await_update(unit);
    if (!zero_owed_[size_t(unit)]) return;
    std::fill_n(record(unit, true), unit_bytes_[size_t(unit)], std::byte{0});
    zero_owed_[size_t(unit)] = 0;
    --owed_;
}

void WorkingCopy::settle_grads() {
    // Before the backward (and before anything reads the gradients) every unit's zeroing is
    // done: the pass is over by then.
    for (int u = 0; owed_ > 0 && u < int(zero_owed_.size()); ++u) claim_grads(u);
}

float* WorkingCopy::params(int unit) {
    Buffer& temp = temp_[size_t(unit)];
    if (!files_) {
        await_update(unit);
        if (in_place_[size_t(unit)]) return reinterpret_cast<float*>(record(unit, false));
        if (temp.size() > 0) return temp.data();
        return widen(unit, record(unit, false));
    }
    if (temp.size() > 0) return temp.data();
    flush();  // the optimizer's last record, before it is read
    Buffer& rec = ahead_[size_t(unit)];
    if (rec.size() == 0) {
        wait(unit, kWrite | kWeights);
        rec = take_record(unit, false);
        start(unit, kRead | kWeights, rec);
    }
    wait(unit, kRead | kWeights);
    if (in_place_[size_t(unit)]) {
        temp = std::move(rec);  // the record is the unit's fp32 weights
    } else {
        widen(unit, bytes_of(rec));
        pool_.give(std::move(rec));
    }
    read_ahead(forward_ ? unit + 1 : unit - 1);
    return temp.data();
}

float* WorkingCopy::grads(int unit) {
    if (!files_) claim_grads(unit);
    if (!files_ && in_place_[size_t(unit)]) return reinterpret_cast<float*>(record(unit, true));
    Buffer& g = gtemp_[size_t(unit)];
    if (g.size() == 0)
        g = files_ && in_place_[size_t(unit)] ? take_record(unit, true)
                                              : pool_.take_zeroed(layout_.units[size_t(unit)].size);
    return g.data();
}

void WorkingCopy::release(int unit) {
    pool_.give(std::move(temp_[size_t(unit)]));
}

void WorkingCopy::write_grads(int unit, Buffer rec) {
    if (gahead_unit_ == unit) drop_grads_ahead();
    wait(unit, kWrite | kGrads);
    gout_[size_t(unit)] = std::move(rec);
    start(unit, kWrite | kGrads, gout_[size_t(unit)]);
    has_grads_[size_t(unit)] = 1;
}

void WorkingCopy::grads_ready(int unit, const Reduce& reduce, bool last_micro_batch) {
    const model::Unit& u = layout_.units[size_t(unit)];
    Buffer& g = gtemp_[size_t(unit)];
    if (in_place_[size_t(unit)]) {
        // The gradient accumulates over the step's micro-batches where the model wrote it, and
        // is whole (to be reduced, and in files written) after the last.
        if (!last_micro_batch) return;
        if (!files_) {
            if (reduce) reduce(reinterpret_cast<float*>(record(unit, true)), u.size);
            return;
        }
        if (g.size() == 0) return;
        if (reduce) reduce(g.data(), u.size);
        return write_grads(unit, std::move(g));
    }
    if (g.size() == 0) return;  // no gradient this micro-batch
    if (reduce) reduce(g.data(), u.size);
    // In files: the stored gradient (zeros before the step's first micro-batch) in a record of
    // its own, written behind.
    Buffer rec;
    std::byte* stored = nullptr;
    if (files_) {
        const bool zeros = !has_grads_[size_t(unit)];
        if (!zeros) wait(unit, kWrite | kGrads);
        rec = take_record(unit, zeros);
        if (!zeros) {
            start(unit, kRead | kGrads, rec);
            wait(unit, kRead | kGrads);
        }
        stored = bytes_of(rec);
    } else {
        claim_grads(unit);
        stored = record(unit, true);
    }
    for (int i = u.first_tensor; i < u.first_tensor + u.tensors; ++i) {
        const model::ParamSpec& t = layout_.tensors[size_t(i)];
        float* src = g.data() + (t.offset - u.offset);
        std::byte* dst = stored + tensor_at_[size_t(i)];
        if (half_[size_t(i)]) {
            // The micro-batch's fp32 sum, plus what earlier ones left, rounded once.
            uint16_t* h = reinterpret_cast<uint16_t*>(dst);
            kernels::add_bf16_to_fp32(src, h, t.numel_stored);
            kernels::convert_fp32_to_bf16(h, src, 1, t.numel_stored, t.numel_stored);
        } else {
            kernels::add_inplace(reinterpret_cast<float*>(dst), src, t.numel_stored);
        }
    }
    pool_.give(std::move(g));
    if (files_) write_grads(unit, std::move(rec));
}

void WorkingCopy::zero_grads() {
    if (!files_) {
        if (!fence_.is_open()) return gstore_.zero();
        // The pass still reads them: each unit is zeroed once the pass is past it.
        std::fill(zero_owed_.begin(), zero_owed_.end(), uint8_t(1));
        owed_ = int64_t(zero_owed_.size());
        return;
    }
    flush();  // the cursor's gradients are the last step's
    drop_grads_ahead();
    std::fill(has_grads_.begin(), has_grads_.end(), uint8_t(0));
}

}  // namespace weft::parallel
