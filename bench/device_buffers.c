/* bench/device_buffers.c: MPI on GPU device buffers, as a job sees it (issue 24, item 6).
 *
 * Built on the GPU machine by bench/gpu_node.sh with the cluster's own mpicc and the CUDA
 * runtime, run with 2 (or more) ranks through `mpictl run`; every buffer is cudaMalloc'd, so
 * what is measured is the path the MPI library gives device memory (pml ob1 or ucx; OpenMPI's
 * own collectives or UCC's), never a host copy made here.
 *
 * For each size (powers of two from 8 bytes to MAX_BYTES, default 256 MiB) rank 0 prints one
 * JSON line per operation:
 *   {"op": "allreduce", "bytes": B, "iters": k, "time_us": t, "algbw_GBps": a,
 *    "busbw_GBps": b, "ok": true, "ranks": n}
 *      MPI_Allreduce, float32 sum, every rank's whole result checked on the host;
 *      t is the slowest rank's mean time of one call; busbw = algbw * 2(n-1)/n.
 *   {"op": "sendrecv", "bytes": B, "iters": k, "time_us": t, "bw_GBps": w, "ok": true}
 *      rank 0 MPI_Send's k messages to rank 1, which MPI_Recv's them and answers once;
 *      t is the time of one message (k messages then the answer, over k), checked on rank 1.
 * and first a line naming what ran: {"devices": ..., "pml": ..., "coll_ucc_enable": ...}
 * (the OMPI_MCA_* values mpirun passed, "" where it passed none).
 * Exit status 0 when every result was correct, 1 otherwise, 2 on a CUDA error.
 *
 * Build: mpicc -O2 -o device_buffers device_buffers.c -I$CUDA_HOME/include \
 *          -L$CUDA_HOME/lib64 -lcudart -Wl,-rpath,$CUDA_HOME/lib64
 */
#include <cuda_runtime.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CUDA(call)                                                                            \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(err_));            \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                           \
    }                                                                                         \
  } while (0)

/* Iterations for a size: about 1 GiB moved per size, at least 5, at most 1000. */
static int iterations(size_t bytes) {
  size_t n = ((size_t)1 << 30) / bytes;
  return n < 5 ? 5 : n > 1000 ? 1000 : (int)n;
}

static const char *env_or_empty(const char *name) {
  const char *v = getenv(name);
  return v ? v : "";
}

static void fill(float *host, size_t count, float value) {
  for (size_t i = 0; i < count; i++) host[i] = value;
}

/* Every element of the device buffer equals want (read back into host). */
static int all_equal(const float *dev, float *host, size_t count, float want) {
  CUDA(cudaMemcpy(host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++)
    if (host[i] != want) return 0;
  return 1;
}

static int allreduce(float *send, float *recv, float *host, size_t bytes) {
  size_t count = bytes / sizeof(float);
  fill(host, count, (float)(rank + 1));
  CUDA(cudaMemcpy(send, host, bytes, cudaMemcpyHostToDevice));
  CUDA(cudaMemset(recv, 0, bytes));
  MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
  int ok = all_equal(recv, host, count, (float)size * (size + 1) / 2);
  int iters = iterations(bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < iters; i++)
    MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  CUDA(cudaDeviceSynchronize());
  double mine = (MPI_Wtime() - start) / iters, slowest;
  MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  int all_ok;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) {
    double algbw = bytes / slowest / 1e9;
    printf("{\"op\": \"allreduce\", \"bytes\": %zu, \"iters\": %d, \"time_us\": %.2f, "
           "\"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f, \"ok\": %s, \"ranks\": %d}\n",
           bytes, iters, slowest * 1e6, algbw, algbw * 2 * (size - 1) / size,
           all_ok ? "true" : "false", size);
    fflush(stdout);
  }
  return all_ok;
}

static int sendrecv(float *buf, float *host, size_t bytes) {
  size_t count = bytes / sizeof(float);
  int iters = iterations(bytes), ok = 1;
  char ack = 0;
  if (rank == 0) {
    fill(host, count, 7.0f);
    CUDA(cudaMemcpy(buf, host, bytes, cudaMemcpyHostToDevice));
  } else {
    CUDA(cudaMemset(buf, 0, bytes)); /* what arrives is checked after the timed messages */
  }
  /* a warm-up message, received before the clock starts, then the timed ones */
  if (rank == 0) MPI_Send(buf, (int)count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
  else if (rank == 1) MPI_Recv(buf, (int)count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < iters; i++) {
    if (rank == 0) MPI_Send(buf, (int)count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
    else if (rank == 1) MPI_Recv(buf, (int)count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  if (rank == 0) MPI_Recv(&ack, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  else if (rank == 1) MPI_Send(&ack, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
  double per = (MPI_Wtime() - start) / iters;
  if (rank == 1) ok = all_equal(buf, host, count, 7.0f);
  int all_ok;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("{\"op\": \"sendrecv\", \"bytes\": %zu, \"iters\": %d, \"time_us\": %.2f, "
           "\"bw_GBps\": %.3f, \"ok\": %s}\n",
           bytes, iters, per * 1e6, bytes / per / 1e9, all_ok ? "true" : "false");
    fflush(stdout);
  }
  return all_ok;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)256 << 20;
  if (size < 2 || max_bytes < 8 || max_bytes / sizeof(float) > INT_MAX) {
    if (rank == 0)
      fprintf(stderr, "device_buffers: needs 2 or more ranks and 8 <= MAX_BYTES < 8 GiB\n");
    MPI_Finalize();
    return 2;
  }
  int devices = 0;
  CUDA(cudaGetDeviceCount(&devices));
  CUDA(cudaSetDevice(rank % devices)); /* ranks share the GPUs there are, round robin */
  struct cudaDeviceProp prop;
  CUDA(cudaGetDeviceProperties(&prop, rank % devices));
  if (rank == 0) {
    printf("{\"devices\": %d, \"device\": \"%s\", \"ranks\": %d, \"pml\": \"%s\", "
           "\"coll_ucc_enable\": \"%s\"}\n",
           devices, prop.name, size, env_or_empty("OMPI_MCA_pml"),
           env_or_empty("OMPI_MCA_coll_ucc_enable"));
    fflush(stdout);
  }
  float *a, *b, *host = malloc(max_bytes);
  if (!host) MPI_Abort(MPI_COMM_WORLD, 2);
  CUDA(cudaMalloc((void **)&a, max_bytes));
  CUDA(cudaMalloc((void **)&b, max_bytes));
  int ok = 1;
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) ok &= allreduce(a, b, host, bytes);
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) ok &= sendrecv(a, host, bytes);
  CUDA(cudaFree(a));
  CUDA(cudaFree(b));
  free(host);
  MPI_Finalize();
  return ok ? 0 : 1;
}
