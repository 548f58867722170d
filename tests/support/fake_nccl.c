/* fake_nccl.c: NCCL communicators emulated between threads (fake_nccl.h). */

#include "fake_nccl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"

#define MAX_RANKS 64

typedef struct fworld fworld;

typedef struct fcomm {
  fworld *w;
  int rank;
  uint64_t posted; /* collectives this rank has called */
} fcomm;

/* One collective, by its order, until every rank has posted it. */
typedef struct fop {
  uint64_t seq;
  bool all_reduce;
  int root;
  size_t bytes;
  int nposted;
  const void *send[MAX_RANKS];
  void *recv[MAX_RANKS];
  void *stream[MAX_RANKS];
  bool has[MAX_RANKS];
  struct fop *next;
} fop;

struct fworld {
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  int nranks;
  int joined, alive;
  bool broken; /* a rank aborted */
  fcomm *ranks[MAX_RANKS];
  fop *ops;
  fworld *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fworld *worlds;
static fake_nccl_stats stats;
static uint64_t next_id;

static int version_code;

void fake_nccl_set_version(int code) {
  version_code = code;
}

static int f_version(void) {
  return version_code;
}

static wt_status *f_unique_id(unsigned char id[WT_NCCL_UNIQUE_ID_BYTES]) {
  pthread_mutex_lock(&mu);
  uint64_t n = ++next_id;
  pthread_mutex_unlock(&mu);
  memset(id, 0, WT_NCCL_UNIQUE_ID_BYTES);
  memcpy(id, "fakenccl", 8);
  memcpy(id + 8, &n, sizeof(n));
  return NULL;
}

static wt_status *f_comm_init(int nranks,
                              const unsigned char id[WT_NCCL_UNIQUE_ID_BYTES],
                              int rank, void **comm) {
  *comm = NULL;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "fake ncclCommInitRankConfig: rank %d of %d", rank,
                         nranks);
  pthread_mutex_lock(&mu);
  fworld *w = worlds;
  while (w != NULL && memcmp(w->id, id, WT_NCCL_UNIQUE_ID_BYTES) != 0)
    w = w->next;
  wt_status *st = NULL;
  if (w != NULL && (w->nranks != nranks || w->ranks[rank] != NULL ||
                    w->joined == w->nranks)) {
    st = wt_status_new(WT_INVALID_ARGUMENT,
                       "fake ncclCommInitRankConfig: rank %d of %d: %s", rank,
                       nranks,
                       w->nranks != nranks ? "another rank said another size"
                                           : "that rank has joined already");
    goto out;
  }
  if (w == NULL) {
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
      st = wt_status_new(WT_RESOURCE_EXHAUSTED, "fake nccl: out of memory");
      goto out;
    }
    memcpy(w->id, id, WT_NCCL_UNIQUE_ID_BYTES);
    w->nranks = nranks;
    w->next = worlds;
    worlds = w;
  }
  fcomm *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "fake nccl: out of memory");
    goto out;
  }
  c->w = w;
  c->rank = rank;
  w->ranks[rank] = c;
  w->joined++;
  w->alive++;
  stats.inits++;
  stats.comms_now++;
  *comm = c;
out:
  pthread_mutex_unlock(&mu);
  return st;
}

static wt_status *f_comm_state(void *comm, int *pending) {
  fcomm *c = comm;
  pthread_mutex_lock(&mu);
  bool broken = c->w->broken;
  *pending = !broken && c->w->joined < c->w->nranks;
  pthread_mutex_unlock(&mu);
  if (broken)
    return wt_status_new(WT_UNAVAILABLE,
                         "fake ncclCommGetAsyncError: remote process exited "
                         "or there was a network error (ncclRemoteError)");
  return NULL;
}

/* Removes c from its world (its own queued work ended), freeing the world
 * with its last rank. */
static void leave_locked(fcomm *c, bool abort) {
  fworld *w = c->w;
  for (fop **p = &w->ops; *p;) {
    fop *o = *p;
    if (o->has[c->rank]) {
      fake_cuda_stream_busy(o->stream[c->rank], -1);
      o->has[c->rank] = false;
      o->nposted--;
    }
    if (o->nposted == 0) {
      *p = o->next;
      free(o);
    } else {
      p = &o->next;
    }
  }
  w->ranks[c->rank] = NULL;
  /* A rank gone from a working communicator breaks it for the others; one
   * that gives up during the init leaves them waiting (for rank 0, as
   * NCCL's bootstrap does) until their own deadlines. */
  if (w->joined < w->nranks)
    w->joined--;
  else if (abort)
    w->broken = true;
  stats.comms_now--;
  free(c);
  if (--w->alive > 0) return;
  for (fworld **p = &worlds; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  while (w->ops) {
    fop *o = w->ops;
    w->ops = o->next;
    free(o);
  }
  free(w);
}

static void f_comm_abort(void *comm) {
  if (comm == NULL) return;
  pthread_mutex_lock(&mu);
  stats.aborts++;
  leave_locked(comm, true);
  pthread_mutex_unlock(&mu);
}

static void f_comm_destroy(void *comm) {
  if (comm == NULL) return;
  pthread_mutex_lock(&mu);
  stats.destroys++;
  leave_locked(comm, false);
  pthread_mutex_unlock(&mu);
}

/* Runs op o, which every rank has posted. */
static wt_status *run_locked(fworld *w, fop *o) {
  if (o->all_reduce) {
    size_t n = o->bytes / sizeof(float);
    float *sum = calloc(n ? n : 1, sizeof(float));
    if (sum == NULL)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake nccl: out of memory");
    for (int r = 0; r < w->nranks; r++) {
      const float *s = fake_cuda_mirror(o->send[r], o->bytes);
      for (size_t i = 0; s && i < n; i++) sum[i] += s[i];
    }
    for (int r = 0; r < w->nranks; r++) {
      void *d = fake_cuda_mirror(o->recv[r], o->bytes);
      if (d) memcpy(d, sum, o->bytes);
    }
    free(sum);
    stats.all_reduces += (uint64_t)w->nranks;
  } else {
    const void *s = fake_cuda_mirror(o->send[o->root], o->bytes);
    for (int r = 0; r < w->nranks; r++) {
      void *d = fake_cuda_mirror(o->recv[r], o->bytes);
      if (s && d && d != s) memmove(d, s, o->bytes);
    }
    stats.broadcasts += (uint64_t)w->nranks;
    stats.broadcast_bytes += (uint64_t)w->nranks * o->bytes;
  }
  for (int r = 0; r < w->nranks; r++) fake_cuda_stream_busy(o->stream[r], -1);
  return NULL;
}

static wt_status *post(fcomm *c, bool all_reduce, const void *send, void *recv,
                       size_t bytes, int root, void *stream) {
  if (bytes > 0 && ((send != NULL && !fake_cuda_mirror(send, bytes)) ||
                    !fake_cuda_mirror(recv, bytes)))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "fake nccl: rank %d: a buffer of %zu bytes is not "
                         "device memory",
                         c->rank, bytes);
  pthread_mutex_lock(&mu);
  fworld *w = c->w;
  wt_status *st = NULL;
  uint64_t seq = c->posted++;
  fop *o = w->ops, **tail = &w->ops;
  while (o != NULL && o->seq != seq) {
    tail = &o->next;
    o = o->next;
  }
  if (o == NULL) {
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
      st = wt_status_new(WT_RESOURCE_EXHAUSTED, "fake nccl: out of memory");
      goto out;
    }
    o->seq = seq;
    o->all_reduce = all_reduce;
    o->root = root;
    o->bytes = bytes;
    *tail = o;
  } else if (o->all_reduce != all_reduce || o->bytes != bytes ||
             o->root != root) {
    /* NCCL would hang or corrupt: say so at once. */
    st = wt_status_new(WT_INTERNAL,
                       "fake nccl: rank %d's collective %" PRIu64
                       " (%s, %zu bytes, root %d) does not match the others' "
                       "(%s, %zu bytes, root %d)",
                       c->rank, seq, all_reduce ? "all-reduce" : "broadcast",
                       bytes, root, o->all_reduce ? "all-reduce" : "broadcast",
                       o->bytes, o->root);
    goto out;
  }
  o->send[c->rank] = send ? send : recv;
  o->recv[c->rank] = recv;
  o->stream[c->rank] = stream;
  o->has[c->rank] = true;
  o->nposted++;
  fake_cuda_stream_busy(stream, +1);
  if (o->nposted == w->nranks && !w->broken) {
    st = run_locked(w, o);
    for (fop **p = &w->ops; *p; p = &(*p)->next)
      if (*p == o) {
        *p = o->next;
        break;
      }
    free(o);
  }
out:
  pthread_mutex_unlock(&mu);
  return st;
}

static wt_status *f_broadcast(const void *send, void *recv, size_t bytes,
                              int root, void *comm, void *stream) {
  fcomm *c = comm;
  return post(c, false, c->rank == root ? send : NULL, recv, bytes, root,
              stream);
}

static wt_status *f_all_reduce(const void *send, void *recv, size_t count,
                               void *comm, void *stream) {
  return post(comm, true, send, recv, count * sizeof(float), 0, stream);
}

static const wt_nccl_api fake = {
    .version = WT_NCCL_API_VERSION,
    .name = "fake",
    .version_code = f_version,
    .get_unique_id = f_unique_id,
    .comm_init = f_comm_init,
    .comm_state = f_comm_state,
    .comm_abort = f_comm_abort,
    .comm_destroy = f_comm_destroy,
    .broadcast = f_broadcast,
    .all_reduce_f32 = f_all_reduce,
};

void fake_nccl_install(void) {
  pthread_mutex_lock(&mu);
  memset(&stats, 0, sizeof(stats));
  pthread_mutex_unlock(&mu);
  wt_nccl_api_override(&fake);
}

void fake_nccl_uninstall(void) {
  wt_nccl_api_override(NULL);
}

fake_nccl_stats fake_nccl_get_stats(void) {
  pthread_mutex_lock(&mu);
  fake_nccl_stats s = stats;
  pthread_mutex_unlock(&mu);
  return s;
}
