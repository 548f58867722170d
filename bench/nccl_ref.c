/* nccl_ref.c: wt-bench-nccl-ref, the nccl benchmark's reference: plain
 * ncclBroadcast of TOTAL bytes in buckets of BUCKET bytes between two
 * processes (rank 0, this one, and rank 1, a child) on one GPU, with two
 * buffers and two streams round-robin as wt's packed mode, through
 * wt/nccl_seam.h and wt/cuda.h; RUNS timed runs after one warm-up; prints
 * "ref GB/s best B median M" and exits 0, or says why not. Two ranks on one
 * GPU need NCCL 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1.
 *
 *   wt-bench-nccl-ref TOTAL BUCKET [RUNS] [DEVICE]
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "wt/cuda.h"
#include "wt/memory.h"
#include "backends/nccl/nccl_shared.h"

static int64_t ms_from_now(int64_t ms) {
  return (int64_t)(bench_now_s() * 1000) + ms;
}

/* One rank's whole run; rank 0 prints. */
static wt_status *run(int rank, const unsigned char *id, size_t total,
                      size_t bucket, int runs, int dev) {
  wt_status *st = NULL;
  const wt_cuda_api *cuda = NULL;
  const wt_nccl_api *nccl = NULL;
  void *comm = NULL, *streams[2] = {NULL, NULL};
  wt_mem_region bufs[2] = {{0}, {0}}, one = {0};
  double *t = calloc((size_t)runs, sizeof(*t));
  wt_device d = {.type = WT_DEVICE_CUDA, .index = dev};
  WT_CHECK(wt_cuda_api_get(&cuda));
  WT_CHECK(wt_nccl_api_get(&nccl));
  WT_CHECK(wt_cuda_bind(dev));
  for (int i = 0; i < 2; i++) {
    WT_CHECK(cuda->stream_create(dev, &streams[i]));
    WT_CHECK(wt_mem_alloc(WT_MEM_DEVICE, d, bucket, "ref buffer", &bufs[i]));
  }
  WT_CHECK(wt_mem_alloc(WT_MEM_DEVICE, d, sizeof(float), "warm-up", &one));
  WT_CHECK(nccl->comm_init(2, id, rank, &comm));
  WT_CHECK(
      wt_nccl_wait(nccl, cuda, &comm, NULL, ms_from_now(60000), NULL, "init"));
  WT_CHECK(nccl->all_reduce_f32(one.base, one.base, 1, comm, streams[0]));
  WT_CHECK(wt_nccl_wait(nccl, cuda, &comm, streams[0], ms_from_now(60000), NULL,
                        "warm-up"));
  size_t nb = (total + bucket - 1) / bucket;
  for (int r = -1; r < runs; r++) {
    double t0 = bench_now_s();
    for (size_t b = 0; b < nb; b++) {
      size_t len = b + 1 < nb ? bucket : total - b * bucket;
      if (b >= 2)
        WT_CHECK(wt_nccl_wait(nccl, cuda, &comm, streams[b % 2],
                              ms_from_now(60000), NULL, "bucket"));
      WT_CHECK(nccl->broadcast(bufs[b % 2].base, bufs[b % 2].base, len, 0, comm,
                               streams[b % 2]));
    }
    for (int i = 0; i < 2; i++)
      WT_CHECK(wt_nccl_wait(nccl, cuda, &comm, streams[i], ms_from_now(60000),
                            NULL, "last buckets"));
    if (r >= 0) t[r] = bench_now_s() - t0;
  }
  if (rank == 0) {
    qsort(t, (size_t)runs, sizeof(*t), bench_cmp_double);
    printf(
        "ref GB/s best %.2f median %.2f (%s, %zu buckets of %zu bytes, "
        "%d runs)\n",
        (double)total / t[0] / 1e9, (double)total / t[runs / 2] / 1e9,
        nccl->name, nb, bucket, runs);
  }
out:
  if (comm != NULL) nccl->comm_destroy(comm);
  for (int i = 0; i < 2; i++) {
    if (bufs[i].len) wt_mem_free(&bufs[i]);
    if (streams[i] != NULL) cuda->stream_destroy(streams[i]);
  }
  if (one.len) wt_mem_free(&one);
  free(t);
  return st;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: wt-bench-nccl-ref TOTAL BUCKET [RUNS] [DEVICE]\n");
    return 2;
  }
  size_t total = strtoull(argv[1], NULL, 10);
  size_t bucket = strtoull(argv[2], NULL, 10);
  int runs = argc > 3 ? atoi(argv[3]) : 5;
  int dev = argc > 4 ? atoi(argv[4]) : 0;
  if (total == 0 || bucket == 0 || runs < 1 || runs > 1000) {
    fprintf(stderr, "wt-bench-nccl-ref: bad arguments\n");
    return 2;
  }
  /* Fork before anything touches CUDA or NCCL; the id goes through a pipe. */
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  wt_status *st = NULL;
  if (child == 0) {
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof(id)) {
      ssize_t n = read(fds[0], id + got, sizeof(id) - got);
      if (n <= 0) _exit(1);
      got += (size_t)n;
    }
    st = run(1, id, total, bucket, runs, dev);
    if (st != NULL)
      fprintf(stderr, "wt-bench-nccl-ref (rank 1): %s\n",
              wt_status_message(st));
    _exit(st == NULL ? 0 : 1);
  }
  close(fds[0]);
  const wt_nccl_api *nccl = NULL;
  st = wt_nccl_api_get(&nccl);
  if (st == NULL) st = nccl->get_unique_id(id);
  if (st == NULL && write(fds[1], id, sizeof(id)) != (ssize_t)sizeof(id))
    st = wt_status_new(WT_INTERNAL, "writing the unique id to rank 1");
  close(fds[1]);
  if (st == NULL) st = run(0, id, total, bucket, runs, dev);
  if (st != NULL) {
    fprintf(stderr, "wt-bench-nccl-ref: %s\n", wt_status_message(st));
    wt_status_free(st);
    kill(child, SIGKILL);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return st == NULL && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
