#pragma once
// A synthetic corpus of documents with long-tailed lengths, for tests and benchmarks of packed
// documents (`weft prepare --synthetic N --lengths SPEC`, docs/long_context.md).
//
// Lengths (in tokens, the end-of-text token included) are drawn from a stated distribution,
// SPEC being one of
//   lognormal:MEDIAN:SIGMA   exp(ln MEDIAN + SIGMA z), z standard normal (most documents near
//                            MEDIAN, a tail of a few e^(3 SIGMA) times longer)
//   pareto:MIN:ALPHA         MIN u^(-1/ALPHA), u uniform in (0, 1] (a power-law tail; ALPHA
//                            near 1 makes a few documents hold much of the corpus)
// each rounded and clamped to [2, max_len]. Each document is the end-of-text token, then a random
// motif of 2 to 16 tokens repeated to its length: predictable from its own earlier tokens and
// from nothing outside it, so attention across documents can only hurt. Everything is a pure
// function of the seed.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::data {

struct LengthDistribution {
    std::string kind;     // lognormal or pareto
    double a = 0, b = 0;  // MEDIAN, SIGMA or MIN, ALPHA
    int64_t max_len = 0;
};

// The value of --lengths (or of `flag`); anything else is a weft::Error naming it and the forms
// expected.
LengthDistribution parse_length_distribution(const std::string& spec, int64_t max_len,
                                             std::string_view flag = "--lengths");

// n document lengths drawn from `d`.
std::vector<int64_t> synthetic_lengths(const LengthDistribution& d, int64_t n, uint64_t seed);

struct SyntheticCorpus {
    std::vector<uint16_t> tokens;
    std::vector<int64_t> starts;  // where each document starts
};

// Documents of the given lengths over ids [0, eot), each starting with `eot` (below 65536).
SyntheticCorpus synthetic_corpus(const std::vector<int64_t>& lengths, int32_t eot, uint64_t seed);

}  // namespace weft::data
