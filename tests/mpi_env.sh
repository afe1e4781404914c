# The Open MPI settings every test that starts ranks uses (sourced, not a test).
# Root may run ranks (CI runs as root); more ranks than cores is allowed (np 4 on two cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# The ranks of a test share one machine, where ob1 over shared memory is what Open MPI ends up
# using anyway; naming it skips probing UCX at every start, about 0.3 s of each mpirun.
export OMPI_MCA_pml=ob1
