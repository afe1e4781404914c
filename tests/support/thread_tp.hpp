#pragma once
// An in-process tensor-parallel group for tests without MPI: `size` ranks run as std::threads of
// one process, meet at a rendezvous and read each other's buffers. Every rank reduces in rank
// order, so all ranks get the same bits, as the model requires of TpComm. Each rank's comm counts
// its calls and floats per operation (floats as comm::GroupStats counts bytes: the all-reduce
// buffer, the reduce-scatter input, the all-gather output).
//
// A rank that throws breaks the rendezvous: the others' pending collective throws too, so a
// failing test ends instead of leaving threads waiting forever.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "weft/model/tp_comm.hpp"

namespace weft::test {

struct TpOpCount {
    int64_t calls = 0, floats = 0;
};

struct TpCounts {
    TpOpCount all_reduce_sum, all_reduce_max, all_gather, reduce_scatter;
};

class ThreadTpGroup {
  public:
    explicit ThreadTpGroup(int size) : size_(size), in_(size_t(size)), n_(size_t(size)) {}

    // Runs body(comm) on one thread per rank and returns each rank's counts; rethrows the first
    // exception a rank threw.
    std::vector<TpCounts> run(const std::function<void(model::TpComm&)>& body);

  private:
    class Comm;
    struct Broken : std::runtime_error {
        Broken() : std::runtime_error("another tensor-parallel rank failed") {}
    };

    // Blocks until every rank has arrived (a reusable barrier that can be broken).
    void rendezvous() {
        std::unique_lock lock(mutex_);
        if (broken_) throw Broken();
        const uint64_t generation = generation_;
        if (++waiting_ == size_) {
            waiting_ = 0;
            ++generation_;
            cv_.notify_all();
            return;
        }
        cv_.wait(lock, [&] { return generation_ != generation || broken_; });
        if (generation_ == generation) throw Broken();
    }
    void fail() {
        std::lock_guard lock(mutex_);
        broken_ = true;
        cv_.notify_all();
    }
    // Publishes this rank's input and waits for everyone's; every rank must pass the same n.
    void publish(int rank, const float* in, int64_t n, const char* op) {
        in_[size_t(rank)] = in;
        n_[size_t(rank)] = n;
        rendezvous();
        for (int j = 0; j < size_; ++j)
            if (n_[size_t(j)] != n)
                throw std::runtime_error(std::string(op) + ": rank " + std::to_string(rank) +
                                         " passed " + std::to_string(n) + " floats, rank " +
                                         std::to_string(j) + " " + std::to_string(n_[size_t(j)]));
    }

    int size_;
    std::mutex mutex_;
    std::condition_variable cv_;
    int waiting_ = 0;
    uint64_t generation_ = 0;
    bool broken_ = false;
    std::vector<const float*> in_;
    std::vector<int64_t> n_;
};

class ThreadTpGroup::Comm : public model::TpComm {
  public:
    Comm(ThreadTpGroup& g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_.size_; }

    void all_reduce_sum(float* x, int64_t n) override {
        count(counts.all_reduce_sum, n);
        reduce(x, n, false);
    }
    void all_reduce_max(float* x, int64_t n) override {
        count(counts.all_reduce_max, n);
        reduce(x, n, true);
    }
    void all_gather(const float* in, float* out, int64_t n) override {
        count(counts.all_gather, n * g_.size_);
        g_.publish(rank_, in, n, "all_gather");
        for (int j = 0; j < g_.size_; ++j)
            if (g_.in_[size_t(j)] != out + j * n) std::copy_n(g_.in_[size_t(j)], n, out + j * n);
        g_.rendezvous();  // nobody may change its input while another copies it
    }
    void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
        count(counts.reduce_scatter, n * g_.size_);
        g_.publish(rank_, in, n, "reduce_scatter");
        for (int64_t i = 0; i < n; ++i) {
            float s = 0.0f;
            for (int j = 0; j < g_.size_; ++j) s += g_.in_[size_t(j)][rank_ * n + i];
            out[i] = s;
        }
        g_.rendezvous();
    }

    TpCounts counts;

  private:
    static void count(TpOpCount& c, int64_t floats) {
        ++c.calls;
        c.floats += floats;
    }
    void reduce(float* x, int64_t n, bool max) {
        g_.publish(rank_, x, n, max ? "all_reduce_max" : "all_reduce_sum");
        std::vector<float> r(g_.in_[0], g_.in_[0] + n);
        for (int j = 1; j < g_.size_; ++j) {
            const float* y = g_.in_[size_t(j)];
            for (int64_t i = 0; i < n; ++i)
                r[size_t(i)] = max ? std::max(r[size_t(i)], y[i]) : r[size_t(i)] + y[i];
        }
        g_.rendezvous();  // every rank has read every input before any is overwritten
        std::copy(r.begin(), r.end(), x);
    }

    ThreadTpGroup& g_;
    int rank_;
};

inline std::vector<TpCounts> ThreadTpGroup::run(const std::function<void(model::TpComm&)>& body) {
    std::vector<std::unique_ptr<Comm>> comms;
    for (int r = 0; r < size_; ++r) comms.push_back(std::make_unique<Comm>(*this, r));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(size_));
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r)
        threads.emplace_back([&, r] {
            try {
                body(*comms[size_t(r)]);
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
                fail();
            }
        });
    for (auto& t : threads) t.join();
    // The first error that is not a consequence of another rank's.
    for (auto& e : errors) {
        if (!e) continue;
        try {
            std::rethrow_exception(e);
        } catch (const Broken&) {
        } catch (...) {
            throw;
        }
    }
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    std::vector<TpCounts> counts;
    for (const auto& c : comms) counts.push_back(c->counts);
    return counts;
}

}  // namespace weft::test
