#pragma once
// A 64-byte-aligned, zero-filled float buffer that owns its memory. Pages are touched at
// allocation so that resident memory matches what the memory estimate counts. Buffers of 1 MiB
// and more start on a page, so that a file can be written from them past the page cache
// (O_DIRECT: ckpt::AtomicFileWriter::write_uncached); those of a huge page and more take huge
// pages (allocate_huge: the weights are streamed whole each decode step).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "weft/core/huge_pages.hpp"

namespace weft {

class Buffer {
  public:
    Buffer() = default;
    explicit Buffer(int64_t n) : n_(n) {
        if (n == 0) return;
        const size_t want = size_t(n) * sizeof(float);
        const size_t align = want >= (size_t(1) << 20) ? 4096 : 64;
        size_t bytes = (want + align - 1) / align * align;
        if (want >= kHugePageBytes) {
            data_ = static_cast<float*>(allocate_huge(want));
        } else {
            data_ = static_cast<float*>(std::aligned_alloc(align, bytes));
            if (!data_) throw std::bad_alloc();
        }
        std::memset(data_, 0, bytes);
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& o) noexcept
        : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) {
            std::free(data_);
            data_ = std::exchange(o.data_, nullptr);
            n_ = std::exchange(o.n_, 0);
        }
        return *this;
    }
    ~Buffer() { std::free(data_); }

    float* data() { return data_; }
    const float* data() const { return data_; }
    int64_t size() const { return n_; }
    int64_t bytes() const { return n_ * int64_t(sizeof(float)); }
    float& operator[](int64_t i) { return data_[i]; }
    float operator[](int64_t i) const { return data_[i]; }
    void zero() {
        if (n_) std::memset(data_, 0, size_t(n_) * sizeof(float));
    }
    // At least n floats, reallocated (zeroed, contents lost) only when smaller: scratch that
    // is sized by its first use and reused after.
    void ensure(int64_t n) {
        if (n_ < n) *this = Buffer(n);
    }

  private:
    float* data_ = nullptr;
    int64_t n_ = 0;
};

}  // namespace weft
