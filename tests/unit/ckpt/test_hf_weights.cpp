#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/hf_weights.hpp"

namespace weft::ckpt {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;
using Shape = std::vector<int64_t>;

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

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

// Four small tensors with distinct values, including ones that only survive a bit-exact copy.
struct Model {
    std::vector<float> embed, norm, proj, bias;
    std::vector<TensorToWrite> tensors;
    Model() : embed(12), norm(4), proj(6), bias(3) {
        for (size_t i = 0; i < embed.size(); ++i) embed[i] = std::sin(float(i) + 0.1f);
        for (size_t i = 0; i < norm.size(); ++i) norm[i] = std::ldexp(1.0f, -140 + int(i));
        for (size_t i = 0; i < proj.size(); ++i) proj[i] = -1.0f / float(i + 3);
        bias = {0.0f, -0.0f, 1e30f};
        tensors = {{"model.embed_tokens.weight", {3, 4}, embed.data()},
                   {"model.norm.weight", {4}, norm.data()},
                   {"model.layers.0.mlp.up_proj.weight", {2, 3}, proj.data()},
                   {"lm_head.bias", {3}, bias.data()}};
    }
};

std::vector<float> read(const HfWeights& w, const std::string& name) {
    const Shape shape = w.info(name).shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> out(size_t(n), 123.0f);
    w.read_f32(name, shape, out.data());
    return out;
}

bool bit_identical(const std::vector<float>& a, const float* b) {
    return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

void expect_model(const HfWeights& w, const Model& m) {
    std::vector<std::string> want;
    for (const auto& t : m.tensors) want.push_back(t.name);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(w.names(), want);
    for (const auto& t : m.tensors) {
        ASSERT_TRUE(w.has(t.name)) << t.name;
        EXPECT_EQ(w.info(t.name).shape, t.shape) << t.name;
        EXPECT_EQ(w.info(t.name).dtype, "F32") << t.name;
        EXPECT_TRUE(bit_identical(read(w, t.name), t.data)) << t.name;
    }
}

// The hand-written index of two shards: the first two tensors, then the last two.
void write_two_shards(const TempDir& dir, const Model& m) {
    std::span<const TensorToWrite> all(m.tensors);
    write_safetensors(dir / "model-00001-of-00002.safetensors", all.subspan(0, 2));
    write_safetensors(dir / "model-00002-of-00002.safetensors", all.subspan(2));
    nlohmann::json index = {{"metadata", {{"total_size", 100}}}, {"weight_map", {}}};
    for (size_t i = 0; i < all.size(); ++i)
        index["weight_map"][all[i].name] =
            i < 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    test::write_bytes(dir / "model.safetensors.index.json", index.dump(2));
}

TEST(HfWeights, SingleFileAndShardsLoadIdentically) {
    Model m;
    TempDir one, two;
    write_safetensors(one / "model.safetensors", m.tensors);
    write_two_shards(two, m);

    HfWeights a = HfWeights::open(one.path());
    HfWeights b = HfWeights::open(two.path());
    expect_model(a, m);
    expect_model(b, m);
    EXPECT_EQ(a.files().size(), 1u);
    ASSERT_EQ(b.files().size(), 2u);
    EXPECT_EQ(b.file_of("model.norm.weight"), two / "model-00001-of-00002.safetensors");
    EXPECT_EQ(b.file_of("lm_head.bias"), two / "model-00002-of-00002.safetensors");
    for (const std::string& name : a.names())
        EXPECT_TRUE(bit_identical(read(a, name), read(b, name).data())) << name;
    EXPECT_FALSE(a.has("model.layers.1.mlp.up_proj.weight"));

    HfWeights moved = std::move(b);  // the mappings move with the object
    EXPECT_TRUE(bit_identical(read(moved, "lm_head.bias"), m.bias.data()));
}

TEST(HfWeights, HalfPrecisionTensorsReadAsFloats) {
    std::string data;
    for (uint16_t h : {0x3F80, 0xC020, 0x3EAA, 0x0001}) append(data, h);  // BF16 [0, 8)
    for (uint16_t h : {0x3C00, 0xC100, 0x3555, 0x0001}) append(data, h);  // F16 [8, 16)
    const std::string header = R"({"__metadata__":{"format":"pt"},
        "w_bf16":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},
        "w_f16":{"dtype":"F16","shape":[4],"data_offsets":[8,16]}})";
    TempDir dir;
    test::write_bytes(dir / "model.safetensors", st_bytes(header, data));
    HfWeights w = HfWeights::open(dir.path());
    EXPECT_EQ(w.info("w_bf16").dtype, "BF16");
    EXPECT_EQ(w.info("w_f16").dtype, "F16");
    EXPECT_EQ(read(w, "w_bf16"), (std::vector<float>{1.0f, -2.5f, 0.33203125f,
                                                     std::ldexp(1.0f, -133)}));  // bf16 subnormal
    EXPECT_EQ(read(w, "w_f16"),
              (std::vector<float>{1.0f, -2.5f, 0.33325195f, std::ldexp(1.0f, -24)}));
}

// transformers reads model.safetensors when it is there, whatever else the directory holds.
TEST(HfWeights, PrefersSingleFileOverIndex) {
    Model m;
    TempDir dir;
    write_safetensors(dir / "model.safetensors", m.tensors);
    test::write_bytes(dir / "model.safetensors.index.json", "{ not json");
    expect_model(HfWeights::open(dir.path()), m);
}

TEST(HfWeights, ErrorNoWeights) {
    TempDir dir;
    std::string e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, dir.path().string() + " has neither model.safetensors nor "
                                                  "model.safetensors.index.json"))
        << e;
    test::write_bytes(dir / "pytorch_model.bin", "x");
    e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, "pytorch_model.bin weights, which weft does not read")) << e;
}

TEST(HfWeights, ErrorIndexNamesMissingShard) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    fs::remove(dir / "model-00002-of-00002.safetensors");
    const std::string e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e,
                         "names shard model-00002-of-00002.safetensors (holding tensor "
                         "'lm_head.bias'), but " +
                             (dir / "model-00002-of-00002.safetensors").string() +
                             " does not exist"))
        << e;
}

TEST(HfWeights, ErrorIndexNamesTensorNotInItsShard) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    auto index = nlohmann::json::parse(test::read_bytes(dir / "model.safetensors.index.json"));
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors";
    test::write_bytes(dir / "model.safetensors.index.json", index.dump());
    const std::string e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e,
                         "maps tensor 'model.layers.9.mlp.up_proj.weight' to "
                         "model-00001-of-00002.safetensors, but " +
                             (dir / "model-00001-of-00002.safetensors").string() +
                             " does not hold it"))
        << e;
}

TEST(HfWeights, ErrorShardHoldsUnlistedOrMisplacedTensor) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    auto index = nlohmann::json::parse(test::read_bytes(dir / "model.safetensors.index.json"));
    index["weight_map"].erase("model.norm.weight");
    test::write_bytes(dir / "model.safetensors.index.json", index.dump());
    std::string e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, (dir / "model-00001-of-00002.safetensors").string() +
                                " holds tensor 'model.norm.weight', which " +
                                (dir / "model.safetensors.index.json").string() + " does not list"))
        << e;

    // The same tensor stored in both shards: the map can name only one of them.
    std::span<const TensorToWrite> all(m.tensors);
    std::vector<TensorToWrite> second(all.begin() + 1, all.end());
    write_safetensors(dir / "model-00002-of-00002.safetensors", second);
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    test::write_bytes(dir / "model.safetensors.index.json", index.dump());
    e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, (dir / "model-00002-of-00002.safetensors").string() +
                                " holds tensor 'model.norm.weight', but " +
                                (dir / "model.safetensors.index.json").string() +
                                " places it in model-00001-of-00002.safetensors"))
        << e;
}

TEST(HfWeights, ErrorTensorListedTwice) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    // nlohmann::json cannot hold a duplicate key, so the text is written by hand.
    test::write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.mlp.up_proj.weight": "model-00002-of-00002.safetensors",
        "lm_head.bias": "model-00002-of-00002.safetensors",
        "model.norm.weight": "model-00002-of-00002.safetensors"}})");
    const std::string e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, "\"model.norm.weight\" is listed twice")) << e;
}

TEST(HfWeights, ErrorCorruptIndex) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    const std::string index = (dir / "model.safetensors.index.json").string();
    test::write_bytes(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",)");
    std::string e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, index + " is not valid JSON")) << e;

    test::write_bytes(index, R"({"metadata": {}})");
    e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, index + ": expected \"weight_map\"")) << e;

    test::write_bytes(index, R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
    e = error_of([&] { HfWeights::open(dir.path()); });
    EXPECT_TRUE(contains(e, "gives tensor 'a' the shard \"../elsewhere.safetensors\"")) << e;
}

TEST(HfWeights, ErrorMissingTensor) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    HfWeights w = HfWeights::open(dir.path());
    const std::string want =
        "tensor 'model.lm_head.weight' not found in the weights of " + dir.path().string();
    std::string e = error_of([&] { w.info("model.lm_head.weight"); });
    EXPECT_TRUE(contains(e, want)) << e;
    float x[4];
    e = error_of([&] { w.read_f32("model.lm_head.weight", Shape{4}, x); });
    EXPECT_TRUE(contains(e, want)) << e;
}

TEST(HfWeights, ErrorWrongShape) {
    Model m;
    TempDir dir;
    write_two_shards(dir, m);
    HfWeights w = HfWeights::open(dir.path());
    std::vector<float> out(12);
    // Same element count, other dims: a transposed matrix must not load.
    std::string e = error_of([&] {
        w.read_f32("model.layers.0.mlp.up_proj.weight", Shape{3, 2}, out.data());
    });
    EXPECT_TRUE(contains(e, "tensor 'model.layers.0.mlp.up_proj.weight' in " +
                                (dir / "model-00002-of-00002.safetensors").string() +
                                " has shape [2, 3], expected [3, 2]"))
        << e;
    e = error_of([&] { w.read_f32("model.embed_tokens.weight", Shape{3, 5}, out.data()); });
    EXPECT_TRUE(contains(e, "has shape [3, 4], expected [3, 5]")) << e;
}

TEST(HfWeights, WriteShardsReadsBack) {
    Model m;  // tensors of 48, 16, 24 and 12 bytes
    TempDir dir;
    write_hf_weights(dir.path(), m.tensors, 40);
    // 48 > 40 alone; 16 + 24 = 40 fits; 12 starts a new shard.
    const std::vector<std::string> shards = {"model-00001-of-00003.safetensors",
                                             "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors"};
    for (const auto& s : shards) EXPECT_TRUE(fs::exists(dir / s)) << s;
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    auto index = nlohmann::json::parse(test::read_bytes(dir / "model.safetensors.index.json"));
    EXPECT_EQ(index["metadata"]["total_size"], 100);
    EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], shards[0]);
    EXPECT_EQ(index["weight_map"]["model.norm.weight"], shards[1]);
    EXPECT_EQ(index["weight_map"]["model.layers.0.mlp.up_proj.weight"], shards[1]);
    EXPECT_EQ(index["weight_map"]["lm_head.bias"], shards[2]);
    HfWeights w = HfWeights::open(dir.path());
    expect_model(w, m);
    EXPECT_EQ(w.files().size(), 3u);
    EXPECT_EQ(w.files()[0].metadata().at("format"), "pt");  // transformers checks it

    // Rewritten in two shards: the three-shard files go.
    write_hf_weights(dir.path(), m.tensors, 64);
    EXPECT_TRUE(fs::exists(dir / "model-00002-of-00002.safetensors"));
    for (const auto& s : shards) EXPECT_FALSE(fs::exists(dir / s)) << s;
    expect_model(HfWeights::open(dir.path()), m);

    // Rewritten as one file: the index and shards go too.
    write_hf_weights(dir.path(), m.tensors);
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir.path()))
        files.push_back(e.path().filename().string());
    EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
    expect_model(HfWeights::open(dir.path()), m);

    // And back to shards: the single file, which transformers would prefer, goes.
    write_hf_weights(dir.path(), m.tensors, 40);
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    expect_model(HfWeights::open(dir.path()), m);
    EXPECT_TRUE(test::temporaries_in(dir.path()).empty());
}

TEST(HfWeights, WriteErrors) {
    Model m;
    TempDir dir;
    std::string e = error_of([&] { write_hf_weights(dir.path(), m.tensors, 0); });
    EXPECT_TRUE(contains(e, "max_shard_bytes is 0")) << e;
    std::vector<TensorToWrite> twice = {m.tensors[0], m.tensors[1], m.tensors[0]};
    e = error_of([&] { write_hf_weights(dir.path(), twice, 40); });
    EXPECT_TRUE(contains(e, "tensor name 'model.embed_tokens.weight' appears twice")) << e;
    EXPECT_TRUE(fs::is_empty(dir.path()));  // checked before any file is written
}

}  // namespace
}  // namespace weft::ckpt
