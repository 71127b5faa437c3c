// MPI does the launching, the collectives and the job teardown; nothing here is a transport.
#define _GNU_SOURCE
#include "dist.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

#ifdef DIFFTX_MPI
#include <mpi.h>

static int rank = 0, ranks = 1, local_rank = 0, joined = 0;

static void abort_job(void) {
    fprintf(stderr, "rank %d of %d failed: taking the whole job down\n", rank, ranks);
    MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE);
}

// mpirun (OpenMPI, MPICH, Slurm's PMI) marks the processes it starts
static int started_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

void dist_init(int* argc, char*** argv) {
    if (!started_by_mpirun()) return;
    MPI_Init(argc, argv);
    joined = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    on_die(abort_job);
    MPI_Comm node;
    int local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_free(&node);
    if (!getenv("OMP_NUM_THREADS")) {
        int threads = omp_get_num_procs() / local;
        omp_set_num_threads(threads > 0 ? threads : 1);
    }
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) die("rank %d: cannot silence its output", rank);
}

// Waits for req, sleeping between checks: MPI's own wait spins and would take a core from rank 0
static void wait_sleeping(MPI_Request* req) {
    struct timespec pause = {0, 1000000};
    for (int done = 0; MPI_Test(req, &done, MPI_STATUS_IGNORE), !done;) nanosleep(&pause, NULL);
}

static int announce(int more) {
    MPI_Request req;
    MPI_Ibcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    wait_sleeping(&req);
    return more;
}

int dist_finish(int code) {
    if (!joined) return code;
    if (rank == 0) announce(0);
    MPI_Finalize();
    return code;
}

void dist_lead(const void* msg, size_t bytes) {
    if (ranks == 1) return;
    announce(1);
    MPI_Bcast((void*)msg, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

int dist_follow(void* msg, size_t bytes) {
    if (!announce(0)) return 0;
    MPI_Bcast(msg, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    return 1;
}

void dist_broadcast(void* buf, size_t bytes) {
    if (ranks > 1) MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

// MPI counts in int: a paper-size gradient is reduced in pieces
static void sum_in_place(void* x, size_t n, MPI_Datatype type, size_t size) {
    if (ranks == 1) return;
    for (size_t done = 0; done < n;) {
        int count = n - done < (size_t)INT_MAX ? (int)(n - done) : INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, (char*)x + done * size, count, type, MPI_SUM, MPI_COMM_WORLD);
        done += (size_t)count;
    }
}

void dist_sum_floats(float* x, size_t n) { sum_in_place(x, n, MPI_FLOAT, sizeof(float)); }
void dist_sum_doubles(double* x, size_t n) { sum_in_place(x, n, MPI_DOUBLE, sizeof(double)); }

#else  // built without MPI: always one process

static const int rank = 0, ranks = 1, local_rank = 0;

void dist_init(int* argc, char*** argv) {
    (void)argc;
    (void)argv;
    const char* size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = getenv("PMI_SIZE");
    if (size && atoi(size) > 1) die("started by mpirun with %s processes, but this difftx was built without MPI (NO_MPI=1)", size);
}

int dist_finish(int code) { return code; }
void dist_broadcast(void* buf, size_t bytes) {
    (void)buf;
    (void)bytes;
}
void dist_lead(const void* msg, size_t bytes) {
    (void)msg;
    (void)bytes;
}
int dist_follow(void* msg, size_t bytes) {
    (void)msg;
    (void)bytes;
    return 0;
}
void dist_sum_floats(float* x, size_t n) {
    (void)x;
    (void)n;
}
void dist_sum_doubles(double* x, size_t n) {
    (void)x;
    (void)n;
}
#endif

int dist_rank(void) { return rank; }
int dist_local_rank(void) { return local_rank; }
int dist_ranks(void) { return ranks; }
