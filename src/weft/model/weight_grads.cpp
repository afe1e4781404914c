#include "weft/model/weight_grads.hpp"

#include <algorithm>
#include <cstring>

#include "weft/kernels/matmul.hpp"

namespace weft::model {

namespace k = weft::kernels;

namespace {
thread_local WeightGradQueue* current_queue = nullptr;
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue& q) : saved_(current_queue) {
    current_queue = &q;
}
DeferWeightGrads::~DeferWeightGrads() {
    current_queue = saved_;
}
WeightGradQueue* DeferWeightGrads::current() {
    return current_queue;
}

Buffer WeightGradQueue::take(int64_t floats) {
    // The smallest spare buffer that fits: a backward queues the same sizes every micro-batch,
    // so each finds its own and the queue holds what the estimate counts. Taking the largest
    // instead put a layer's 4C-wide copy in the C-wide product's buffer and allocated anew,
    // 1.8 times the copies' bytes.
    auto it = std::lower_bound(spare_.begin(), spare_.end(), floats,
                               [](const Task& t, int64_t n) { return t.dout.size() < n; });
    if (it == spare_.end()) return Buffer(floats);
    Buffer b = std::move(it->dout);
    spare_.erase(it);
    return b;
}

void WeightGradQueue::defer(float* dw, float* db, const float* dout, const KeptTensor& kept,
                            int64_t at, int64_t M, int64_t K, int64_t N) {
    if (discard_) return;
    Task t{dw, db, &kept, at, M, K, N, false, take(M * N), {}};
    std::memcpy(t.dout.data(), dout, size_t(M * N) * sizeof(float));
    tasks_.push_back(std::move(t));
}

void WeightGradQueue::defer_bf16_dout(float* dw, const uint16_t* dout, const KeptTensor& kept,
                                      int64_t at, int64_t M, int64_t K, int64_t N) {
    if (discard_) return;
    const int64_t floats = KeptTensor::floats(M * N, true);
    Task t{dw, nullptr, &kept, at, M, K, N, true, take(floats), {}};
    std::memcpy(t.dout.data(), dout, size_t(M * N) * sizeof(uint16_t));
    tasks_.push_back(std::move(t));
}

const float* WeightGradQueue::keep(const float* src, int64_t floats) {
    if (floats == 0) return nullptr;  // no rows (an expert-parallel rank that received none)
    if (discard_) return src;         // the call that would read it is dropped too
    Task t{nullptr, nullptr, nullptr, 0, 0, 0, 0, false, take(floats), {}};
    std::memcpy(t.dout.data(), src, size_t(floats) * sizeof(float));
    tasks_.push_back(std::move(t));
    return tasks_.back().dout.data();
}

void WeightGradQueue::defer_call(std::function<void()> w) {
    if (discard_) return;
    tasks_.push_back({nullptr, nullptr, nullptr, 0, 0, 0, 0, false, Buffer(), std::move(w)});
}

void WeightGradQueue::run() {
    for (Task& t : tasks_) {
        if (t.call) t.call();
        if (!t.kept) continue;
        const KeptTensor& kept = *t.kept;
        if (t.bf16_dout) {
            const auto* d16 = reinterpret_cast<const uint16_t*>(t.dout.data());
            k::matmul_backward_bf16_dout(nullptr, t.dw, d16, kept.b16() + t.at, nullptr, t.M, t.K,
                                         t.N, false);
        } else if (kept.bf16()) {
            k::matmul_backward_bf16_input(nullptr, t.dw, t.db, t.dout.data(), kept.b16() + t.at,
                                          nullptr, t.M, t.K, t.N, false);
        } else {
            k::matmul_backward(nullptr, t.dw, t.db, t.dout.data(), kept.f32() + t.at, nullptr, t.M,
                               t.K, t.N, false);
        }
    }
    // Sorted by size, for take(); a call leaves no buffer to reuse.
    for (Task& t : tasks_) {
        t.call = nullptr;
        if (t.dout.size() > 0) spare_.push_back(std::move(t));
    }
    tasks_.clear();
    std::sort(spare_.begin(), spare_.end(),
              [](const Task& a, const Task& b) { return a.dout.size() < b.dout.size(); });
}

int64_t WeightGradQueue::floats() const {
    int64_t n = 0;
    for (const Task& t : tasks_) n += t.dout.size();
    return n;
}

}  // namespace weft::model

namespace weft::model {

int64_t WeightGradQueue::allocated_floats() const {
    int64_t n = floats();
    for (const Task& t : spare_) n += t.dout.size();
    return n;
}

}  // namespace weft::model
