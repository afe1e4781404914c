#pragma once
// How long OpenMP's waiting threads spin for the commands that decode (serve, sample). A decode
// step is ~120 short parallel regions (four products a layer and the head); libgomp's default
// spins a waiting thread for 300000 pauses (about 7 ms here) before it sleeps. On a loaded
// machine that thread burns its time slice while the one it waits for is descheduled, at every
// barrier: `weft serve` at 2 threads, bf16 SmolLM shape, load average 14-15, decoded 0.7-1.9
// tokens/s at the default and 10.4 at 10000 spins, 51.2 at 1000 (about 24 us: longer than the
// gaps inside a step, shorter than the one between tokens). libgomp reads GOMP_SPINCOUNT once,
// when it loads, before main: the process sets it and executes itself again.
namespace weft::cli {

// For `weft serve` and `weft sample` (argv[1]) with neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY
// set: sets GOMP_SPINCOUNT=1000 and re-executes the process (same arguments, same pid; before
// MPI starts). Returns when there is nothing to change, or the exec failed (the default stays).
void short_omp_spin(int argc, char** argv);

}  // namespace weft::cli
