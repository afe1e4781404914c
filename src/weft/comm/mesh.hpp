#pragma once
// The process mesh: the degrees of a layout (MeshSizes) laid over MPI_COMM_WORLD in Megatron's
// rank order, tp fastest:
//
//   rank = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*pp_rank))
//
// so tensor-parallel groups sit on neighbouring ranks. Each axis has its own communicator (a
// Group); a group's rank is the rank's coordinate on that axis. Groups spanning several axes
// (say cp*dp, for reducing gradients of a context-parallel run) are added with add_group.
//
// Expert parallelism folds over the ranks that split the tokens, cp x dp (Megatron's MoE
// parallel folding), instead of multiplying the world. With d = cp_rank + cp*dp_rank, a rank's
// index in the cp x dp group (just dp_rank without cp), the ep group is ep consecutive such
// ranks (ep_rank = d mod ep), and the expert-data-parallel group ("edp", expert_dp()) those with
// the same ep rank (edp_rank = d / ep). Attention sees cp and dp ranks; an expert's weights are
// replicated over edp, and a rank's tokens reach their experts over ep. Its coordinate follows
// from cp's and dp's: world_rank_of ignores it and describe_rank leaves it out.
// The mesh knows sizes, not how a run uses them (ZeRO, schedules, cp kinds): those options are
// the Layout's, passed to whoever needs them (parallel/parallel_context.hpp).
// mpi.h stays out of this header: callers see groups, not communicators.
#include <array>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/comm/flight_recorder.hpp"
#include "weft/comm/stats.hpp"
#include "weft/core/layout.hpp"

namespace weft::comm {

enum class Axis { tp, cp, ep, dp, pp, world };
inline constexpr int kMeshAxes = 5;  // tp, cp, ep, dp, pp; world is the whole mesh
std::string_view axis_name(Axis axis);

// Seconds a rank may stay blocked in one communication call before the watchdog ends the job:
// $WEFT_COMM_TIMEOUT if set (the CLI's --comm-timeout sets MeshOptions directly), else 300.
double default_comm_timeout();

// Exit code of a job ended by the watchdog (as timeout(1) uses).
inline constexpr int kWatchdogExitCode = 124;

struct MeshOptions {
    double timeout_s = default_comm_timeout();
    // Where the flight recorder (flight_recorder.hpp) writes rank_<world rank>.json when the
    // watchdog times out or the process gets SIGTERM or SIGUSR1; empty: no dumps, no handlers.
    std::string flight_dir;
};

class Mesh;
namespace detail {
struct GroupComm;
class Watchdog;
struct Access;
}  // namespace detail

// A set of ranks that communicate: one mesh axis or a combination. Owned by its Mesh.
class Group {
  public:
    ~Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;

    std::string_view name() const { return stats_.name; }
    int size() const { return size_; }
    int rank() const { return rank_; }  // this rank's index in the group
    // World rank of every member, indexed by group rank.
    std::span<const int> members() const { return members_; }
    const GroupStats& stats() const { return stats_; }
    Mesh& mesh() const { return *mesh_; }

  private:
    friend class Mesh;
    friend struct detail::Access;
    Group(Mesh& mesh, int index, std::string name, std::unique_ptr<detail::GroupComm> comm);

    Mesh* mesh_;
    int index_;  // position in the mesh's group list; the same on every rank
    int size_ = 1;
    int rank_ = 0;
    std::vector<int> members_;
    uint64_t started_ = 0;  // collectives started so far, which numbers them for the watchdog
    GroupStats stats_;
    std::unique_ptr<detail::GroupComm> comm_;
};

class Mesh {
  public:
    // Collective over MPI_COMM_WORLD. Resolves the sizes against the world size (dp = 0 is
    // derived) and throws weft::Error naming every degree when the product does not match.
    explicit Mesh(const MeshSizes& sizes, MeshOptions options = {});
    ~Mesh();
    Mesh(const Mesh&) = delete;
    Mesh& operator=(const Mesh&) = delete;

    const MeshSizes& sizes() const { return sizes_; }  // resolved: dp filled in
    int world_rank() const { return world_rank_; }
    int world_size() const { return world_size_; }
    // Coordinate of this rank on an axis (world: the world rank), and the axis' degree.
    int rank(Axis axis) const;
    int size(Axis axis) const;
    // Coordinates of this rank, indexed by Axis (tp, cp, ep, dp, pp).
    const std::array<int, kMeshAxes>& coords() const { return coords_; }
    // World rank at the given coordinates; throws weft::Error if one is out of range.
    int world_rank_of(const std::array<int, kMeshAxes>& coords) const;
    // "tp 1, dp 0" style description of a world rank's coordinates (axes of degree > 1).
    std::string describe_rank(int world_rank) const;

    Group& group(Axis axis) { return *groups_[static_cast<int>(axis)]; }
    // The ranks holding the same experts (the same ep rank) among the cp x dp group: expert
    // gradients are reduced, and their ZeRO shards cut, over it. cp x dp when ep is 1.
    Group& expert_dp() { return *groups_[kMeshAxes + 1]; }
    // Collective over the world: every rank must add the same groups in the same order. The
    // group spans the listed axes (distinct, not world); its ranks follow world-rank order. Its
    // name joins the axis names in mesh order with '*' ("cp*dp"). Adding it again returns it.
    Group& add_group(std::initializer_list<Axis> axes);
    Group* find_group(std::string_view name);
    std::span<const std::unique_ptr<Group>> groups() const { return groups_; }

    double timeout() const { return options_.timeout_s; }
    void set_timeout(double seconds);

    CommStats stats() const;
    void reset_stats();

    // This rank's recent operations and the time it spent blocked in them.
    const FlightRecorder& flight() const { return *flight_; }

  private:
    friend struct detail::Access;
    MeshSizes sizes_;
    MeshOptions options_;
    int world_rank_ = 0;
    int world_size_ = 1;
    std::array<int, kMeshAxes> extents_{};  // sizes_ indexed by Axis
    std::array<int, kMeshAxes> strides_{};
    std::array<int, kMeshAxes> coords_{};
    std::unique_ptr<FlightRecorder> flight_;
    // The Axis values first (world last of them), edp, then added groups.
    std::vector<std::unique_ptr<Group>> groups_;
    std::unique_ptr<detail::Watchdog> watchdog_;
};

}  // namespace weft::comm
