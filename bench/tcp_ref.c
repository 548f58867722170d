/* tcp_ref.c: wt-bench-tcp-ref, the grpc benchmark's socket reference: a
 * plain TCP stream of BYTES between two processes on loopback, written in
 * CHUNK-byte writes from one buffer and read by the other into a buffer of
 * BYTES (as wt-server lands chunks in its staging buffers), acknowledged
 * with one byte at the end; RUNS timed runs after one warm-up, each over a
 * connection made before the clock starts (a trainer that stays up).
 * Prints "ref GB/s best B median M" and exits 0, or says why not.
 *
 *   wt-bench-tcp-ref BYTES [CHUNK] [RUNS]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
static int die(const char *what) {
  perror(what);
  return 1;
}

/* The receiver: every run, BYTES into its buffer, then one byte back. */
static int receive(int lfd, size_t bytes, int runs) {
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) return die("accept");
  unsigned char *dst = malloc(bytes);
  if (dst == NULL) return 1;
  memset(dst, 0, bytes); /* faulted in before the clock, as a store is */
  for (int r = 0; r <= runs; r++) {
    size_t got = 0;
    while (got < bytes) {
      ssize_t n = read(fd, dst + got, bytes - got);
      if (n <= 0) return die("read");
      got += (size_t)n;
    }
    if (write(fd, "k", 1) != 1) return die("write ack");
  }
  free(dst);
  close(fd);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: wt-bench-tcp-ref BYTES [CHUNK] [RUNS]\n");
    return 2;
  }
  size_t bytes = strtoull(argv[1], NULL, 10);
  size_t chunk = argc > 2 ? strtoull(argv[2], NULL, 10) : 1 << 20;
  int runs = argc > 3 ? atoi(argv[3]) : 5;
  if (bytes == 0 || chunk == 0 || runs < 1 || runs > 1000) {
    fprintf(stderr, "wt-bench-tcp-ref: bad arguments\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(lfd, 1) != 0 || getsockname(lfd, (struct sockaddr *)&a, &alen))
    return die("listen");
  pid_t child = fork();
  if (child < 0) return die("fork");
  if (child == 0) _exit(receive(lfd, bytes, runs));
  close(lfd);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
    return die("connect");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  unsigned char *src = malloc(bytes);
  double *t = calloc((size_t)runs, sizeof(*t));
  if (src == NULL || t == NULL) return 1;
  for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 131 + 7);
  for (int r = -1; r < runs; r++) {
    double t0 = bench_now_s();
    for (size_t off = 0; off < bytes;) {
      size_t len = bytes - off < chunk ? bytes - off : chunk;
      ssize_t n = write(fd, src + off, len);
      if (n <= 0) return die("write");
      off += (size_t)n;
    }
    char k;
    if (read(fd, &k, 1) != 1) return die("read ack");
    if (r >= 0) t[r] = bench_now_s() - t0;
  }
  close(fd);
  int status = 0;
  waitpid(child, &status, 0);
  qsort(t, (size_t)runs, sizeof(*t), bench_cmp_double);
  printf(
      "ref GB/s best %.2f median %.2f (TCP loopback, %zu-byte writes, %d "
      "runs)\n",
      (double)bytes / t[0] / 1e9, (double)bytes / t[runs / 2] / 1e9, chunk,
      runs);
  free(src);
  free(t);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
