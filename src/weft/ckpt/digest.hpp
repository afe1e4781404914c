#pragma once
// Content digests of checkpoint shards: XXH3-64 (Debian's libxxhash), written as
// "xxh3:<16 hex digits>". Fast enough (tens of GB/s) that every load can check every shard it
// reads; it guards against truncation and bit rot, not against an adversary.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace weft::ckpt {

// A digest computed over data that arrives in pieces.
class Digest {
  public:
    Digest();
    ~Digest();
    Digest(const Digest&) = delete;
    Digest& operator=(const Digest&) = delete;

    void update(const void* data, size_t size);
    uint64_t value() const;

  private:
    void* state_;  // XXH3_state_t, kept out of the header
};

uint64_t digest_bytes(const void* data, size_t size);
// "xxh3:00123456789abcdef"
std::string digest_text(uint64_t digest);

struct FileDigest {
    int64_t bytes = 0;
    uint64_t digest = 0;
    double seconds = 0;  // what writing (or reading) and digesting took
};
// Reads the whole file; throws naming the file if it cannot be read.
FileDigest digest_file(const std::filesystem::path& path);

}  // namespace weft::ckpt
