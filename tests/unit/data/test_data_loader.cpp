// The global sample order: llm.c's sequential order, a shuffled order that is a permutation per
// epoch, and targets one token after inputs; uint32 files; files too short for a window, and
// windows that fit exactly; rows of a batch and a context-parallel rank's positions of them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
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

// Every sample of the first two epochs is its window's tokens: inputs [w*T, w*T + T), targets one
// later, with the last target the last token of the window.
void expect_windows_read_exactly(const DataLoader& loader, const std::vector<int64_t>& tokens) {
    const int64_t T = loader.seq_len();
    std::vector<int32_t> in(T), tg(T);
    for (int64_t g = 0; g < 2 * loader.windows(); ++g) {
        loader.sample(g, 0, 1, in.data(), tg.data());
        const int64_t start = loader.window(g, 0, 1) * T;
        ASSERT_LE(start + T + 1, int64_t(tokens.size()));
        for (int64_t t = 0; t < T; ++t) {
            ASSERT_EQ(in[t], tokens[start + t]) << "g=" << g << " t=" << t;
            ASSERT_EQ(tg[t], tokens[start + t + 1]) << "g=" << g << " t=" << t;
        }
    }
}

// Files whose token data ends exactly at the end of a 4096-byte page, so that a read one token
// past the end leaves the mapping (and faults when the next page is unmapped).
class ExactFitTest : public ::testing::Test {
  protected:
    fs::path path(const std::string& name) {
        return fs::temp_directory_path() / ("weft_exact_" + std::to_string(::getpid()) + name);
    }
    void TearDown() override {
        for (const auto& p : written_) fs::remove(p);
    }
    std::vector<fs::path> written_;
};

TEST_F(ExactFitTest, OneWindowThatExactlyFitsTheFile) {
    // uint16 with header: (4096 - 1024) / 2 = 1536 tokens; uint32: 768; bare uint16: 2048.
    struct Case {
        const char* name;
        int64_t tokens;
        int width;
        bool bare;
    };
    for (const Case& c :
         {Case{"u16", 1536, 2, false}, Case{"u32", 768, 4, false}, Case{"bare", 2048, 2, true}}) {
        SCOPED_TRACE(c.name);
        const fs::path p = path(c.name);
        written_.push_back(p);
        std::vector<int64_t> tokens(c.tokens);
        for (int64_t i = 0; i < c.tokens; ++i) tokens[i] = c.width == 4 ? 100000 + i : 3 * i + 1;
        if (c.bare) {
            std::vector<uint16_t> t(tokens.begin(), tokens.end());
            std::ofstream(p, std::ios::binary)
                .write(reinterpret_cast<const char*>(t.data()), std::streamsize(2 * t.size()));
        } else {
            std::vector<uint32_t> t(tokens.begin(), tokens.end());
            weft::data::write_token_file(p, t);
        }
        ASSERT_EQ(fs::file_size(p), 4096u);
        TokenFile f = TokenFile::open(
            p, c.bare ? weft::data::TokenFormat::raw : weft::data::TokenFormat::llmc);
        ASSERT_EQ(f.token_bytes(), c.width);
        const int64_t T = c.tokens - 1;
        for (bool sequential : {true, false}) {
            DataLoader loader(f, T, 9, sequential);
            EXPECT_EQ(loader.windows(), 1);
            expect_windows_read_exactly(loader, tokens);
        }
        // One token longer does not fit.
        EXPECT_THROW(DataLoader(f, T + 1, 0, true), weft::Error);
        // Several windows that end exactly at the last token: (n - 1) divisible by T.
        for (int64_t t2 : {int64_t(1), int64_t(5), T / 3}) {
            if (T % t2 != 0) continue;
            DataLoader loader(f, t2, 4, false);
            EXPECT_EQ(loader.windows(), T / t2);
            expect_windows_read_exactly(loader, tokens);
        }
    }
}

TEST_F(LoaderTest, SequenceLongerThanTheFileNamesFileCountAndT) {
    make(10);
    for (int64_t T :
         {int64_t(10), int64_t(11), int64_t(1000), std::numeric_limits<int64_t>::max()}) {
        try {
            DataLoader loader(*file_, T, 0, false);
            ADD_FAILURE() << "accepted 10 tokens for T = " << T;
        } catch (const weft::Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path_.string()), std::string::npos) << msg;
            EXPECT_NE(msg.find("has 10 tokens"), std::string::npos) << msg;
            EXPECT_NE(msg.find("sequence length " + std::to_string(T)), std::string::npos) << msg;
        }
    }
    for (int64_t T : {int64_t(0), int64_t(-1), std::numeric_limits<int64_t>::min()})
        EXPECT_THROW(DataLoader(*file_, T, 0, false), weft::Error) << T;
    DataLoader fits(*file_, 9, 0, false);
    EXPECT_EQ(fits.windows(), 1);
}

TEST_F(LoaderTest, StepsPastInt64AreRefusedNotWrapped) {
    make(100);
    DataLoader loader(*file_, 4, 0, false);
    const int64_t big = std::numeric_limits<int64_t>::max();
    EXPECT_THROW(loader.window(big / 2, 0, 4), weft::Error);
    EXPECT_THROW(loader.window(-1, 0, 4), weft::Error);
    EXPECT_NO_THROW(loader.window(big / 4 - 1, 3, 4));
}

TEST(LoaderUint32Test, LlamaSizedIdsPassThrough) {
    const fs::path p =
        fs::temp_directory_path() / ("weft_loader_u32_" + std::to_string(::getpid()) + ".bin");
    std::vector<uint32_t> t(999);
    for (size_t i = 0; i < t.size(); ++i) t[i] = uint32_t(128255 - i);
    weft::data::write_token_file(p, t);
    {
        TokenFile f = TokenFile::open(p);
        ASSERT_EQ(f.token_bytes(), 4);
        weft::data::check_token_ids(f, 128256);
        const int64_t T = 16;
        DataLoader loader(f, T, 0, true);
        std::vector<int32_t> in(T), tg(T);
        loader.sample(3, 1, 2, in.data(), tg.data());  // window 7
        for (int64_t k = 0; k < T; ++k) {
            EXPECT_EQ(in[k], 128255 - (7 * T + k));
            EXPECT_EQ(tg[k], 128255 - (7 * T + k + 1));
        }
        expect_windows_read_exactly(loader, std::vector<int64_t>(t.begin(), t.end()));
    }
    fs::remove(p);
}

}  // namespace

namespace {

// sample_rows is sample() row after row; with positions, each row keeps only those positions of
// the same sequence (what a context-parallel rank trains on), in the order listed.
TEST_F(LoaderTest, RowsAndPositionsAreSamplesCut) {
    make(1000);
    const int64_t T = 8, B = 6, row0 = 2, rows = 3;
    DataLoader loader(*file_, T, 99, false);
    std::vector<int32_t> in(rows * T), tg(rows * T), one_in(T), one_tg(T);
    loader.sample_rows(5, row0, rows, B, {}, in.data(), tg.data());
    const std::vector<int64_t> pos = {0, 1, 6, 7};  // zigzag: cp rank 0 of 2 (chunks 0 and 3)
    const int64_t n = int64_t(pos.size());
    std::vector<int32_t> pin(rows * n), ptg(rows * n);
    loader.sample_rows(5, row0, rows, B, pos, pin.data(), ptg.data());
    for (int64_t r = 0; r < rows; ++r) {
        loader.sample(5, row0 + r, B, one_in.data(), one_tg.data());
        for (int64_t t = 0; t < T; ++t) {
            EXPECT_EQ(in[r * T + t], one_in[t]);
            EXPECT_EQ(tg[r * T + t], one_tg[t]);
        }
        for (int64_t t = 0; t < n; ++t) {
            EXPECT_EQ(pin[r * n + t], one_in[pos[t]]) << "row " << r << " position " << pos[t];
            EXPECT_EQ(ptg[r * n + t], one_tg[pos[t]]);
        }
    }
    const std::vector<int64_t> outside = {8};
    EXPECT_THROW(loader.sample_rows(5, row0, 1, B, outside, pin.data(), ptg.data()), weft::Error);
}

}  // namespace
