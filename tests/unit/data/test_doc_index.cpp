// The document index beside a token file: written and read back, and every way it can be wrong
// (missing, not an index, another file's, out of order) refused with one error naming it.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "weft/core/error.hpp"
#include "weft/data/doc_index.hpp"
#include "weft/data/token_file.hpp"

namespace weft::data {
namespace {

namespace fs = std::filesystem;

void expect_error(const std::function<void()>& f, const std::string& text) {
    try {
        f();
        ADD_FAILURE() << "no error, expected one with: " << text;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
}

TEST(DocIndex, RoundTripsAndRefusesWhatIsWrong) {
    test::TempDir dir("weft_doc_index");
    const fs::path bin = dir.path / "x_train.bin", idx = doc_index_path(bin);
    EXPECT_EQ(idx, dir.path / "x_train.idx");
    const std::vector<uint16_t> tokens(10, 7);
    write_token_file(bin, tokens);
    const TokenFile f = TokenFile::open(bin);

    expect_error([&] { read_doc_index(idx, f); },
                 "has no document index: expected '" + idx.string() + "'");
    write_doc_index(idx, std::vector<int64_t>{0, 3, 9}, 10);
    EXPECT_EQ(read_doc_index(idx, f), (std::vector<int64_t>{0, 3, 9}));

    write_doc_index(idx, std::vector<int64_t>{0, 4}, 11);
    expect_error([&] { read_doc_index(idx, f); },
                 "indexes 11 tokens but '" + bin.string() + "' holds 10");
    expect_error(
        [&] {
            write_doc_index(idx, std::vector<int64_t>{0, 5, 5}, 10);
        },
        "start 5 of document 2 is out of order");
    expect_error(
        [&] {
            write_doc_index(idx, std::vector<int64_t>{1, 5}, 10);
        },
        "start 1 of document 0 is out of order");
    expect_error(
        [&] {
            write_doc_index(idx, std::vector<int64_t>{0, 10}, 10);
        },
        "start 10 of document 1 is out of order");
    std::ofstream(idx, std::ios::binary) << "not an index at all, just text";
    expect_error([&] { read_doc_index(idx, f); }, "is not a document index");
}

}  // namespace
}  // namespace weft::data
