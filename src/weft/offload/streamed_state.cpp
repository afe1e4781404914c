#include "weft/offload/streamed_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::offload {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

PassStats& PassStats::operator+=(const PassStats& o) {
    read_bytes += o.read_bytes, written_bytes += o.written_bytes;
    io_wait_s += o.io_wait_s, work_s += o.work_s, total_s += o.total_s;
    return *this;
}

namespace {

int64_t group_of(int64_t group_floats) {
    return (std::max<int64_t>(group_floats, 1) + kBlockFloats - 1) / kBlockFloats * kBlockFloats;
}

// Bytes of a group's array in its slot: its offset modulo 16 in the optimizer's layout kept,
// rounded up to whole direct-I/O blocks.
int64_t slot_bytes_of(int64_t lead, int64_t bytes) {
    return bytes == 0 ? 0 : round_up(lead + bytes, kBlockBytes);
}

// At least 1 MiB, so that Buffer starts it on a page as direct I/O needs.
int64_t pool_of(int64_t slot_bytes, int slots) {
    return std::max<int64_t>(slot_bytes * std::max(slots, 3), int64_t(1) << 20);
}

constexpr int64_t kLeadAlign = 16;

}  // namespace

StateShape StateShape::fp32(std::vector<int64_t> slice_size, int streams) {
    return {std::move(slice_size), streams, [](int, int, int64_t a) { return 4 * a; },
            [](int, int64_t a) { return a; }};
}

int64_t pool_bytes(int64_t group_floats, std::span<const double> bytes_per_element, int slots) {
    const int64_t g = group_of(group_floats);
    int64_t slot = 0;
    for (double w : bytes_per_element) {
        const bool whole = w == double(int64_t(w));
        // A fractional stream (blocks' absmaxes) may start anywhere in a page and hold a block
        // more than its share at each tensor end: a page over.
        slot +=
            round_up(int64_t(std::ceil(double(g) * w)), kBlockBytes) + (whole ? 0 : kBlockBytes);
    }
    return pool_of(slot, slots);
}

StreamedState::StreamedState(const std::filesystem::path& dir, int rank,
                             std::vector<std::string> names, StateShape shape, int64_t group_floats,
                             int slots)
    : shape_(std::move(shape)),
      group_(group_of(group_floats)),
      slots_(std::max(slots, 3)),
      ring_(unsigned(2 * std::max(slots, 3) * std::max<size_t>(names.size(), 1))) {
    const int S = shape_.streams;
    WEFT_CHECK(S == int(names.size()) && S > 0 && S <= 8,
               "internal: {} offloaded state streams named {}, expected 1 to 8", S, names.size());
    // Groups of at most group_ elements, cut where the shape allows (8-bit blocks: a block more
    // when a group would hold none).
    for (int sl = 0; sl < int(shape_.slice_size.size()); ++sl) {
        const int64_t n = shape_.slice_size[size_t(sl)];
        for (int64_t a = 0, b; a < n; a = b) {
            b = shape_.align_down(sl, std::min(n, a + group_));
            for (int64_t more = 2 * group_; b <= a; more *= 2)
                b = more >= n - a ? n : shape_.align_down(sl, a + more);
            groups_.push_back({sl, a, b});
            max_group_ = std::max(max_group_, b - a);
        }
    }
    std::vector<std::vector<int64_t>> records(static_cast<size_t>(S));
    std::vector<int64_t> most(static_cast<size_t>(S), 0);
    for (int g = 0; g < int(groups_.size()); ++g)
        for (int k = 0; k < S; ++k) {
            const Group& gr = groups_[size_t(g)];
            const int64_t bytes =
                shape_.offset(gr.slice, k, gr.b) - shape_.offset(gr.slice, k, gr.a);
            records[size_t(k)].push_back(slot_bytes_of(lead(g, k), bytes));
            most[size_t(k)] = std::max(most[size_t(k)], records[size_t(k)].back());
        }
    for (int k = 0; k < S; ++k) {
        slot_at_.push_back(slot_bytes_);
        slot_bytes_ += most[size_t(k)];
    }
    files_ = std::make_unique<StateFiles>(dir, rank, std::move(names), std::move(records));
    pool_ = Buffer(pool_of(slot_bytes_, slots_) / int64_t(sizeof(float)));
}

int64_t StreamedState::lead(int g, int s) const {
    const Group& gr = groups_[size_t(g)];
    return shape_.offset(gr.slice, s, gr.a) % kLeadAlign;
}

std::byte* StreamedState::buffer(int slot, int stream) {
    return reinterpret_cast<std::byte*>(pool_.data()) + int64_t(slot) * slot_bytes_ +
           slot_at_[size_t(stream)];
}

std::pair<int, int> StreamedState::groups_in(int slice, int64_t a, int64_t b) const {
    auto before = [](const Group& g, std::pair<int, int64_t> x) {
        return g.slice < x.first || (g.slice == x.first && g.b <= x.second);
    };
    const auto first =
        std::lower_bound(groups_.begin(), groups_.end(), std::pair{slice, a}, before);
    auto last = first;
    while (last != groups_.end() && last->slice == slice && last->a < b) ++last;
    return {int(first - groups_.begin()), int(last - groups_.begin())};
}

std::vector<std::byte*> StreamedState::get(int g, uint32_t streams) {
    if (cached_ != g) cached_mask_ = 0;
    std::vector<std::byte*> out;
    for (int k = 0; k < shape_.streams; ++k) {
        const uint32_t bit = 1u << k;
        if ((streams & bit) && !(cached_mask_ & bit) && record_bytes(g, k) > 0)
            files_->read(k, g, 0, record_bytes(g, k), buffer(0, k));
        out.push_back(buffer(0, k) + lead(g, k));
    }
    cached_ = g;
    cached_mask_ |= streams;
    return out;
}

void StreamedState::put(int g, uint32_t streams) {
    WEFT_CHECK(cached_ == g && (cached_mask_ & streams) == streams,
               "internal: putting back offload group {}, not the one got ({})", g, cached_);
    for (int k = 0; k < shape_.streams; ++k)
        if ((streams & (1u << k)) && record_bytes(g, k) > 0)
            files_->write(k, g, 0, record_bytes(g, k), buffer(0, k));
}

PassStats StreamedState::run(bool read, bool write, const Work& work) {
    const auto t0 = Clock::now();
    cached_ = -1, cached_mask_ = 0;  // slot 0 is the pass's
    const int S = slots_, streams = shape_.streams;
    // Transfers in flight per slot, and the group each slot holds. Tag: slot x 2 + write.
    std::vector<int> reading(size_t(S), 0), writing(size_t(S), 0);
    std::vector<int64_t> holds(size_t(S), -1);
    PassStats st;
    std::string error;
    auto reap = [&] {
        const auto w0 = Clock::now();
        const IoRing::Completion c = ring_.wait();
        st.io_wait_s += since(w0);
        const int slot = int(c.tag >> 2) & 0xff, stream = int(c.tag >> 10);
        const bool wrote = c.tag & 1;
        (wrote ? writing : reading)[size_t(slot)]--;
        const int g = int(holds[size_t(slot)]);
        const Group& gr = groups_[size_t(g)];
        const int64_t bytes = record_bytes(g, stream);
        if (c.result == bytes) {
            (wrote ? st.written_bytes : st.read_bytes) += c.result;
        } else if (error.empty()) {
            error = fmt::format(
                "offload: {} group of slice {} at element {} in {}: {}",
                wrote ? "writing" : "reading", gr.slice, gr.a, files_->path(stream).string(),
                c.result < 0 ? std::strerror(int(-c.result))
                             : fmt::format("short transfer of {} bytes of {} (the disk is full?)",
                                           c.result, bytes));
        }
    };
    auto wait_until = [&](auto done) {
        while (!done()) reap();
    };
    auto transfer = [&](bool out, int64_t k) {
        const int slot = int(k % S), g = int(k);
        for (int s = 0; s < streams; ++s) {
            const int64_t bytes = record_bytes(g, s);
            if (bytes == 0) continue;
            const uint64_t tag = uint64_t(s) << 10 | uint64_t(slot) << 2 | (out ? 1 : 0);
            if (out)
                ring_.write(files_->direct_fd(s), buffer(slot, s), size_t(bytes),
                            files_->offset(s, g), tag);
            else
                ring_.read(files_->direct_fd(s), buffer(slot, s), size_t(bytes),
                           files_->offset(s, g), tag);
            (out ? writing : reading)[size_t(slot)]++;
        }
    };
    // Puts group k in its slot (once the slot's last write is done) and starts reading it.
    int64_t issued = 0;
    auto issue = [&](int64_t k) {
        const int slot = int(k % S);
        wait_until([&] { return writing[size_t(slot)] == 0; });
        holds[size_t(slot)] = k;
        if (read) transfer(false, k);
    };
    const int64_t n = int64_t(groups_.size()), ahead = S - 2;
    try {
        for (int64_t k = 0; k < n && error.empty(); ++k) {
            for (; issued < n && issued <= k + ahead; ++issued) issue(issued);
            ring_.submit();
            const int slot = int(k % S);
            wait_until([&] { return reading[size_t(slot)] == 0; });
            if (!error.empty()) break;
            const Group& g = groups_[size_t(k)];
            std::byte* state[8];
            for (int s = 0; s < streams; ++s) state[s] = buffer(slot, s) + lead(int(k), s);
            const auto w0 = Clock::now();
            work(g.slice, g.a, g.b, std::span<std::byte* const>(state, size_t(streams)));
            st.work_s += since(w0);
            if (!write) continue;
            transfer(true, k);
            ring_.submit();
        }
        while (ring_.in_flight() > 0) reap();
    } catch (...) {
        while (ring_.in_flight() > 0) ring_.wait();  // the pool outlives every transfer
        throw;
    }
    if (!error.empty())
        fail(
            "{}; the offloaded state is incomplete and will not be used again: resume from the "
            "last checkpoint",
            error);
    st.total_s = since(t0);
    return st;
}

}  // namespace weft::offload
