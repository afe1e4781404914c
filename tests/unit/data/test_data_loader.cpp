// The global sample order: llm.c's sequential order, a shuffled order that is a permutation per
// epoch, and targets one token after inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/data/loader.hpp"

namespace {

using weft::data::DataLoader;
using weft::data::TokenFile;
namespace fs = std::filesystem;

// A token file whose token i is i (mod 2^16), so a window's first input says where it starts.
class LoaderTest : public ::testing::Test {
  protected:
    void make(size_t n) {
        path_ = fs::temp_directory_path() /
                ("weft_loader_" + std::to_string(::getpid()) + "_" + std::to_string(n) + ".bin");
        std::vector<uint16_t> tokens(n);
        for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i);
        weft::data::write_token_file(path_, tokens);
        file_ = std::make_unique<TokenFile>(TokenFile::open(path_));
    }
    void TearDown() override {
        file_.reset();
        if (!path_.empty()) fs::remove(path_);
    }
    fs::path path_;
    std::unique_ptr<TokenFile> file_;
};

TEST_F(LoaderTest, SequentialIsLlmcOrder) {
    make(1000);
    const int64_t T = 8, B = 4;
    DataLoader loader(*file_, T, 1234, true);
    EXPECT_EQ(loader.windows(), (1000 - 1) / T);
    std::vector<int32_t> in(T), tg(T);
    for (int64_t b = 0; b < 31; ++b) {  // 31 * 4 = 124 = W: the first epoch exactly
        for (int64_t r = 0; r < B; ++r) {
            loader.sample(b, r, B, in.data(), tg.data());
            for (int64_t t = 0; t < T; ++t) {
                ASSERT_EQ(in[t], (b * B + r) * T + t);
                ASSERT_EQ(tg[t], (b * B + r) * T + t + 1);
            }
        }
    }
    loader.sample(31, 0, B, in.data(), tg.data());  // sample 124 wraps to window 0
    EXPECT_EQ(in[0], 0);
}

TEST_F(LoaderTest, ShuffledIsAPermutationPerEpoch) {
    make(4000);
    const int64_t T = 16, B = 7;
    DataLoader loader(*file_, T, 42, false);
    const int64_t W = loader.windows();
    ASSERT_EQ(W, 249);
    std::vector<int64_t> epoch0, epoch1;
    for (int64_t g = 0; g < 2 * W; ++g)
        (g < W ? epoch0 : epoch1).push_back(loader.window(g / B, g % B, B));
    for (auto* e : {&epoch0, &epoch1}) {
        std::vector<int64_t> sorted = *e;
        std::sort(sorted.begin(), sorted.end());
        for (int64_t w = 0; w < W; ++w) ASSERT_EQ(sorted[w], w) << "window missing or repeated";
    }
    EXPECT_NE(epoch0, epoch1);  // each epoch has its own order
    std::vector<int64_t> identity(W);
    for (int64_t w = 0; w < W; ++w) identity[w] = w;
    EXPECT_NE(epoch0, identity);

    // Same seed, same order, however it is asked for; another seed, another order.
    DataLoader again(*file_, T, 42, false), other(*file_, T, 43, false);
    int64_t differ = 0;
    for (int64_t g = 0; g < W; ++g) {
        EXPECT_EQ(again.window(g, 0, 1), epoch0[g]);
        differ += other.window(g / B, g % B, B) != epoch0[g];
    }
    EXPECT_GT(differ, W / 2);
}

TEST_F(LoaderTest, ShuffledPermutationHoldsForManySizes) {
    for (int64_t W : {1, 2, 3, 5, 64, 65, 1000, 4097}) {
        std::vector<char> hit(W, 0);
        for (int64_t p = 0; p < W; ++p) {
            int64_t w = weft::data::shuffled_window(p, W, 7, 3);
            ASSERT_TRUE(w >= 0 && w < W && !hit[w]) << "W=" << W << " p=" << p;
            hit[w] = 1;
        }
    }
}

TEST_F(LoaderTest, TargetsAreInputsShiftedByOne) {
    make(3000);
    const int64_t T = 32;
    DataLoader loader(*file_, T, 5, false);
    std::vector<int32_t> in(T), tg(T);
    for (int64_t step = 0; step < 20; ++step) {
        loader.sample(step, 1, 3, in.data(), tg.data());
        const int64_t start = loader.window(step, 1, 3) * T;
        for (int64_t t = 0; t < T; ++t) {
            ASSERT_EQ(in[t], start + t);
            ASSERT_EQ(tg[t], start + t + 1);
        }
    }
}

TEST_F(LoaderTest, TooShortFileNamesTAndCount) {
    make(16);
    try {
        DataLoader loader(*file_, 16, 0, true);
        FAIL() << "accepted 16 tokens for T = 16";
    } catch (const weft::Error& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("16 tokens"), std::string::npos) << msg;
        EXPECT_NE(msg.find("sequence length 16"), std::string::npos) << msg;
        EXPECT_NE(msg.find(path_.string()), std::string::npos) << msg;
    }
    DataLoader fits(*file_, 15, 0, true);
    EXPECT_EQ(fits.windows(), 1);
    std::vector<int32_t> in(15), tg(15);
    EXPECT_THROW(fits.sample(0, 2, 2, in.data(), tg.data()), weft::Error);  // row past the batch
}

}  // namespace
