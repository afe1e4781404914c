#pragma once
// Standard normals for a run of a Philox stream's elements, many at a time: the values of
// Philox::normal(first + i) (Box-Muller on one counter block), with the logarithm and cosine
// evaluated by polynomials in double precision in a loop the compiler vectorises, where
// normal() calls libm once per element (~47 ns an element; MeZO draws every parameter's z four
// times a step). The polynomials are within 1e-15 of libm's, so the float results are the
// same bits but for a rare rounding tie (test_normals counts them).
#include <cstdint>

#include "weft/core/philox.hpp"

namespace weft::kernels {

void philox_normals(const Philox& rng, uint64_t first, int64_t n, float* out);

}  // namespace weft::kernels
