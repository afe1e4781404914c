#include "weft/parallel/update_fence.hpp"

#include <chrono>

namespace weft::parallel {

void UpdateFence::open() {
    std::lock_guard lock(m_);
    ready_ = 0;
    error_ = nullptr;
}

void UpdateFence::advance(int64_t end) {
    {
        std::lock_guard lock(m_);
        ready_ = end;
    }
    cv_.notify_all();
}

void UpdateFence::close(std::exception_ptr error) {
    {
        std::lock_guard lock(m_);
        ready_ = kAll;
        error_ = std::move(error);
    }
    cv_.notify_all();
}

bool UpdateFence::is_open() const {
    std::lock_guard lock(m_);
    return ready_ != kAll;
}

double UpdateFence::wait(int64_t end) {
    std::unique_lock lock(m_);
    double waited = 0;
    if (ready_ < end) {
        const auto t0 = std::chrono::steady_clock::now();
        cv_.wait(lock, [&] { return ready_ >= end; });
        waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (error_) std::rethrow_exception(error_);
    return waited;
}

}  // namespace weft::parallel
