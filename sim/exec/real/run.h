/* run.h — mode `run` of the real executor (see run.c and exec/exec.h). */
#ifndef DL_REAL_EXEC_H
#define DL_REAL_EXEC_H

/* argv[0] = "run", argv[1] = the request, argv[2] = where to write the result (exec.h).
 * Collective over MPI_COMM_WORLD (initialised with at least MPI_THREAD_FUNNELED); returns the
 * exit status (0, 1 on a write failure, 2 on bad input). */
int real_exec_main(int argc, char **argv);

#endif
