/* MPICH hello: gorun's PMI-1 server must serve an unmodified MPICH program
 * (MPI_Init's PMI exchange, a collective, MPI_Finalize). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0, len;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(name, &len);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("hello from rank %d of %d on %s, sum of ranks %d\n", rank, size, name, sum);
    MPI_Finalize();
    return 0;
}
