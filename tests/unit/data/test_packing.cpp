// The document boundaries and positions of packed rows: documents inside a window, one that
// starts before it (its piece starts the row at position 0), and one crossing its end.
#include <gtest/gtest.h>

#include <vector>

#include "weft/data/packing.hpp"

namespace weft::data {
namespace {

TEST(DocumentRows, BoundariesAndPositionsOfEachWindow) {
    // Documents at 0, 3, 4 and 10 of a file; windows of 5.
    const DocumentRows docs({0, 3, 4, 10}, 5);
    std::vector<int64_t> pos, cu;
    const std::vector<int64_t> first{0, 5, 2};
    docs.rows(first, pos, cu);
    // Row 0: tokens 0..4 = [0 1 2][3][4]; row 1: tokens 5..9, all of the document at 4;
    // row 2: tokens 2..6 = [2][3][4 5 6].
    EXPECT_EQ(cu, (std::vector<int64_t>{0, 3, 4, 5, 10, 11, 12, 15}));
    EXPECT_EQ(pos, (std::vector<int64_t>{0, 1, 2, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 1, 2}));
}

}  // namespace
}  // namespace weft::data
