#include "weft/kernels/profile.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

namespace weft::kernels {

namespace detail {
std::atomic<bool> g_profile_enabled{false};
}  // namespace detail

namespace {

struct Registry {
    std::mutex mutex;
    std::vector<ProfileSlot*> slots;
    std::atomic<std::thread::id> owner{};  // the thread that called profile_start
};

Registry& registry() {
    static Registry r;
    return r;
}

// The names of the timed calls open on this thread, outermost first. Deeper nesting than this
// is not timed (nothing in the engine nests more than three deep).
constexpr int kMaxDepth = 16;
thread_local const char* t_open[kMaxDepth];
thread_local int t_depth = 0;

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

namespace detail {

int64_t profile_begin(const ProfileSlot& slot) {
    if (std::this_thread::get_id() != registry().owner.load(std::memory_order_relaxed) ||
        omp_in_parallel() || t_depth == kMaxDepth)
        return -1;
    // A wrapper and the entry it calls may share a name (attention_forward_qkv calls
    // attention_forward): the outer call already counts the time.
    if (t_depth > 0 && std::strcmp(t_open[t_depth - 1], slot.name) == 0) return -1;
    t_open[t_depth++] = slot.name;
    return now_ns();
}

void profile_end(ProfileSlot& slot, int64_t start) {
    const int64_t dt = now_ns() - start;
    --t_depth;
    (t_depth == 0 ? slot.ns : slot.nested_ns).fetch_add(dt, std::memory_order_relaxed);
    slot.calls.fetch_add(1, std::memory_order_relaxed);
    if (!slot.registered.exchange(true)) {
        Registry& r = registry();
        std::lock_guard lock(r.mutex);
        r.slots.push_back(&slot);
    }
}

}  // namespace detail

void profile_start() {
    Registry& r = registry();
    {
        std::lock_guard lock(r.mutex);
        for (ProfileSlot* s : r.slots) s->ns = s->nested_ns = s->calls = 0;
        r.owner.store(std::this_thread::get_id(), std::memory_order_relaxed);
    }
    t_depth = 0;
    detail::g_profile_enabled.store(true, std::memory_order_release);
}

std::vector<ProfileEntry> profile_stop() {
    detail::g_profile_enabled.store(false, std::memory_order_release);
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.owner.store(std::thread::id(), std::memory_order_relaxed);
    std::vector<ProfileEntry> out;
    for (const ProfileSlot* s : r.slots) {
        if (s->calls == 0) continue;
        // Two hooks may share a name (attention_forward and attention_forward_qkv's callee).
        auto it = std::find_if(out.begin(), out.end(),
                               [&](const ProfileEntry& e) { return e.name == s->name; });
        if (it == out.end()) it = out.insert(out.end(), ProfileEntry{s->name, 0, 0, 0});
        it->seconds += double(s->ns) * 1e-9;
        it->nested_seconds += double(s->nested_ns) * 1e-9;
        it->calls += s->calls;
    }
    std::sort(out.begin(), out.end(), [](const ProfileEntry& a, const ProfileEntry& b) {
        return a.seconds + a.nested_seconds > b.seconds + b.nested_seconds;
    });
    return out;
}

}  // namespace weft::kernels
