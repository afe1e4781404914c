#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/safetensors.hpp"

namespace weft::ckpt {
namespace {

using test::error_of;
using test::TempDir;

template <typename T>
void append(std::string& s, T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// A safetensors file assembled byte by byte: length, header exactly as given, data.
std::string st_bytes(const std::string& header, const std::string& data) {
    std::string out;
    append<uint64_t>(out, header.size());
    return out + header + data;
}

TEST(Safetensors, WriteReadRoundTrip) {
    TempDir tmp;
    std::vector<float> w(6), b(4), s = {42.5f};
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * float(i) - 1.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::ldexp(1.0f, int(i) - 130);  // subnormals too
    std::vector<TensorToWrite> ts = {{"w.weight", {2, 3}, w.data()},
                                     {"a.bias", {4}, b.data()},
                                     {"empty", {0, 5}, nullptr},
                                     {"scalar", {}, s.data()}};
    std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
    write_safetensors(tmp / "m.safetensors", ts, meta);

    auto f = SafetensorsFile::open(tmp / "m.safetensors");
    ASSERT_EQ(f.tensors().size(), 4u);
    std::vector<std::string> names;
    for (const auto& t : f.tensors()) names.push_back(t.name);
    EXPECT_EQ(names, (std::vector<std::string>{"w.weight", "a.bias", "empty", "scalar"}));
    EXPECT_EQ(f.metadata(), meta);
    EXPECT_EQ(f.at("w.weight").shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(f.at("w.weight").dtype, "F32");
    EXPECT_EQ(f.at("empty").begin, f.at("empty").end);
    EXPECT_TRUE(f.at("scalar").shape.empty());
    EXPECT_EQ(f.find("nope"), nullptr);

    std::vector<float> out(6);
    f.read_f32("w.weight", std::vector<int64_t>{2, 3}, out.data());
    EXPECT_EQ(out, w);
    f.read_f32("w.weight", std::vector<int64_t>{6}, out.data());  // same count, other dims: ok
    EXPECT_EQ(out, w);
    std::vector<float> outb(4);
    f.read_f32("a.bias", std::vector<int64_t>{4}, outb.data());
    EXPECT_EQ(outb, b);
    float sc = 0;
    f.read_f32("scalar", {}, &sc);
    EXPECT_EQ(sc, 42.5f);

    // Move-only: the moved-to object owns the mapping.
    SafetensorsFile g = std::move(f);
    g.read_f32("scalar", {}, &sc);
    EXPECT_EQ(sc, 42.5f);
    EXPECT_TRUE(test::temporaries_in(tmp.path()).empty());
}

TEST(Safetensors, WriterHeaderBytes) {
    TempDir tmp;
    std::vector<float> a = {1, 2, 3}, b = {-4};
    std::vector<TensorToWrite> ts = {{"a", {3}, a.data()}, {"b", {1, 1}, b.data()}};
    write_safetensors(tmp / "x.safetensors", ts, {{"k", "v"}});
    const std::string bytes = test::read_bytes(tmp / "x.safetensors");
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);  // little-endian
    EXPECT_EQ(n % 8, 0u);
    ASSERT_EQ(bytes.size(), 8 + n + 16);
    std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.front(), '{');
    size_t close = header.rfind('}');
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);  // spaces only
    auto j = nlohmann::json::parse(header);
    EXPECT_EQ(j["__metadata__"]["k"], "v");
    EXPECT_EQ(j["a"]["dtype"], "F32");
    EXPECT_EQ(j["a"]["shape"], nlohmann::json({3}));
    EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json({0, 12}));
    EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({12, 16}));
    float data[4];
    std::memcpy(data, bytes.data() + 8 + n, 16);
    EXPECT_EQ(data[0], 1.0f);
    EXPECT_EQ(data[2], 3.0f);
    EXPECT_EQ(data[3], -4.0f);
}

TEST(Safetensors, HandBuiltHalfPrecision) {
    // Header in an order different from the data, the F32 tensor at an unaligned offset.
    std::string data;
    for (uint16_t h : {0x3C00, 0xC100, 0x3555, 0x0001, 0x7C00, 0x8000}) append(data, h);  // F16
    append(data, 1.5f);  // F32 [12,20)
    append(data, -0.125f);
    for (uint16_t h : {0x3F80, 0xC020, 0x3EAA}) append(data, h);  // BF16 [20,26)
    append(data, 3.5);                                            // F64 [26,42)
    append(data, -1e-3);
    append<int32_t>(data, 7);  // I32 [42,46)
    const std::string header = R"({"z_f64":{"dtype":"F64","shape":[2],"data_offsets":[26,42]},
        "a_bf16":{"dtype":"BF16","shape":[1,3],"data_offsets":[20,26]},
        "__metadata__":{"format":"pt"},
        "m_f16":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},
        "n_i32":{"dtype":"I32","shape":[1],"data_offsets":[42,46]},
        "b_f32":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
    TempDir tmp;
    test::write_bytes(tmp / "h.safetensors", st_bytes(header, data));
    auto f = SafetensorsFile::open(tmp / "h.safetensors");
    std::vector<std::string> names;
    for (const auto& t : f.tensors()) names.push_back(t.name);
    EXPECT_EQ(names, (std::vector<std::string>{"m_f16", "b_f32", "a_bf16", "z_f64", "n_i32"}));
    EXPECT_EQ(f.metadata().at("format"), "pt");

    float h[6];
    f.read_f32("m_f16", std::vector<int64_t>{6}, h);
    EXPECT_EQ(h[0], 1.0f);
    EXPECT_EQ(h[1], -2.5f);
    EXPECT_EQ(h[2], 0.33325195f);            // 0x3555, the f16 nearest 0.333
    EXPECT_EQ(h[3], std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(h[4], std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::signbit(h[5]) && h[5] == 0.0f);
    float s[2];
    f.read_f32("b_f32", std::vector<int64_t>{2}, s);
    EXPECT_EQ(s[0], 1.5f);
    EXPECT_EQ(s[1], -0.125f);
    float bf[3];
    f.read_f32("a_bf16", std::vector<int64_t>{1, 3}, bf);
    EXPECT_EQ(bf[0], 1.0f);
    EXPECT_EQ(bf[1], -2.5f);
    EXPECT_EQ(bf[2], 0.33203125f);  // 0x3EAA, 0.333 truncated to bf16
    float d[2];
    f.read_f32("z_f64", std::vector<int64_t>{2}, d);
    EXPECT_EQ(d[0], 3.5f);
    EXPECT_EQ(d[1], float(-1e-3));
    EXPECT_EQ(f.bytes(f.at("n_i32")).size(), 4u);

    std::string e = error_of([&] { f.read_f32("n_i32", std::vector<int64_t>{1}, d); });
    EXPECT_NE(e.find("dtype I32"), std::string::npos) << e;
}

TEST(Safetensors, ReadErrors) {
    TempDir tmp;
    std::vector<float> a(6, 1.0f);
    std::vector<TensorToWrite> ts = {{"a", {2, 3}, a.data()}};
    const auto path = tmp / "a.safetensors";
    write_safetensors(path, ts);
    auto f = SafetensorsFile::open(path);
    float out[9];
    std::string e = error_of([&] { f.read_f32("a", std::vector<int64_t>{3, 3}, out); });
    EXPECT_NE(e.find("'a'"), std::string::npos) << e;
    EXPECT_NE(e.find("has shape [2, 3] (6 elements), expected shape [3, 3] (9 elements)"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find(path.string()), std::string::npos) << e;
    e = error_of([&] { f.at("missing"); });
    EXPECT_NE(e.find("tensor 'missing' not found in " + path.string()), std::string::npos) << e;
    e = error_of([&] { SafetensorsFile::open(tmp / "nope.safetensors"); });
    EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

TEST(Safetensors, NonFiniteWeightsAreNamed) {
    std::vector<float> v = {1.0f, -0.0f, 3e38f};
    check_finite_tensor(v, "w", "m.safetensors");
    v[2] = std::numeric_limits<float>::quiet_NaN();
    std::string e = error_of([&] { check_finite_tensor(v, "w", "m.safetensors"); });
    EXPECT_NE(e.find("m.safetensors: tensor 'w' holds NaN at element 2"), std::string::npos) << e;
    v[1] = -std::numeric_limits<float>::infinity();
    e = error_of([&] { check_finite_tensor(v, "w", "m.safetensors"); });
    EXPECT_NE(e.find("holds an infinity at element 1"), std::string::npos) << e;
}

TEST(Safetensors, TruncatedFile) {
    TempDir tmp;
    std::vector<float> a(16, 2.0f);
    std::vector<TensorToWrite> ts = {{"a", {16}, a.data()}};
    write_safetensors(tmp / "t.safetensors", ts);
    const std::string whole = test::read_bytes(tmp / "t.safetensors");
    test::write_bytes(tmp / "t.safetensors", whole.substr(0, whole.size() - 4));
    std::string e = error_of([&] { SafetensorsFile::open(tmp / "t.safetensors"); });
    EXPECT_NE(e.find("outside the data buffer"), std::string::npos) << e;
    test::write_bytes(tmp / "t.safetensors", whole.substr(0, 20));  // cut inside the header
    e = error_of([&] { SafetensorsFile::open(tmp / "t.safetensors"); });
    EXPECT_NE(e.find("file truncated"), std::string::npos) << e;
    test::write_bytes(tmp / "t.safetensors", whole.substr(0, 5));
    e = error_of([&] { SafetensorsFile::open(tmp / "t.safetensors"); });
    EXPECT_NE(e.find("too short"), std::string::npos) << e;
}

struct Malformed {
    const char* what;
    std::string bytes;
    const char* expect;
};

TEST(Safetensors, MalformedFilesAreRejected) {
    const std::string d8(8, '\0'), d12(12, '\0');
    auto one = [](const std::string& entry) { return "{\"a\":" + entry + "}"; };
    std::string huge;
    append<uint64_t>(huge, 200'000'000);
    huge += "{}";
    std::string too_long;
    append<uint64_t>(too_long, 100);
    too_long += "{}";
    const std::vector<Malformed> cases = {
        {"absurd length", huge, "absurd"},
        {"length past end", too_long, "larger than the 2 bytes"},
        {"not json", st_bytes("{\"a\": nope}", ""), "not valid JSON"},
        {"not object", st_bytes("[1, 2]", ""), "must be a JSON object, got array"},
        {"entry not object", st_bytes(one("3"), ""), "expected an object, got number"},
        {"no dtype", st_bytes(one(R"({"shape":[2],"data_offsets":[0,8]})"), d8), "no \"dtype\""},
        {"no shape", st_bytes(one(R"({"dtype":"F32","data_offsets":[0,8]})"), d8), "no \"shape\""},
        {"no offsets", st_bytes(one(R"({"dtype":"F32","shape":[2]})"), d8), "no \"data_offsets\""},
        {"dtype type", st_bytes(one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), d8),
         "dtype must be a string"},
        {"unknown dtype", st_bytes(one(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"), d8),
         "unknown dtype 'F33'"},
        {"shape type", st_bytes(one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), d8),
         "shape must be an array"},
        {"float dim", st_bytes(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), d8),
         "shape dims must be integers, got 2.0"},
        {"negative dim", st_bytes(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), d8),
         "negative value -2 in shape dims"},
        {"offsets arity", st_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), d8),
         "data_offsets must be an array [begin, end]"},
        {"offsets order", st_bytes(one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), d8),
         "end before begin"},
        {"size mismatch", st_bytes(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), d8),
         "data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12 bytes"},
        {"outside", st_bytes(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,12]})"), d8),
         "lie outside the data buffer of 8 bytes"},
        {"overlap",
         st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                      "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  d12),
         "tensors 'a' and 'b'"},
        {"gap",
         st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                      "b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                  d12),
         "bytes [4, 8) before tensor 'b' belong to no tensor"},
        {"trailing gap", st_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), d12),
         "bytes [8, 12) after the last tensor"},
        {"leading gap", st_bytes(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), d8),
         "bytes [0, 4) before tensor 'a'"},
        {"duplicate",
         st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                      "a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  d8),
         "duplicate tensor name 'a'"},
        {"duplicate key",
         st_bytes(one(R"({"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]})"), d8),
         "duplicate key 'dtype'"},
        {"metadata type", st_bytes(R"({"__metadata__":{"k":1}})", ""), "__metadata__ key 'k'"},
        {"metadata object", st_bytes(R"({"__metadata__":[]})", ""), "__metadata__ in"},
    };
    TempDir tmp;
    for (const Malformed& c : cases) {
        const auto path = tmp / "bad.safetensors";
        test::write_bytes(path, c.bytes);
        std::string e = error_of([&] { SafetensorsFile::open(path); });
        EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": " << e;
        EXPECT_NE(e.find(path.string()), std::string::npos) << c.what << ": " << e;
    }
}

TEST(Safetensors, WriterRejectsBadInput) {
    TempDir tmp;
    float x = 1;
    std::vector<TensorToWrite> dup = {{"a", {1}, &x}, {"a", {1}, &x}};
    std::string e = error_of([&] { write_safetensors(tmp / "d.safetensors", dup); });
    EXPECT_NE(e.find("'a' appears twice"), std::string::npos) << e;
    std::vector<TensorToWrite> neg = {{"a", {-1}, &x}};
    e = error_of([&] { write_safetensors(tmp / "d.safetensors", neg); });
    EXPECT_NE(e.find("bad shape [-1]"), std::string::npos) << e;
    EXPECT_FALSE(std::filesystem::exists(tmp / "d.safetensors"));
    EXPECT_TRUE(test::temporaries_in(tmp.path()).empty());
}

}  // namespace
}  // namespace weft::ckpt
