#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/gguf.hpp"

namespace weft::ckpt {
namespace {

using test::error_of;
using test::TempDir;

// Reads the file's little-endian fields in order, as ggml's gguf reader does.
struct Cursor {
    const std::string& s;
    size_t at = 0;
    template <typename T>
    T get() {
        T v;
        std::memcpy(&v, s.data() + at, sizeof v);
        at += sizeof v;
        return v;
    }
    std::string str() {
        const auto n = get<uint64_t>();
        std::string v = s.substr(at, n);
        at += n;
        return v;
    }
};

TEST(Gguf, LayoutAndConversions) {
    TempDir tmp;
    GgufMetadata m;
    m.add_string("general.architecture", "llama");
    m.add_u32("llama.block_count", 2);
    const std::vector<std::string> tokens = {"a", "bc"};
    m.add_string_array("tokenizer.ggml.tokens", tokens);
    const std::vector<int32_t> types = {1, 3};
    m.add_i32_array("tokenizer.ggml.token_type", types);
    const std::vector<float> w = {1, 2, 3, 4, 5, 6};
    // bf16 rounds to nearest even: 1 + 2^-8 is a tie (down to 1), 1 + 3 * 2^-8 rounds up; f16
    // keeps 1 + 2^-10 exactly.
    const std::vector<float> v = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.0f};
    const std::vector<float> h = {1.0f + 0x1p-10f, 65504.0f, 0.5f};
    const GgufTensor ts[] = {{"w", {2, 3}, GgmlType::f32, w.data()},
                             {"v", {3}, GgmlType::bf16, v.data()},
                             {"h", {3}, GgmlType::f16, h.data()}};
    write_gguf(tmp.path() / "m.gguf", m, ts);
    const std::string b = test::read_bytes(tmp.path() / "m.gguf");

    Cursor c{b};
    EXPECT_EQ(c.get<uint32_t>(), 0x46554747u);  // "GGUF"
    EXPECT_EQ(c.get<uint32_t>(), 3u);
    EXPECT_EQ(c.get<uint64_t>(), 3u);  // tensors
    EXPECT_EQ(c.get<uint64_t>(), 4u);  // key/value pairs
    EXPECT_EQ(c.str(), "general.architecture");
    EXPECT_EQ(c.get<uint32_t>(), 8u);  // string
    EXPECT_EQ(c.str(), "llama");
    EXPECT_EQ(c.str(), "llama.block_count");
    EXPECT_EQ(c.get<uint32_t>(), 4u);  // uint32
    EXPECT_EQ(c.get<uint32_t>(), 2u);
    EXPECT_EQ(c.str(), "tokenizer.ggml.tokens");
    EXPECT_EQ(c.get<uint32_t>(), 9u);  // array
    EXPECT_EQ(c.get<uint32_t>(), 8u);  // of strings
    EXPECT_EQ(c.get<uint64_t>(), 2u);
    EXPECT_EQ(c.str(), "a");
    EXPECT_EQ(c.str(), "bc");
    EXPECT_EQ(c.str(), "tokenizer.ggml.token_type");
    EXPECT_EQ(c.get<uint32_t>(), 9u);
    EXPECT_EQ(c.get<uint32_t>(), 5u);  // of int32
    EXPECT_EQ(c.get<uint64_t>(), 2u);
    EXPECT_EQ(c.get<int32_t>(), 1);
    EXPECT_EQ(c.get<int32_t>(), 3);

    // Tensor infos: dimensions innermost first, offsets 32-aligned from the data's start.
    struct Info {
        std::string name;
        std::vector<uint64_t> ne;
        uint32_t type;
        uint64_t offset;
    };
    std::vector<Info> infos;
    for (int i = 0; i < 3; ++i) {
        Info in{c.str(), {}, 0, 0};
        const auto n = c.get<uint32_t>();
        for (uint32_t d = 0; d < n; ++d) in.ne.push_back(c.get<uint64_t>());
        in.type = c.get<uint32_t>();
        in.offset = c.get<uint64_t>();
        infos.push_back(in);
    }
    EXPECT_EQ(infos[0].name, "w");
    EXPECT_EQ(infos[0].ne, (std::vector<uint64_t>{3, 2}));
    EXPECT_EQ(infos[0].type, 0u);
    EXPECT_EQ(infos[0].offset, 0u);
    EXPECT_EQ(infos[1].type, 30u);
    EXPECT_EQ(infos[1].offset, 32u);  // 24 bytes of w, padded
    EXPECT_EQ(infos[2].type, 1u);
    EXPECT_EQ(infos[2].offset, 64u);
    const size_t data = (c.at + 31) / 32 * 32;
    EXPECT_EQ(b.size(), data + 64 + 6);

    Cursor d{b, data};
    for (float x : w) EXPECT_EQ(d.get<float>(), x);
    d.at = data + 32;
    EXPECT_EQ(d.get<uint16_t>(), 0x3f80);  // tie: to even
    EXPECT_EQ(d.get<uint16_t>(), 0x3f82);  // up
    EXPECT_EQ(d.get<uint16_t>(), 0xc000);  // -2
    d.at = data + 64;
    EXPECT_EQ(d.get<uint16_t>(), 0x3c01);
    EXPECT_EQ(d.get<uint16_t>(), 0x7bff);  // the largest half
    EXPECT_EQ(d.get<uint16_t>(), 0x3800);
}

TEST(Gguf, Refusals) {
    TempDir tmp;
    const float x[1] = {0};
    const GgufTensor twice[] = {{"a", {1}, GgmlType::f32, x}, {"a", {1}, GgmlType::f32, x}};
    EXPECT_NE(error_of([&] {
                  write_gguf(tmp.path() / "t.gguf", {}, twice);
              }).find("tensor name 'a' appears twice"),
              std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(tmp.path() / "t.gguf"));
    EXPECT_EQ(parse_ggml_type("bf16", "--gguf-type"), GgmlType::bf16);
    EXPECT_EQ(error_of([] { parse_ggml_type("q8_0", "--gguf-type"); }),
              "--gguf-type 'q8_0' is not a GGUF type weft writes; expected f32, f16 or bf16");
}

}  // namespace
}  // namespace weft::ckpt
