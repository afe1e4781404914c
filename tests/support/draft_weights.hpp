#pragma once
// A draft model for speculation tests: a model with fewer layers takes the target's tensors of
// the same names (its embeddings, head and first layers), so that it guesses some of the target's
// tokens and misses others, as a trained draft does.
#include <gtest/gtest.h>

#include <algorithm>

#include "weft/model/params.hpp"

namespace weft::test {

inline void copy_target_tensors(const model::ParamLayout& target, const float* target_params,
                                const model::ParamLayout& draft, float* draft_params) {
    for (const model::ParamSpec& t : draft.tensors) {
        const model::ParamSpec& from = target.find(t.name);
        ASSERT_EQ(from.numel_stored, t.numel_stored) << t.name;
        std::copy_n(target_params + from.offset, t.numel_stored, draft_params + t.offset);
    }
}

}  // namespace weft::test
