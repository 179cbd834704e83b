/* run.h — mode `run` of the SMPI executor (see run.c and exec/exec.h). */
#ifndef SMPI_EXEC_H
#define SMPI_EXEC_H

/* argv[0] = "run", argv[1] = the request, argv[2] = where to write the result (exec.h).
 * Collective over MPI_COMM_WORLD; returns the exit status. */
int smpi_exec_main(int argc, char **argv);

#endif
