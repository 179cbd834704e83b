/* run.h — mode `run` of the SMPI executor (see run.c and exec/exec.h). */
#ifndef SMPI_EXEC_H
#define SMPI_EXEC_H

#include <mpi.h>

/* argv[0] = "run", argv[1] = the request, argv[2] = where to write the result (exec.h).
 * Collective over MPI_COMM_WORLD; returns the exit status. */
int smpi_exec_main(int argc, char **argv);

/* Every rank, right after MPI_Init: records the rank's host (phase.c). Whether collectives' ring
 * phases then run step by step or as one message each way is coll_buf_message_level's. */
void smpi_phase_init(int rank, int P);

/* Every rank waits until all of them are here, at no simulated time: an MPI_Barrier's recursive
 * doubling sends P log2 P messages (and routes each rank to log2 P partners it otherwise never
 * talks to), a meeting of the actors of this one process sends none. Every rank then leaves at
 * the simulated time the last one arrived at (phase.c). */
void smpi_meet(void);

/* The latency a ring phase adds after its message (phase.c) may be left to the executor, which
 * then holds the rank's communication stream that much longer without a SimGrid sleep (one
 * simulated activity fewer per collective, and none when the next op waits for the compute stream
 * anyway): smpi_phase_defer(rank) before a collective that is one ring phase and nothing else;
 * smpi_phase_deferred(rank) after any collective gives the wait it left (s, 0 when it slept or
 * was not deferred) and ends the deferral. A collective of several phases, or with other messages
 * after its phase, must not defer. */
void smpi_phase_defer(int rank);
double smpi_phase_deferred(int rank);

/* Ring phases on `comm` (the caller's communicator of a group whose members share one node) may
 * be computed rather than sent: every flow of NVLink traffic inside the node belongs to this kind
 * of group, and the platform keeps each flow inside a node alone on its links (the driver's
 * plat_node_links_private). Every member of the group must say the same. */
void smpi_phase_node_private(int rank, MPI_Comm comm);
/* Ring phases computed so far, all ranks together. */
double smpi_phase_computed(void);

/* Maps the payload-free scratch regions of the collectives once, at `bytes` each (a mapping
 * populates its pages: growing them call by call cost host time). */
void smpi_scratch_reserve(size_t bytes);

#endif
