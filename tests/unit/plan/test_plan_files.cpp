// Cluster and model files: the shipped ones load; malformed ones fail naming file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "weft/core/error.hpp"
#include "weft/model/counts.hpp"
#include "weft/plan/cluster.hpp"
#include "weft/plan/models.hpp"

using namespace weft;
using namespace weft::plan;
namespace fs = std::filesystem;

namespace {

const char* kCluster = R"({
  "name": "t",
  "device": {"name": "d", "peak_tflops": {"bf16": 312}, "memory_gib": 80,
             "memory_bandwidth_gbs": 2000,
             "gemm_efficiency": {"max": 0.8, "m_half": 64, "n_half": 64, "k_half": 64},
             "attention_efficiency": 0.4, "kernel_overhead_us": 5, "runtime_gib": 2},
  "devices_per_node": 8, "nodes": 2,
  "intra_node": {"bandwidth_gbs": 300, "latency_us": 2},
  "inter_node": {"bandwidth_gbs": 25, "latency_us": 5}
})";

fs::path write(const std::string& name, const std::string& text) {
    fs::path p = fs::temp_directory_path() / ("weft_plan_test_" + name + ".json");
    std::ofstream(p) << text;
    return p;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
}

// The error message of loading `text` as a cluster file.
std::string cluster_error(const std::string& name, const std::string& text) {
    const fs::path p = write(name, text);
    try {
        load_cluster(p);
    } catch (const Error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find(p.string()), std::string::npos) << m;  // names the file
        return m;
    }
    ADD_FAILURE() << "no error for " << name;
    return "";
}

}  // namespace

TEST(PlanFiles, ValidClusterLoadsInSiUnits) {
    const Cluster c = load_cluster(write("ok", kCluster));
    EXPECT_EQ(c.devices(), 16);
    EXPECT_DOUBLE_EQ(c.device.peak("bf16"), 312e12);
    EXPECT_DOUBLE_EQ(c.intra.bandwidth, 300e9);
    EXPECT_DOUBLE_EQ(c.inter.latency, 5e-6);
    EXPECT_DOUBLE_EQ(c.device.memory_bytes, 80.0 * (1 << 30));
    EXPECT_THROW(c.device.peak("fp8"), Error);
}

TEST(PlanFiles, MalformedClusterErrorsNameTheKey) {
    auto has = [](const std::string& m, const std::string& what) {
        EXPECT_NE(m.find(what), std::string::npos) << m;
    };
    has(cluster_error("missing", replace(kCluster, R"("nodes": 2,)", "")), "missing key 'nodes'");
    has(cluster_error("type", replace(kCluster, R"("memory_gib": 80)", R"("memory_gib": "80")")),
        "device.memory_gib: expected a number, got string");
    has(cluster_error("negative",
                      replace(kCluster, R"("bandwidth_gbs": 25)", R"("bandwidth_gbs": -25)")),
        "inter_node.bandwidth_gbs: must be positive, got -25");
    has(cluster_error("integer",
                      replace(kCluster, R"("devices_per_node": 8)", R"("devices_per_node": 8.5)")),
        "devices_per_node: expected an integer, got 8.5");
    has(cluster_error("typo", replace(kCluster, R"("latency_us": 2)", R"("latency_s": 2)")),
        "unknown key 'intra_node.latency_s'");
    has(cluster_error("json", "{ not json"), "not valid JSON");
    has(cluster_error("eff", replace(kCluster, R"("max": 0.8)", R"("max": 1.5)")),
        "device.gemm_efficiency.max must be at most 1");
    EXPECT_THROW(load_cluster("/nonexistent/cluster.json"), Error);
}

TEST(PlanFiles, ShippedClustersLoad) {
    for (const char* name : {"dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "mi300x",
                             "frontier-mi250x", "jean-zay-a100", "local"}) {
        const fs::path p =
            fs::path(WEFT_SOURCE_DIR) / "configs/clusters" / (std::string(name) + ".json");
        const Cluster c = load_cluster(p);
        EXPECT_EQ(c.name, name);
    }
    const Cluster a100 = load_cluster(fs::path(WEFT_SOURCE_DIR) / "configs/clusters/dgx-a100.json");
    EXPECT_EQ(a100.devices_per_node, 8);
    EXPECT_DOUBLE_EQ(a100.intra.bandwidth, 300e9);  // NVLink 600 GB/s, 300 each way
    EXPECT_DOUBLE_EQ(a100.inter.bandwidth, 25e9);   // 200 Gb/s per GPU
    // fp8 products have their own efficiency where a file gives one; other dtypes the default.
    const Cluster h100 = load_cluster(fs::path(WEFT_SOURCE_DIR) / "configs/clusters/dgx-h100.json");
    EXPECT_DOUBLE_EQ(h100.device.gemm_for("fp8").max, 0.48);
    EXPECT_DOUBLE_EQ(h100.device.gemm_for("bf16").max, h100.device.gemm.max);
    EXPECT_DOUBLE_EQ(a100.device.gemm_for("fp8").max, a100.device.gemm.max);
}

TEST(PlanFiles, ModelPresetsAndFiles) {
    EXPECT_EQ(load_model("gpt2").config.n_embd, 768);
    const model::ModelConfig g3 = load_model("gpt3-175b").config;
    EXPECT_NEAR(double(num_parameters(g3)), 175e9, 1e9);
    // Narayanan et al. 2021 Table 1: the smallest and the largest row, by parameter count.
    EXPECT_NEAR(double(num_parameters(load_model("megatron-1.7b").config)), 1.7e9, 0.06e9);
    EXPECT_NEAR(double(num_parameters(load_model("megatron-145b").config)), 145.6e9, 0.3e9);
    EXPECT_NEAR(double(num_parameters(load_model("megatron-1t").config)), 1008e9, 2e9);
    // The shipped file equals the preset.
    const NamedModel f =
        load_model((fs::path(WEFT_SOURCE_DIR) / "configs/models/gpt3-175b.json").string());
    EXPECT_EQ(num_parameters(f.config), num_parameters(g3));
    try {
        load_model(write("model", R"({"name": "m", "vocab_size": 100, "n_positions": 64,
                                      "n_layer": 2, "n_head": 3, "n_embd": 64})")
                       .string());
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not divisible by n_head"), std::string::npos);
    }
    try {
        load_model(write("model2", R"({"name": "m", "vocab_size": 100, "n_positions": 64,
                                       "n_layer": 2, "n_head": 4})")
                       .string());
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("missing key 'n_embd'"), std::string::npos);
    }
    EXPECT_THROW(load_model("gpt5"), Error);
}
