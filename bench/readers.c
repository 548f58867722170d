/* readers.c: wt-bench-readers, the inference fleet's side of
 * bench/readers_bench.sh. N readers, each on its own channel (its own
 * connection), call GetWeightVersion and then ChecksumWeights of one small
 * parameter, back to back, until SIGTERM or SIGINT; then it prints one
 * line:
 *
 *   readers N calls C errors E p50_ms X p99_ms Y max_ms Z
 *
 * and, per error code seen, "error CODE COUNT: first message". Latencies
 * are per call, in milliseconds. Not a test.
 *
 *   wt-bench-readers --server HOST:PORT [--readers N] [--param NAME]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/pb.h"
#include "wt/rpc.h"
#include "wt/signals.h"
#include "wt/v1/wt.pb-c.h"

#define SVC "/wt.v1.WeightTransfer/"
#define CALL_MS 10000
#define MAX_READERS 4096
#define NCODES 17 /* wt_code 0..16 */

typedef struct reader {
  pthread_t thread;
  wt_rpc_channel *ch;
  const char *param;
  double *lat; /* ms, grown as needed */
  size_t n, cap;
  uint64_t errors[NCODES];
  char first[NCODES][256];
} reader;

static atomic_bool stop;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void record(reader *r, double t0, wt_status *st) {
  double ms = now_ms() - t0;
  if (st != NULL) {
    int code = (int)wt_status_code(st);
    if (code < 0 || code >= NCODES) code = WT_UNKNOWN;
    if (r->errors[code]++ == 0)
      snprintf(r->first[code], sizeof(r->first[code]), "%s",
               wt_status_message(st));
    wt_status_free(st);
    return;
  }
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 4096;
    double *p = realloc(r->lat, cap * sizeof(*p));
    if (p == NULL) return;
    r->lat = p;
    r->cap = cap;
  }
  r->lat[r->n++] = ms;
}

static void *reader_main(void *arg) {
  reader *r = arg;
  Wt__V1__GetWeightVersionRequest vreq =
      WT__V1__GET_WEIGHT_VERSION_REQUEST__INIT;
  Wt__V1__ChecksumWeightsRequest creq = WT__V1__CHECKSUM_WEIGHTS_REQUEST__INIT;
  char *names[1] = {(char *)r->param};
  creq.n_names = 1;
  creq.names = names;
  creq.algorithm = WT__V1__CHECKSUM_ALGORITHM__CHECKSUM_ALGORITHM_XXH3_64;
  while (!atomic_load(&stop)) {
    ProtobufCMessage *resp = NULL;
    double t0 = now_ms();
    wt_status *st =
        wt_rpc_unary(r->ch, SVC "GetWeightVersion", &vreq.base,
                     &wt__v1__weight_version__descriptor, CALL_MS, &resp);
    wt_pb_free(resp);
    record(r, t0, st);
    if (atomic_load(&stop)) break;
    resp = NULL;
    t0 = now_ms();
    st = wt_rpc_unary(r->ch, SVC "ChecksumWeights", &creq.base,
                      &wt__v1__checksum_weights_response__descriptor, CALL_MS,
                      &resp);
    wt_pb_free(resp);
    record(r, t0, st);
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int usage(void) {
  fprintf(stderr,
          "usage: wt-bench-readers --server HOST:PORT [--readers N] "
          "[--param NAME]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *target = NULL, *param = "model.norm.weight";
  long nreaders = 100;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--server") == 0 && i + 1 < argc) {
      target = argv[++i];
    } else if (strcmp(argv[i], "--param") == 0 && i + 1 < argc) {
      param = argv[++i];
    } else if (strcmp(argv[i], "--readers") == 0 && i + 1 < argc) {
      char *end = NULL;
      errno = 0;
      nreaders = strtol(argv[++i], &end, 10);
      if (errno || *end != '\0' || nreaders < 1 || nreaders > MAX_READERS) {
        fprintf(stderr, "wt-bench-readers: --readers '%s' is not 1 to %d\n",
                argv[i], MAX_READERS);
        return 2;
      }
    } else {
      return usage();
    }
  }
  if (target == NULL) return usage();
  wt_status *st = wt_signal_block_termination();
  if (st != NULL) {
    fprintf(stderr, "wt-bench-readers: %s\n", wt_status_message(st));
    wt_status_free(st);
    return 1;
  }
  reader *rs = calloc((size_t)nreaders, sizeof(*rs));
  if (rs == NULL) return 1;
  wt_rpc_channel_options o = {.default_deadline_ms = CALL_MS};
  for (long i = 0; i < nreaders; i++) {
    rs[i].param = param;
    st = wt_rpc_channel_new(target, &o, &rs[i].ch);
    if (st == NULL && pthread_create(&rs[i].thread, NULL, reader_main, &rs[i]))
      st = wt_status_new(WT_RESOURCE_EXHAUSTED, "reader %ld: no thread", i);
    if (st != NULL) {
      fprintf(stderr, "wt-bench-readers: %s\n", wt_status_message(st));
      return 1;
    }
  }
  printf("readers started: %ld\n", nreaders);
  fflush(stdout);
  wt_signal_wait(-1);
  atomic_store(&stop, true);
  size_t total = 0;
  uint64_t errors[NCODES] = {0}, nerr = 0;
  const char *first[NCODES] = {0};
  for (long i = 0; i < nreaders; i++) {
    pthread_join(rs[i].thread, NULL);
    total += rs[i].n;
  }
  double *all = malloc((total ? total : 1) * sizeof(*all));
  size_t k = 0;
  for (long i = 0; i < nreaders; i++) {
    memcpy(all + k, rs[i].lat, rs[i].n * sizeof(*all));
    k += rs[i].n;
    for (int c = 0; c < NCODES; c++) {
      errors[c] += rs[i].errors[c];
      nerr += rs[i].errors[c];
      if (rs[i].errors[c] && first[c] == NULL) first[c] = rs[i].first[c];
    }
  }
  qsort(all, total, sizeof(*all), cmp_double);
  double p50 = total ? all[total / 2] : 0;
  double p99 = total ? all[(size_t)((double)(total - 1) * 0.99)] : 0;
  double max = total ? all[total - 1] : 0;
  printf(
      "readers %ld calls %zu errors %llu p50_ms %.2f p99_ms %.2f max_ms %.2f\n",
      nreaders, total + (size_t)nerr, (unsigned long long)nerr, p50, p99, max);
  for (int c = 0; c < NCODES; c++)
    if (errors[c])
      printf("error %s %llu: %s\n", wt_code_name((wt_code)c),
             (unsigned long long)errors[c], first[c]);
  for (long i = 0; i < nreaders; i++) {
    wt_rpc_channel_destroy(rs[i].ch);
    free(rs[i].lat);
  }
  free(all);
  free(rs);
  return 0;
}
