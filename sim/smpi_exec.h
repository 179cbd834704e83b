/* smpi_exec.h — mode `run` of the SMPI executor (see smpi_exec.c and simrun.h). */
#ifndef SMPI_EXEC_H
#define SMPI_EXEC_H

/* argv[0] = "run", argv[1] = result file, argv[2] = trace file or "-", then `dlsim run` options.
 * Collective over MPI_COMM_WORLD; returns the exit status. */
int smpi_exec_main(int argc, char **argv);

#endif
