/* run.h — mode `run` of the SMPI executor (see run.c and exec/exec.h). */
#ifndef SMPI_EXEC_H
#define SMPI_EXEC_H

/* argv[0] = "run", argv[1] = the request, argv[2] = where to write the result (exec.h).
 * Collective over MPI_COMM_WORLD; returns the exit status. */
int smpi_exec_main(int argc, char **argv);

/* Every rank, right after MPI_Init: records the rank's host (phase.c). Whether collectives' ring
 * phases then run step by step or as one message each way is coll_buf_message_level's. */
void smpi_phase_init(int rank, int P);

/* Maps the payload-free scratch regions of the collectives once, at `bytes` each (a mapping
 * populates its pages: growing them call by call cost host time). */
void smpi_scratch_reserve(size_t bytes);

#endif
