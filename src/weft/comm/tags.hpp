#pragma once
// Every point-to-point message tag weft uses, in one place. The ranges do not overlap, so no two
// kinds of message can match each other's receives on any communicator, whichever groups they
// share; MPI guarantees tags up to 32767 (MPI_TAG_UB is at least that).
namespace weft::comm::tags {

struct Range {
    int first, count;
    int end() const { return first + count; }
    int at(int i) const { return first + i; }
};

// Pipeline schedule messages (activations and their gradients, numbered densely by the
// executor from direction, micro-batch and chunk boundary), on the pp group.
inline constexpr Range kPipelineStep{0, 30000};
// Evaluation's forward-only pass through the pipeline, on the pp group.
inline constexpr int kPipelineEval = 30000;
// The tied embedding's gradient between the first and last pipeline stages, on the pp group.
inline constexpr int kTiedEmbedding = 30001;
// ZeRO shards gathered to dp rank 0 for a checkpoint, on the dp group.
inline constexpr int kZeroShardGather = 30002;
// A checkpoint's units sent to world rank 0 to assemble the logical model, by unit, on world.
inline constexpr Range kCheckpointUnits{30100, 2600};

}  // namespace weft::comm::tags
