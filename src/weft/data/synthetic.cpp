#include "weft/data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "weft/core/error.hpp"
#include "weft/core/philox.hpp"

namespace weft::data {

namespace {

// "a:b" of the spec's parameters as two positive finite numbers, else nothing.
bool parse_two(const std::string& s, double& a, double& b) {
    const size_t colon = s.find(':');
    if (colon == std::string::npos) return false;
    char* end = nullptr;
    const std::string x = s.substr(0, colon), y = s.substr(colon + 1);
    a = std::strtod(x.c_str(), &end);
    if (x.empty() || *end) return false;
    b = std::strtod(y.c_str(), &end);
    if (y.empty() || *end) return false;
    return std::isfinite(a) && std::isfinite(b) && a > 0 && b > 0;
}

}  // namespace

LengthDistribution parse_length_distribution(const std::string& spec, int64_t max_len,
                                             std::string_view flag) {
    WEFT_CHECK(max_len >= 2,
               "--max-doc-len must be at least 2 (an end-of-text token and one "
               "more), got {}",
               max_len);
    LengthDistribution d;
    d.max_len = max_len;
    const size_t colon = spec.find(':');
    d.kind = spec.substr(0, colon);
    const bool known = d.kind == "lognormal" || d.kind == "pareto";
    WEFT_CHECK(known && colon != std::string::npos && parse_two(spec.substr(colon + 1), d.a, d.b),
               "{} '{}': expected lognormal:MEDIAN:SIGMA or pareto:MIN:ALPHA with positive "
               "numbers (e.g. lognormal:300:1.2)",
               flag, spec);
    return d;
}

std::vector<int64_t> synthetic_lengths(const LengthDistribution& d, int64_t n, uint64_t seed) {
    const Philox rng = philox_for(seed, "synthetic-lengths");
    std::vector<int64_t> lengths(size_t(std::max<int64_t>(n, 0)));
    for (int64_t i = 0; i < n; ++i) {
        double x;
        if (d.kind == "lognormal") {
            x = d.a * std::exp(d.b * double(rng.normal(uint64_t(i))));
        } else {
            // 1 - u lies in (0, 1]: no division by zero.
            x = d.a * std::pow(1.0 - double(rng.uniform(uint64_t(i))), -1.0 / d.b);
        }
        lengths[size_t(i)] =
            std::clamp<int64_t>(int64_t(std::llround(std::min(x, 1e15))), 2, d.max_len);
    }
    return lengths;
}

SyntheticCorpus synthetic_corpus(const std::vector<int64_t>& lengths, int32_t eot, uint64_t seed) {
    WEFT_CHECK(eot >= 2 && eot < 65536, "internal: a synthetic corpus with end-of-text id {}", eot);
    const Philox rng = philox_for(seed, "synthetic-tokens");
    SyntheticCorpus c;
    uint64_t draw = 0;
    for (int64_t len : lengths) {
        c.starts.push_back(int64_t(c.tokens.size()));
        c.tokens.push_back(uint16_t(eot));
        const int64_t m = 2 + int64_t(rng.uniform(draw++) * 15.0f) % 15;
        uint16_t motif[16];
        for (int64_t j = 0; j < m; ++j)
            motif[j] = uint16_t(int64_t(rng.uniform(draw++) * float(eot)) % eot);
        for (int64_t t = 1; t < len; ++t) c.tokens.push_back(motif[(t - 1) % m]);
    }
    return c;
}

}  // namespace weft::data
