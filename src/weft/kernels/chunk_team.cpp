#include "weft/kernels/chunk_team.hpp"

#include <immintrin.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace weft::kernels {

namespace {

// A chunk that calls team_for runs its work itself.
thread_local bool t_in_chunk = false;

// How long a team thread spins for the next product before it sleeps: longer than the gaps
// inside a decode step (a norm, attention), shorter than the one between tokens, as weft's
// GOMP_SPINCOUNT (cli/omp_spin.*).
constexpr auto kSpin = std::chrono::microseconds(30);

// One word says everything a thread needs to claim a chunk: the product (a generation), its
// chunk count and the next chunk. A claim is a compare-and-swap of the whole word, so a thread
// that looked at a finished product cannot take a chunk of the next one by mistake.
constexpr int kIndexBits = 20, kGenBits = 64 - 2 * kIndexBits;
constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;
constexpr int64_t kMaxChunks = int64_t(kIndexMask);

uint64_t ticket(uint32_t gen, int64_t chunks, int64_t next) {
    return (uint64_t(gen) << (2 * kIndexBits)) | (uint64_t(chunks) << kIndexBits) | uint64_t(next);
}

class Team {
  public:
    explicit Team(int threads) {
        for (int i = 1; i < threads; ++i) threads_.emplace_back([this] { work(); });
    }
    ~Team() {
        stop_.store(true);
        gen_.fetch_add(1);
        gen_.notify_all();
        for (std::thread& t : threads_) t.join();
    }
    int size() const { return int(threads_.size()) + 1; }

    void run(int64_t chunks, void (*fn)(void*, int64_t), void* ctx) {
        fn_.store(fn, std::memory_order_relaxed);
        ctx_.store(ctx, std::memory_order_relaxed);
        done_.store(0, std::memory_order_relaxed);
        const uint32_t gen = (gen_.load(std::memory_order_relaxed) + 1) & ((1u << kGenBits) - 1);
        ticket_.store(ticket(gen, chunks, 0), std::memory_order_release);
        gen_.store(gen);
        // Seen by a thread about to sleep, or the thread sees the new generation (both seq_cst).
        if (sleepers_.load() > 0) gen_.notify_all();
        claim(gen);
        // The others' last chunks: brief, unless the OS holds a thread back mid-chunk.
        for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins)
            if (spins < 4096)
                _mm_pause();
            else
                std::this_thread::yield();
    }

  private:
    void claim(uint32_t gen) {
        t_in_chunk = true;
        uint64_t t = ticket_.load(std::memory_order_acquire);
        for (;;) {
            const int64_t next = int64_t(t & kIndexMask);
            if ((t >> (2 * kIndexBits)) != gen || next >= int64_t((t >> kIndexBits) & kIndexMask))
                break;
            if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acquire)) continue;
            // The product cannot move on while this chunk is unfinished: fn_ and ctx_ are its.
            fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), next);
            done_.fetch_add(1, std::memory_order_release);
            t = ticket_.load(std::memory_order_acquire);
        }
        t_in_chunk = false;
    }

    void work() {
        // The generation the team started at: a thread that starts late (or after its team
        // is told to stop) sees any later one at once.
        uint32_t seen = 0;
        for (;;) {
            const auto start = std::chrono::steady_clock::now();
            for (int spins = 1; gen_.load(std::memory_order_acquire) == seen; ++spins) {
                _mm_pause();
                if (spins % 64 == 0 && std::chrono::steady_clock::now() - start > kSpin) {
                    sleepers_.fetch_add(1);
                    gen_.wait(seen);
                    sleepers_.fetch_sub(1);
                }
            }
            seen = gen_.load(std::memory_order_acquire);
            if (stop_.load()) return;
            claim(seen);
        }
    }

    std::vector<std::thread> threads_;
    std::atomic<uint32_t> gen_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    alignas(64) std::atomic<uint64_t> ticket_{0};
    alignas(64) std::atomic<int64_t> done_{0};
    std::atomic<void (*)(void*, int64_t)> fn_{nullptr};
    std::atomic<void*> ctx_{nullptr};
};

std::mutex g_team_mutex;
// Never destroyed: its threads outlive main's return harmlessly, and no static's destructor
// waits on them.
Team* g_team = nullptr;

}  // namespace

bool detail::team_for(int64_t chunks, void (*run)(void*, int64_t), void* ctx) {
    const int threads = omp_get_max_threads();
    if (threads < 2 || chunks < 2 || chunks > kMaxChunks || omp_in_parallel() || t_in_chunk)
        return false;
    std::unique_lock lock(g_team_mutex, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (!g_team || g_team->size() != threads) {
        delete g_team;
        g_team = new Team(threads);
    }
    g_team->run(chunks, run, ctx);
    return true;
}

}  // namespace weft::kernels
