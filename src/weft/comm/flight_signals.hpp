#pragma once
// Dumps a flight recorder when the process is told to stop or asked for a snapshot:
//   SIGTERM  dump (reason "signal"), then die of SIGTERM as without the handler: a supervisor
//            stops a hung job with SIGTERM (mpirun forwards it to the ranks, and MPI_Abort sends
//            it), and the dump says where each rank was.
//   SIGUSR1  dump and carry on: a snapshot of a live job (mpirun forwards SIGUSR1 too).
// One recorder at a time is dumped (the mesh that installed it last).
namespace weft::comm {

class FlightRecorder;

// Installs the handlers for `recorder`, keeping the previous dispositions to restore.
void install_flight_signals(FlightRecorder& recorder);
// Restores the previous dispositions if `recorder` is the one installed.
void remove_flight_signals(FlightRecorder& recorder);

}  // namespace weft::comm
