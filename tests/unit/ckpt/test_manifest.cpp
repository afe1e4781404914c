// The sharded checkpoint's manifest, digests and shard writer: a manifest survives a round trip,
// every malformed or mistyped field is an error naming it, a version-1 checkpoint and a Hugging
// Face directory are refused clearly, a truncated or altered shard is found, and the
// asynchronous writer writes what the synchronous one does.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "unit/ckpt/ckpt_test_util.hpp"
#include "weft/ckpt/digest.hpp"
#include "weft/ckpt/manifest.hpp"
#include "weft/ckpt/shard_writer.hpp"

namespace weft::ckpt {
namespace {

using test::error_of;
using test::TempDir;

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

TEST(Digest, KnownValueAndPiecewiseEqualsWhole) {
    // XXH3-64 of the empty input with seed 0, as the xxHash specification lists it.
    EXPECT_EQ(digest_bytes("", 0), 0x2D06800538D394C2ull);
    EXPECT_EQ(digest_text(0x2D06800538D394C2ull), "xxh3:2d06800538d394c2");
    std::vector<unsigned char> data(100000);
    std::iota(data.begin(), data.end(), 0);
    Digest d;
    d.update(data.data(), 7);
    d.update(data.data() + 7, 60000);
    d.update(data.data() + 60007, data.size() - 60007);
    EXPECT_EQ(d.value(), digest_bytes(data.data(), data.size()));
    data[500] ^= 1;
    EXPECT_NE(d.value(), digest_bytes(data.data(), data.size()));
}

Manifest sample() {
    Manifest m;
    m.step = 12;
    m.layout = "dp=2 tp=1 pp=1 cp=1 ep=1 zero=1";
    m.model = {{"family", "gpt2"}, {"n_layer", 2}};
    m.run = {{"seed", 1337}, {"lr", 0.001}};
    m.tensors =
        nlohmann::json::array({{{"name", "wte.weight"}, {"shape", {10, 4}}, {"tp_dim", 0}}});
    m.shards.push_back({shard_file_name(0),
                        0,
                        0,
                        1,
                        4 * 30,
                        0x0123456789abcdefull,
                        {{"param", "wte.weight", 0, 20}, {"exp_avg", "wte.weight", 0, 10}}});
    m.shards.push_back(
        {shard_file_name(1), 1, 0, 1, 4 * 20, 42, {{"param", "wte.weight", 20, 40}}});
    return m;
}

TEST(Manifest, RoundTrip) {
    TempDir dir;
    const Manifest m = sample();
    write_manifest(dir.path(), m);
    const Manifest r = read_manifest(dir.path());
    EXPECT_EQ(manifest_to_json(r), manifest_to_json(m));
    EXPECT_EQ(r.shards[0].file, "rank_00000.bin");
    EXPECT_EQ(r.shards[0].digest, 0x0123456789abcdefull);
    EXPECT_EQ(r.shards[1].ranges[0].begin, 20);
    EXPECT_TRUE(test::temporaries_in(dir.path()).empty());
}

TEST(Manifest, MalformedFieldsAreNamed) {
    auto bad = [](auto edit) {
        nlohmann::json j = manifest_to_json(sample());
        edit(j);
        return error_of([&] { manifest_from_json(j, "m.json"); });
    };
    EXPECT_TRUE(contains(bad([](auto& j) { j["version"] = 1; }),
                         "m.json: checkpoint format version 1, expected 2"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["format"] = "x"; }), "not a weft checkpoint"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][0]["digest"] = "md5:00"; }),
                         "digest 'md5:00' is not of the form xxh3:"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][0]["file"] = "../x.bin"; }),
                         "shard file '../x.bin' is not a plain file name"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][0]["bytes"] = 4; }),
                         "is said to hold 4 bytes but its ranges add up to 30 floats"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][0]["ranges"][0][2] = 20; }),
                         "range of wte.weight is [20, 20)"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][0]["ranges"][0][0] = "grad"; }),
                         "has state 'grad'"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][1]["tp_rank"] = 1; }), "tp_rank 1 of tp 1"));
    EXPECT_TRUE(contains(bad([](auto& j) { j.erase("step"); }), "m.json: step is missing"));
    // A field of another JSON type names its path, not nlohmann's "type must be number".
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][1]["tp"] = "1"; }),
                         "m.json: shards[1].tp is \"1\" (string), expected an integer"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][0]["ranges"][1][3] = 2.5; }),
                         "m.json: shards[0].ranges[1][3] is 2.5 (number), expected an integer"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["tensors"][0]["shape"][1] = 0; }),
                         "m.json: tensors[0].shape is [10,0], expected positive integers"));
    EXPECT_TRUE(contains(bad([](auto& j) { j["shards"][1]["ranges"][0][1] = "wpe.weight"; }),
                         "names tensor 'wpe.weight', which the manifest's tensors do not list"));
}

TEST(Manifest, VersionOneAndUncommittedAreRefused) {
    TempDir v1;
    test::write_bytes(v1 / "state.json", "{}");
    EXPECT_TRUE(contains(error_of([&] { read_manifest(v1.path()); }),
                         "is a version 1 checkpoint (state.json, model.safetensors)"));
    TempDir none;
    EXPECT_TRUE(contains(error_of([&] { read_manifest(none.path()); }),
                         "has no manifest.json: it was never committed"));
    TempDir hf;
    test::write_bytes(hf / "config.json", "{}");
    EXPECT_TRUE(contains(error_of([&] { read_manifest(hf.path()); }),
                         "is a Hugging Face model directory (config.json), not a weft checkpoint"));
}

TEST(Manifest, DamagedShardsAreFound) {
    TempDir dir;
    std::vector<float> a(30, 1.5f), b(20, -2.0f);
    ShardWriter w;
    w.start(dir / shard_file_name(0), a, false);
    const FileDigest da = w.wait();
    w.start(dir / shard_file_name(1), b, false);
    const FileDigest db = w.wait();
    Manifest m = sample();
    m.shards[0].digest = da.digest;
    m.shards[1].digest = db.digest;
    EXPECT_EQ(da.bytes, 120);
    EXPECT_EQ(check_shards(dir.path(), m), std::nullopt);

    std::string bytes = test::read_bytes(dir / "rank_00001.bin");
    test::write_bytes(dir / "rank_00001.bin", bytes.substr(0, 40));
    auto problem = check_shards(dir.path(), m);
    ASSERT_TRUE(problem);
    EXPECT_TRUE(contains(*problem, "rank_00001.bin: holds 40 bytes, expected 80")) << *problem;

    bytes[17] ^= 0x20;
    test::write_bytes(dir / "rank_00001.bin", bytes);
    problem = check_shards(dir.path(), m);
    ASSERT_TRUE(problem);
    EXPECT_TRUE(contains(*problem, "rank_00001.bin: digest xxh3:")) << *problem;
    EXPECT_TRUE(contains(*problem, "does not match the manifest's")) << *problem;

    std::filesystem::remove(dir / "rank_00001.bin");
    problem = check_shard(dir.path(), m.shards[1]);
    ASSERT_TRUE(problem);
    EXPECT_TRUE(contains(*problem, "cannot be read")) << *problem;
}

TEST(ShardWriter, AsyncWritesWhatSyncWrites) {
    TempDir dir;
    std::vector<float> data(5'000'000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = float(i) * 0.25f - 7.0f;
    ShardWriter w;
    w.start(dir / "sync.bin", data, false);
    EXPECT_TRUE(w.done());
    const FileDigest s = w.wait();
    w.start(dir / "async.bin", data, true);
    const FileDigest a = w.wait();
    EXPECT_TRUE(w.done());
    EXPECT_EQ(s.bytes, int64_t(4 * data.size()));
    EXPECT_EQ(s.digest, a.digest);
    EXPECT_EQ(s.digest, digest_bytes(data.data(), 4 * data.size()));
    EXPECT_EQ(test::read_bytes(dir / "sync.bin"), test::read_bytes(dir / "async.bin"));
    const FileDigest f = digest_file(dir / "async.bin");
    EXPECT_EQ(f.digest, a.digest);
    EXPECT_EQ(f.bytes, a.bytes);
}

TEST(ShardWriter, ErrorOfTheThreadReachesWait) {
    TempDir dir;
    std::vector<float> data(10, 1.0f);
    ShardWriter w;
    test::write_bytes(dir / "file", "x");  // a file where the writer needs a directory
    w.start(dir / "file" / "x.bin", data, true);
    EXPECT_THROW(w.wait(), weft::Error);
    // The writer is usable again afterwards.
    w.start(dir / "x.bin", data, true);
    EXPECT_EQ(w.wait().bytes, 40);
}

}  // namespace
}  // namespace weft::ckpt
