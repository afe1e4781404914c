#include "weft/ckpt/digest.hpp"

#include <xxhash.h>

#include <fstream>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::ckpt {

Digest::Digest() : state_(XXH3_createState()) {
    if (!state_) throw std::bad_alloc();
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Digest::~Digest() {
    XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void Digest::update(const void* data, size_t size) {
    XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t Digest::value() const {
    return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

uint64_t digest_bytes(const void* data, size_t size) {
    return XXH3_64bits(data, size);
}

std::string digest_text(uint64_t digest) {
    return fmt::format("xxh3:{:016x}", digest);
}

FileDigest digest_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    WEFT_CHECK(in.good(), "cannot open {} to check its digest", path.string());
    Digest d;
    FileDigest out;
    std::vector<char> chunk(size_t(1) << 22);
    while (in) {
        in.read(chunk.data(), std::streamsize(chunk.size()));
        const std::streamsize n = in.gcount();
        if (n <= 0) break;
        d.update(chunk.data(), size_t(n));
        out.bytes += n;
    }
    WEFT_CHECK(in.eof(), "cannot read {} to check its digest", path.string());
    out.digest = d.value();
    return out;
}

}  // namespace weft::ckpt
