#include "weft/offload/streamed_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
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

struct Group {
    int slice;
    int64_t a, b;
};

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

// At least 1 MiB, so that Buffer starts it on a page as direct I/O needs.
int64_t pool_floats(int64_t group_floats, int streams, int slots) {
    return std::max<int64_t>(group_of(group_floats) * streams * std::max(slots, 3), int64_t(1)
                                                                                        << 18);
}

}  // namespace

int64_t pool_bytes(int64_t group_floats, int streams, int slots) {
    return pool_floats(group_floats, streams, slots) * int64_t(sizeof(float));
}

StreamedState::StreamedState(StateFiles& files, int64_t group_floats, int slots)
    : files_(files),
      group_(group_of(group_floats)),
      slots_(std::max(slots, 3)),
      pool_(pool_floats(group_floats, files.streams(), slots)),
      ring_(unsigned(2 * slots_ * files.streams())) {}

PassStats StreamedState::run(bool read, bool write, const Work& work) {
    const auto t0 = Clock::now();
    std::vector<Group> groups;
    for (int s = 0; s < files_.slices(); ++s)
        for (int64_t a = 0; a < files_.slice_floats(s); a += group_)
            groups.push_back({s, a, std::min(files_.slice_floats(s), a + group_)});
    const int S = slots_, streams = files_.streams();
    auto buffer = [&](int slot, int stream) {
        return pool_.data() + (int64_t(slot) * streams + stream) * group_;
    };
    auto bytes_of = [](const Group& g) {
        return size_t((g.b - g.a + kBlockFloats - 1) / kBlockFloats * kBlockFloats) * sizeof(float);
    };
    // Transfers in flight per slot, and the group each slot holds. Tag: slot x 2 + write.
    std::vector<int> reading(size_t(S), 0), writing(size_t(S), 0);
    std::vector<int64_t> holds(size_t(S), -1);
    PassStats st;
    std::string error;
    auto reap = [&] {
        const auto w0 = Clock::now();
        const IoRing::Completion c = ring_.wait();
        st.io_wait_s += since(w0);
        const int slot = int(c.tag >> 1);
        const bool wrote = c.tag & 1;
        (wrote ? writing : reading)[size_t(slot)]--;
        const Group& g = groups[size_t(holds[size_t(slot)])];
        if (c.result == int64_t(bytes_of(g))) {
            (wrote ? st.written_bytes : st.read_bytes) += c.result;
        } else if (error.empty()) {
            error = fmt::format("offload: {} group of slice {} at float {}: {}",
                                wrote ? "writing" : "reading", g.slice, g.a,
                                c.result < 0 ? std::strerror(int(-c.result))
                                             : fmt::format("short transfer of {} bytes of {} "
                                                           "(the disk is full?)",
                                                           c.result, bytes_of(g)));
        }
    };
    auto wait_until = [&](auto done) {
        while (!done()) reap();
    };
    // Puts group k in its slot (once the slot's last write is done) and starts reading it.
    int64_t issued = 0;
    auto issue = [&](int64_t k) {
        const int slot = int(k % S);
        wait_until([&] { return writing[size_t(slot)] == 0; });
        holds[size_t(slot)] = k;
        if (!read) return;
        const Group& g = groups[size_t(k)];
        for (int s = 0; s < streams; ++s)
            ring_.read(files_.direct_fd(s), buffer(slot, s), bytes_of(g),
                       files_.offset(g.slice, g.a), uint64_t(slot) << 1);
        reading[size_t(slot)] += streams;
    };
    const int64_t n = int64_t(groups.size()), ahead = S - 2;
    try {
        for (int64_t k = 0; k < n && error.empty(); ++k) {
            for (; issued < n && issued <= k + ahead; ++issued) issue(issued);
            ring_.submit();
            const int slot = int(k % S);
            wait_until([&] { return reading[size_t(slot)] == 0; });
            if (!error.empty()) break;
            const Group& g = groups[size_t(k)];
            float* state[8];
            WEFT_CHECK(streams <= 8, "internal: {} offloaded state streams, at most 8", streams);
            for (int s = 0; s < streams; ++s) state[s] = buffer(slot, s);
            const auto w0 = Clock::now();
            work(g.slice, g.a, g.b, std::span<float* const>(state, size_t(streams)));
            st.work_s += since(w0);
            if (!write) continue;
            for (int s = 0; s < streams; ++s)
                ring_.write(files_.direct_fd(s), buffer(slot, s), bytes_of(g),
                            files_.offset(g.slice, g.a), (uint64_t(slot) << 1) | 1);
            writing[size_t(slot)] += streams;
            ring_.submit();
        }
        while (ring_.in_flight() > 0) reap();
    } catch (...) {
        while (ring_.in_flight() > 0) ring_.wait();  // the pool outlives every transfer
        throw;
    }
    if (!error.empty()) {
        // Name the files: the error above knows the slice, not the stream.
        std::string files;
        for (int s = 0; s < streams; ++s) files += (s ? ", " : "") + files_.path(s).string();
        fail(
            "{} (files {}); the offloaded state is incomplete and will not be used again: "
            "resume from the last checkpoint",
            error, files);
    }
    st.total_s = since(t0);
    return st;
}

}  // namespace weft::offload
