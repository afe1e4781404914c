#include "weft/comm/mesh.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "weft/comm/detail.hpp"
#include "weft/comm/flight_signals.hpp"
#include "weft/comm/mpi_env.hpp"
#include "weft/core/error.hpp"

namespace weft::comm {

namespace {

bool mpi_finalized() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    return finalized;
}

// Our communicators report errors to us instead of aborting inside MPI, so that the message can
// name the operation and the group (detail::check_mpi then aborts the job).
void return_errors(MPI_Comm comm) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
}

}  // namespace

std::string_view axis_name(Axis axis) {
    switch (axis) {
        case Axis::tp:
            return "tp";
        case Axis::cp:
            return "cp";
        case Axis::ep:
            return "ep";
        case Axis::dp:
            return "dp";
        case Axis::pp:
            return "pp";
        case Axis::world:
            return "world";
    }
    return "?";
}

double default_comm_timeout() {
    const char* env = std::getenv("WEFT_COMM_TIMEOUT");
    if (env == nullptr || *env == '\0') return 300.0;
    char* end = nullptr;
    double seconds = std::strtod(env, &end);
    WEFT_CHECK(end != env && *end == '\0' && seconds > 0,
               "WEFT_COMM_TIMEOUT='{}' is not a positive number of seconds", env);
    return seconds;
}

Group::Group(Mesh& mesh, int index, std::string name, std::unique_ptr<detail::GroupComm> comm)
    : mesh_(&mesh), index_(index), comm_(std::move(comm)) {
    MPI_Comm c = comm_->comm;
    return_errors(c);
    MPI_Comm_size(c, &size_);
    MPI_Comm_rank(c, &rank_);
    MPI_Group mine, world;
    MPI_Comm_group(c, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> local(size_);
    for (int i = 0; i < size_; ++i) local[i] = i;
    members_.resize(size_);
    MPI_Group_translate_ranks(mine, size_, local.data(), world, members_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    stats_.name = std::move(name);
    stats_.size = size_;
}

Group::~Group() {
    if (comm_ && comm_->comm != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_->comm);
}

Mesh::Mesh(const MeshSizes& sizes, MeshOptions options) : sizes_(sizes), options_(options) {
    ensure_mpi();
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    set_timeout(options.timeout_s);
    try {
        sizes_.resolve(world_size_);
    } catch (const Error& e) {
        fail("cannot lay out {} MPI ranks (mpirun -np {}): {}", world_size_, world_size_, e.what());
    }
    extents_ = {sizes_.tp, sizes_.cp, sizes_.ep, sizes_.dp, sizes_.pp};
    flight_ = std::make_unique<FlightRecorder>(world_rank_, options_.flight_dir);
    const int ep = static_cast<int>(Axis::ep), dp = static_cast<int>(Axis::dp),
              cp = static_cast<int>(Axis::cp);
    int stride = 1;
    for (int a = 0; a < kMeshAxes; ++a) {
        if (a == ep) continue;  // folded over cp x dp: no stride of its own
        strides_[a] = stride;
        coords_[a] = (world_rank_ / stride) % extents_[a];
        stride *= extents_[a];
    }
    // cp and dp are adjacent in the rank order, so d = cp + cp_size * dp steps world ranks by
    // cp's stride.
    const int d = coords_[cp] + extents_[cp] * coords_[dp];
    coords_[ep] = d % extents_[ep];
    // Created first: its bounded wait is also the check that every rank reached this point, so
    // the blocking MPI_Comm_split calls below cannot hang on a missing rank.
    watchdog_ = std::make_unique<detail::Watchdog>(*this, MPI_COMM_WORLD);
    auto split = [&](int index, std::string name, int color, int key) {
        auto comm = std::make_unique<detail::GroupComm>();
        MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm->comm);
        flight_->name_group(index, name);
        groups_.push_back(
            std::unique_ptr<Group>(new Group(*this, index, std::move(name), std::move(comm))));
    };
    // The cp x dp index split in two: edp rank (d / ep) above the ep rank (d mod ep).
    const int edp_rank = d / extents_[ep];
    for (int a = 0; a < kMeshAxes; ++a) {
        // Ranks that differ only in coordinate a share a color; the key orders them by it. The
        // ep group: the cp x dp ranks that differ only in d mod ep.
        const int stride_a = a == ep ? strides_[cp] : strides_[a];
        split(a, std::string(axis_name(Axis(a))), world_rank_ - coords_[a] * stride_a, coords_[a]);
    }
    auto world = std::make_unique<detail::GroupComm>();
    MPI_Comm_dup(MPI_COMM_WORLD, &world->comm);
    groups_.push_back(
        std::unique_ptr<Group>(new Group(*this, kMeshAxes, "world", std::move(world))));
    flight_->name_group(kMeshAxes, "world");
    split(kMeshAxes + 1, "edp", world_rank_ - edp_rank * extents_[ep] * strides_[cp], edp_rank);
    if (!options_.flight_dir.empty()) install_flight_signals(*flight_);
}

Mesh::~Mesh() {
    remove_flight_signals(*flight_);
    groups_.clear();  // before the watchdog: a group's destructor never waits, but stay tidy
    watchdog_.reset();
}

int Mesh::rank(Axis axis) const {
    return axis == Axis::world ? world_rank_ : coords_[static_cast<int>(axis)];
}

int Mesh::size(Axis axis) const {
    return axis == Axis::world ? world_size_ : extents_[static_cast<int>(axis)];
}

int Mesh::world_rank_of(const std::array<int, kMeshAxes>& coords) const {
    int rank = 0;
    for (int a = 0; a < kMeshAxes; ++a) {
        WEFT_CHECK(coords[a] >= 0 && coords[a] < extents_[a],
                   "mesh coordinate {}={} is out of range, expected 0..{} ({})", axis_name(Axis(a)),
                   coords[a], extents_[a] - 1, sizes_.describe());
        rank += coords[a] * strides_[a];
    }
    return rank;
}

std::string Mesh::describe_rank(int world_rank) const {
    std::string out;
    for (int a = 0; a < kMeshAxes; ++a) {
        if (extents_[a] == 1 || Axis(a) == Axis::ep) continue;  // ep: cp's and dp's say it
        if (!out.empty()) out += ", ";
        out += fmt::format("{} {}", axis_name(Axis(a)), (world_rank / strides_[a]) % extents_[a]);
    }
    return out.empty() ? "the only rank" : out;
}

Group& Mesh::add_group(std::initializer_list<Axis> axes) {
    std::array<bool, kMeshAxes> used{};
    for (Axis axis : axes) {
        WEFT_CHECK(axis != Axis::world, "add_group: axis 'world' cannot be combined, use group()");
        WEFT_CHECK(axis != Axis::ep,
                   "add_group: axis 'ep' folds over cp x dp and cannot be combined, use group() or "
                   "expert_dp()");
        int a = static_cast<int>(axis);
        WEFT_CHECK(!used[a], "add_group: axis '{}' is listed twice", axis_name(axis));
        used[a] = true;
    }
    WEFT_CHECK(axes.size() > 0, "add_group: expected at least one axis, got none");
    std::string name;
    int color = world_rank_;
    for (int a = 0; a < kMeshAxes; ++a) {
        if (!used[a]) continue;
        if (!name.empty()) name += '*';
        name += axis_name(Axis(a));
        color -= coords_[a] * strides_[a];
    }
    if (Group* existing = find_group(name)) return *existing;
    auto comm = std::make_unique<detail::GroupComm>();
    MPI_Comm_split(MPI_COMM_WORLD, color, world_rank_, &comm->comm);
    int index = static_cast<int>(groups_.size());
    flight_->name_group(index, name);
    groups_.push_back(
        std::unique_ptr<Group>(new Group(*this, index, std::move(name), std::move(comm))));
    return *groups_.back();
}

Group* Mesh::find_group(std::string_view name) {
    for (auto& g : groups_) {
        if (g->name() == name) return g.get();
    }
    return nullptr;
}

void Mesh::set_timeout(double seconds) {
    WEFT_CHECK(seconds > 0, "comm timeout must be a positive number of seconds, got {}", seconds);
    options_.timeout_s = seconds;
}

CommStats Mesh::stats() const {
    CommStats out;
    for (const auto& g : groups_) out.groups.push_back(g->stats());
    return out;
}

void Mesh::reset_stats() {
    for (auto& g : groups_) g->stats_.ops = {};
}

}  // namespace weft::comm
