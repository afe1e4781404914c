#pragma once
// A per-kernel time breakdown of a training step, for `weft bench train --profile`.
//
// Each kernel entry starts with WEFT_PROFILE("name"). Disabled (the default), that costs one
// load and one branch on a global flag. Enabled, it times the call with steady_clock and adds the
// time to a slot named by the string literal. Only calls on the thread that enabled profiling
// count (a communication thread that adds a gradient bucket must not inflate the step's sums),
// only the outermost timed call on that thread counts towards its slot's `ns` (the classifier's
// GEMMs are the classifier's time, so the slots of one step add up to at most the step), and
// calls made inside an OpenMP parallel region are not timed at all: the kernels open their own
// teams, and a kernel called from inside someone else's team runs once per thread.
// A call nested inside another timed call is added to its slot's `nested_ns` instead: the bf16
// conversions inside the matrix products are reported that way, as part of their caller.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace weft::kernels {

// Where one name's time accumulates. Constant-initialised (no guard on the hot path) and
// registered on first use.
struct ProfileSlot {
    const char* name;
    std::atomic<int64_t> ns{0}, nested_ns{0}, calls{0};
    std::atomic<bool> registered{false};
    constexpr explicit ProfileSlot(const char* n) : name(n) {}
};

struct ProfileEntry {
    std::string name;
    double seconds = 0;         // outermost calls
    double nested_seconds = 0;  // calls inside another timed call
    int64_t calls = 0;
};

namespace detail {
extern std::atomic<bool> g_profile_enabled;
// The steady_clock reading (ns) at which a timed call started, or -1 when this call is not timed
// (another thread's, or inside an OpenMP parallel region).
int64_t profile_begin(const ProfileSlot& slot);
void profile_end(ProfileSlot& slot, int64_t start);
}  // namespace detail

class ProfileScope {
  public:
    explicit ProfileScope(ProfileSlot& slot) : slot_(slot) {
        if (detail::g_profile_enabled.load(std::memory_order_relaxed)) [[unlikely]]
            start_ = detail::profile_begin(slot);
    }
    ~ProfileScope() {
        if (start_ >= 0) [[unlikely]]
            detail::profile_end(slot_, start_);
    }
    ProfileScope(const ProfileScope&) = delete;
    ProfileScope& operator=(const ProfileScope&) = delete;

  private:
    ProfileSlot& slot_;
    int64_t start_ = -1;
};

// Starts timing on the calling thread (and only it), clearing every slot.
void profile_start();
// Stops timing and returns every slot that was used since profile_start, busiest first.
std::vector<ProfileEntry> profile_stop();

}  // namespace weft::kernels

#define WEFT_PROFILE_CONCAT2(a, b) a##b
#define WEFT_PROFILE_CONCAT(a, b) WEFT_PROFILE_CONCAT2(a, b)
// Times the rest of the enclosing scope under `name` (a string literal).
#define WEFT_PROFILE(name)                                                                \
    static constinit ::weft::kernels::ProfileSlot WEFT_PROFILE_CONCAT(weft_profile_slot_, \
                                                                      __LINE__){name};    \
    ::weft::kernels::ProfileScope WEFT_PROFILE_CONCAT(                                    \
        weft_profile_scope_, __LINE__)(WEFT_PROFILE_CONCAT(weft_profile_slot_, __LINE__))
