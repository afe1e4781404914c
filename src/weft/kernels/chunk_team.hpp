#pragma once
// A team of threads that stays up between the products of a decode step. A token of a small
// model is about 120 products of a few hundred microseconds each (four a layer and the head), and
// an OpenMP parallel region per product pays its fork and its closing barrier every time: the
// barrier waits for every thread to arrive, even one the OS has descheduled after the work ran
// out. Here the calling thread publishes a product's chunks in one atomic word and starts on them
// at once; the team's threads, spinning briefly between products and asleep between tokens, claim
// chunks as they come; the call returns when every chunk has run, whoever ran it. Which thread runs
// a chunk changes nothing in it (matmul_rows computes each element whole in one thread).
#include <cstdint>
#include <type_traits>

namespace weft::kernels {

namespace detail {
bool team_for(int64_t chunks, void (*run)(void*, int64_t), void* ctx);
}

// f(i) for every i in [0, chunks), each once, on this thread and the team's (one thread fewer
// than omp_get_max_threads()); false, having run nothing, when the team cannot take it: one
// thread, inside an OpenMP parallel region, or the team busy with another thread's call.
template <class F>
bool team_for(int64_t chunks, F&& f) {
    return detail::team_for(
        chunks, [](void* c, int64_t i) { (*static_cast<std::remove_reference_t<F>*>(c))(i); }, &f);
}

}  // namespace weft::kernels
