#pragma once
// How fast this machine streams memory: the bound of memory-bound kernels (`weft profile`'s
// cluster file, `weft bench rows`' share of it).
namespace weft::kernels {

// Bytes/s of the triad a = b + s·c over arrays far larger than the caches (12 bytes per
// element), on every OpenMP thread, best of repetitions lasting about `seconds`.
double measure_memory_bandwidth(double seconds);

}  // namespace weft::kernels
