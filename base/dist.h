// Data-parallel processes: K ranks started by `mpirun -np K`, one process group for the whole
// program. Rank 0 runs the command as a single process would and writes every file; the other
// ranks follow it into each training run (dist_follow) and compute their share of each batch.
// A program started without mpirun, or built without MPI (make NO_MPI=1), is rank 0 of 1 and
// never calls MPI. Any rank that dies takes the whole job down (MPI_Abort), never a hang.
#ifndef DIST_H
#define DIST_H

#include <stddef.h>

// Joins the job when mpirun started this process. Unless OMP_NUM_THREADS is set, each rank
// takes an equal share of this machine's cores. Ranks other than 0 print only to stderr.
void dist_init(int* argc, char*** argv);
// Rank 0 releases the followers; every rank then leaves the job. Returns code.
int dist_finish(int code);

int dist_rank(void);
int dist_ranks(void);

// Rank 0 sends `bytes` of msg to every follower waiting in dist_follow. A follower's wait
// sleeps instead of spinning, so it leaves the cores to rank 0's evaluations.
void dist_lead(const void* msg, size_t bytes);
// A follower's next message from rank 0 (bytes of it into msg); 0 once rank 0 has finished
int dist_follow(void* msg, size_t bytes);

// The rank's place among the ranks on its machine (0 without MPI): which GPU it takes
int dist_local_rank(void);
// Rank 0's `bytes` of buf copied to every rank; all ranks call it together
void dist_broadcast(void* buf, size_t bytes);

// In place: x (n) becomes its sum over the ranks, identical on every rank. Host memory.
void dist_sum_floats(float* x, size_t n);
void dist_sum_doubles(double* x, size_t n);

#endif
