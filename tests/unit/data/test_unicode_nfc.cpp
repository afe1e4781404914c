// NFC on the cases that exercise each part of it: decomposition, canonical ordering, composition
// (with and without blocking), Hangul, singletons, and bytes that are not UTF-8. The qwen2 golden
// ids check the same against Hugging Face through a whole tokenizer.
#include <gtest/gtest.h>

#include <string>

#include "weft/data/unicode_nfc.hpp"

namespace {

using weft::data::is_nfc_quick;
using weft::data::to_nfc;

TEST(UnicodeNfc, Composes) {
    EXPECT_EQ(to_nfc("cafe\u0301"), "caf\u00e9");
    EXPECT_EQ(to_nfc("A\u030a"), "\u00c5");
    EXPECT_EQ(to_nfc("\u212b"), "\u00c5");  // Angstrom sign: a singleton, never composed back
    EXPECT_EQ(to_nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul jamo L V T
    EXPECT_EQ(to_nfc("\uac00\u11a8"), "\uac01");        // LV syllable + T
    EXPECT_EQ(to_nfc("\u1e0b\u0323"), "\u1e0d\u0307");  // d + dot above + dot below reordered
    EXPECT_EQ(to_nfc("e\u0323\u0307"), "\u1eb9\u0307");
    // A mark of the same class in between blocks the second from the starter.
    EXPECT_EQ(to_nfc("a\u0301\u0301"), "\u00e1\u0301");
    EXPECT_EQ(to_nfc("\u0344"), "\u0308\u0301");  // decomposes into two marks
    EXPECT_EQ(to_nfc("\u0301a"), "\u0301a");      // a leading mark has nothing to join
}

TEST(UnicodeNfc, LeavesNfcAndInvalidBytesAlone) {
    for (const std::string s : {"", "plain ASCII", "caf\u00e9 \u65e5\u672c \U0001F600", "\uac01"}) {
        EXPECT_EQ(to_nfc(s), s);
    }
    // Not UTF-8: kept byte for byte, and a mark after one does not reach back past it.
    const std::string bad = "a\xff\xcc\x81 e\xed\xa0\x80\xcc\x81 \xc3";
    EXPECT_EQ(to_nfc(bad), bad);
}

TEST(UnicodeNfc, QuickCheck) {
    EXPECT_TRUE(is_nfc_quick("Hello, world\n"));
    EXPECT_TRUE(is_nfc_quick("caf\u00e9 \u65e5\u672c \uac01 \U0001F600"));
    EXPECT_FALSE(is_nfc_quick("cafe\u0301"));
    EXPECT_FALSE(is_nfc_quick("\u212b"));
    EXPECT_FALSE(is_nfc_quick("\u1100\u1161"));
}

}  // namespace
