#include <gtest/gtest.h>

#include "weft/core/error.hpp"
#include "weft/parallel/pipeline/partition.hpp"

using weft::pipeline::Partition;
using weft::pipeline::partition_layers;

namespace {
weft::model::ModelConfig layers(int n, bool tied = true) {
    weft::model::ModelConfig c = weft::model::model_preset("tiny");
    c.n_layer = n;
    c.tie_embeddings = tied;  // an untied head (Llama's option) needs no embedding at the end
    return c;
}

// What `f` throws, or "no error".
template <class F>
std::string message(F&& f) {
    try {
        f();
    } catch (const weft::Error& e) {
        return std::string(e.what());
    }
    return std::string("no error");
}
}  // namespace

TEST(PipelinePartition, EvenSplitAndUnitsPerRank) {
    // 8 layers, pp 2, vpp 2: chunks of 2 layers; rank 0 holds chunks 0 and 2, rank 1 chunks 1
    // and 3 (the last: final norm and the tied embedding's copy).
    const Partition p = partition_layers(8, 2, 2, "");
    EXPECT_EQ(p.first, (std::vector<int>{0, 2, 4, 6}));
    EXPECT_EQ(p.count, (std::vector<int>{2, 2, 2, 2}));
    EXPECT_EQ(p.chunks_of(0), (std::vector<int>{0, 2}));
    EXPECT_EQ(p.chunks_of(1), (std::vector<int>{1, 3}));
    // Units: 0 embeddings, 1..8 layers, 9 final norm.
    EXPECT_EQ(p.units_of(0, layers(8)),
              (std::vector<bool>{true, true, true, false, false, true, true, false, false, false}));
    EXPECT_EQ(p.units_of(1, layers(8)),
              (std::vector<bool>{true, false, false, true, true, false, false, true, true, true}));
}

TEST(PipelinePartition, MiddleStagesHoldOnlyTheirLayers) {
    const Partition p = partition_layers(4, 4, 1, "");
    EXPECT_EQ(p.units_of(1, layers(4)),
              (std::vector<bool>{false, false, true, false, false, false}));
    EXPECT_EQ(p.units_of(3, layers(4)), (std::vector<bool>{true, false, false, false, true, true}));
    EXPECT_EQ(p.units_of(3, layers(4, false)),
              (std::vector<bool>{false, false, false, false, true, true}));
}

TEST(PipelinePartition, ExplicitSplit) {
    const Partition p = partition_layers(10, 4, 1, "3,3,2,2");
    EXPECT_EQ(p.first, (std::vector<int>{0, 3, 6, 8}));
    EXPECT_EQ(p.count, (std::vector<int>{3, 3, 2, 2}));
}

TEST(PipelinePartition, ClearErrors) {
    EXPECT_NE(message([] {
                  partition_layers(6, 4, 1, "");
              }).find("6 layers do not split evenly into pp 4 x vpp 1 = 4 pipeline chunks"),
              std::string::npos);
    // More chunks than layers: no --pp-layers can fix it, so none is advised.
    for (const char* layers : {"", "1,1,0,0"}) {
        const std::string m = message([&] { partition_layers(2, 4, 1, layers); });
        EXPECT_NE(m.find("4 pipeline chunks cannot split the model's 2 layers"), std::string::npos)
            << m;
        EXPECT_EQ(m.find("--pp-layers with"), std::string::npos) << m;
    }
    EXPECT_NE(message([] { partition_layers(6, 2, 1, "3,2"); })
                  .find("gives 2 chunks of 5 layers in all; expected pp 2 x vpp 1 = 2 chunks "
                        "adding up to the model's 6 layers"),
              std::string::npos);
    EXPECT_NE(message([] { partition_layers(6, 2, 1, "3,0,3"); }).find("'0' is not a positive"),
              std::string::npos);
    EXPECT_NE(message([] { partition_layers(6, 2, 1, "3,"); }).find("'' is not a positive"),
              std::string::npos);
    EXPECT_NE(message([] { partition_layers(6, 2, 1, "3 ,3"); }).find("'3 ' is not a positive"),
              std::string::npos);
}

// Llama 3 405B's pipeline (Dubey et al. 2024, Sec. 3.3.2): a layer taken from the first and the
// last stage leaves the first chunk with the embedding alone and the last with the head alone.
// The planner prices it (empty_ends); the engine's --pp-layers still gives every chunk a layer.
TEST(PipelinePartition, EmptyEndChunks) {
    const Partition p = partition_layers(6, 2, 2, "0,3,3,0", false, true);
    EXPECT_EQ(p.first, (std::vector<int>{0, 0, 3, 6}));
    EXPECT_EQ(p.count, (std::vector<int>{0, 3, 3, 0}));
    // Rank 0: the embeddings (chunk 0) and layers 4-6 (chunk 2); rank 1: layers 1-3 (chunk 1,
    // which starts at layer 0 too but holds no embedding) and the head.
    EXPECT_EQ(p.units_of(0, layers(6, false)),
              (std::vector<bool>{true, false, false, false, true, true, true, false}));
    EXPECT_EQ(p.units_of(1, layers(6, false)),
              (std::vector<bool>{false, true, true, true, false, false, false, true}));
    // With a tied head the last chunk keeps its copy of the embeddings.
    EXPECT_TRUE(p.units_of(1, layers(6))[0]);
    // Two more chunks than layers, when both ends are empty.
    EXPECT_NO_THROW(partition_layers(2, 2, 2, "0,1,1,0", false, true));
    EXPECT_NE(message([] { partition_layers(6, 2, 2, "0,3,3,0"); }).find("'0' is not a positive"),
              std::string::npos);
    EXPECT_NE(message([] {
                  partition_layers(6, 2, 2, "3,0,3,0", false, true);
              }).find("a chunk between the first and the last holds no layer"),
              std::string::npos);
    EXPECT_NE(message([] {
                  partition_layers(6, 2, 2, "0,-1,7,0", false, true);
              }).find("'-1' is not a non-negative layer count"),
              std::string::npos);
}
