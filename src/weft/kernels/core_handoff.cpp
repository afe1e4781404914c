#include "weft/kernels/core_handoff.hpp"

#include <fmt/ranges.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "weft/core/error.hpp"

namespace weft::kernels {

namespace {

// The CPUs are checked against the process's own before the threads start: a thread cannot
// throw, and one left unpinned only measures less well.
void pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace

std::vector<int> allowed_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    WEFT_CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity failed");
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}

double core_handoff_ns(int cpu_a, int cpu_b, int passes) {
    WEFT_CHECK(passes > 0, "core handoff: passes={}, expected > 0", passes);
    const std::vector<int> cpus = allowed_cpus();
    for (int cpu : {cpu_a, cpu_b})
        WEFT_CHECK(std::find(cpus.begin(), cpus.end(), cpu) != cpus.end(),
                   "core handoff: CPU {} is not one this process may run on ({})", cpu,
                   fmt::join(cpus, ","));
    WEFT_CHECK(cpu_a != cpu_b, "core handoff: CPU {} twice, expected two different CPUs", cpu_a);
    // Its own line, so that nothing else shares it.
    struct alignas(64) Line {
        std::atomic<int> v{0};
    };
    auto line = std::make_unique<Line>();
    std::atomic<int>& v = line->v;
    // The partner answers each odd value with the next even one; the caller's thread is pinned in
    // a thread of its own, so that the caller's affinity is left as it was.
    std::thread partner([&] {
        pin_to(cpu_b);
        for (int i = 0; i < passes; ++i) {
            while (v.load(std::memory_order_acquire) != 2 * i + 1) {
            }
            v.store(2 * i + 2, std::memory_order_release);
        }
    });
    double ns = 0;
    std::thread caller([&] {
        pin_to(cpu_a);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < passes; ++i) {
            v.store(2 * i + 1, std::memory_order_release);
            while (v.load(std::memory_order_acquire) != 2 * i + 2) {
            }
        }
        ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                 .count() /
             (2.0 * passes);
    });
    caller.join();
    partner.join();
    return ns;
}

}  // namespace weft::kernels
