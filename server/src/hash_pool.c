/* hash_pool.c: the threads that hash for readers (ChecksumWeights), below
 * every other thread of the server when the CPU is short (see
 * server_state.h). A handler hands over one part at a time and waits:
 * parts of different callers interleave in arrival order, and the reader
 * calls that hash nothing (GetServerInfo, GetWeightVersion, ...) keep
 * their handler threads' normal priority. wt_srv_checksum, below, is
 * ChecksumWeights' pass over the stores that hands them the parts. */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "server_state.h"
#include "wt/checksum.h"
#include "wt/log.h"
#include "wt/lock.h"

typedef struct hash_job {
  struct hash_job *next;
  void (*fn)(void *arg);
  void *arg;
  bool done;
} hash_job;

struct wt_hash_pool {
  wt_mutex mu;
  pthread_cond_t work, done;
  hash_job *head, *tail;
  bool quit;
  pthread_t *threads;
  unsigned n;
  int nice;
};

static void *hasher_main(void *arg) {
  wt_hash_pool *p = arg;
  if (p->nice > 0 &&
      setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice) != 0)
    WT_LOGD("server", "hash threads: cannot lower their priority: %s",
            strerror(errno));
  wt_mutex_lock(&p->mu);
  for (;;) {
    while (p->head == NULL && !p->quit) wt_cond_wait(&p->work, &p->mu);
    if (p->head == NULL) break;
    hash_job *j = p->head;
    p->head = j->next;
    if (p->head == NULL) p->tail = NULL;
    wt_mutex_unlock(&p->mu);
    j->fn(j->arg);
    wt_mutex_lock(&p->mu);
    j->done = true;
    pthread_cond_broadcast(&p->done);
  }
  wt_mutex_unlock(&p->mu);
  return NULL;
}

wt_status *wt_hash_pool_new(unsigned threads, int nice, wt_hash_pool **out) {
  *out = NULL;
  wt_hash_pool *p = calloc(1, sizeof(*p));
  if (p == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  p->threads = calloc(threads ? threads : 1, sizeof(*p->threads));
  if (p->threads == NULL) {
    free(p);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  wt_mutex_init(&p->mu, WT_LOCK_HASH_POOL, 0, "hash_pool.mu");
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->nice = nice;
  for (unsigned i = 0; i < (threads ? threads : 1); i++) {
    int rc = pthread_create(&p->threads[i], NULL, hasher_main, p);
    if (rc != 0) {
      wt_hash_pool_free(p);
      return wt_status_from_errno(rc, "server: starting a hash thread");
    }
    p->n++;
  }
  *out = p;
  return NULL;
}

void wt_hash_pool_free(wt_hash_pool *p) {
  if (p == NULL) return;
  wt_mutex_lock(&p->mu);
  p->quit = true;
  pthread_cond_broadcast(&p->work);
  wt_mutex_unlock(&p->mu);
  for (unsigned i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
  wt_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  free(p->threads);
  free(p);
}

void wt_hash_pool_run(wt_hash_pool *p, void (*fn)(void *), void *arg) {
  if (p == NULL) {
    fn(arg);
    return;
  }
  hash_job j = {.fn = fn, .arg = arg};
  wt_mutex_lock(&p->mu);
  /* The job lives on this stack while it is queued: a pool thread takes it
   * off the queue before it marks it done, which this call waits for. */
  if (p->tail)
    p->tail->next = &j;
  else
    p->head = &j; /* cppcheck-suppress autoVariables */
  p->tail = &j;   /* cppcheck-suppress autoVariables */
  pthread_cond_signal(&p->work);
  while (!j.done) wt_cond_wait(&p->done, &p->mu);
  wt_mutex_unlock(&p->mu);
}

/* --- ChecksumWeights: a pass over the stores ---------------------------- */

static bool stopping(wt_server *srv) {
  wt_mutex_lock(&srv->round.mu);
  bool stop = srv->round.stopping;
  wt_mutex_unlock(&srv->round.mu);
  return stop;
}

static wt_status *version_changed(size_t done, size_t total) {
  return wt_status_new(WT_ABORTED,
                       "ChecksumWeights: version changed; retry (a commit "
                       "landed after %zu of %zu digests)",
                       done, total);
}

/* The fewest names ChecksumWeights accepts however small the model. */
#define WT_CHECKSUM_MIN_NAME_CAP 1024

/* A part of a tensor hashed under one hold of the read lock. */
#define CHECKSUM_PART (1u << 20)

/* One part's hashing, on a low-priority thread (hash_pool.c). */
typedef struct hash_part_job {
  wt_param_store *s;
  size_t i;
  uint64_t off;
  size_t len;
  wt_hasher *h;
  wt_status *st;
} hash_part_job;

static void hash_part_run(void *arg) {
  hash_part_job *j = arg;
  j->st = wt_param_store_hash_part(j->s, j->i, j->off, j->len, j->h);
}

/* A reader's part, copied out of the store: hashed without its lock. */
typedef struct hash_copy_job {
  const uint8_t *buf;
  size_t len;
  wt_hasher *h;
} hash_copy_job;

static void hash_copy_run(void *arg) {
  hash_copy_job *j = arg;
  wt_hasher_update(j->h, j->buf, j->len);
}

typedef struct halt_arg {
  wt_server *srv;
  wt_rpc_call *call;
} halt_arg;

static bool halted(void *arg) {
  halt_arg *a = arg;
  return wt_rpc_call_cancelled(a->call) || stopping(a->srv);
}

wt_status *wt_srv_checksum(wt_server *srv, wt_rpc_call *call, wt_hash_alg alg,
                           char *const *names, size_t n_names, bool all_workers,
                           wt_srv_digest **out, size_t *nout) {
  wt_reader_budget *budget = NULL;
  wt_hasher *h = NULL;
  wt_status *st = NULL;
  bool trainer = wt_rpc_call_trainer(call);
  wt_param_store *s0 = wt_worker_store(srv->workers[0]);
  uint8_t *copy = NULL; /* a reader's part, out of a host store */
  size_t *idx = NULL;
  unsigned char *seen = NULL;
  uint64_t *commits = NULL;
  wt_srv_digest *d = NULL;
  *out = NULL;
  *nout = 0;
  size_t count = wt_param_store_count(s0);
  /* Limits first, before a name is looked up or a byte hashed: a request
   * can have no use for more names than twice the model's tensors. */
  size_t max_names = 2 * count > WT_CHECKSUM_MIN_NAME_CAP
                         ? 2 * count
                         : WT_CHECKSUM_MIN_NAME_CAP;
  if (n_names > max_names)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "ChecksumWeights: %zu names; at most %zu (twice the model's %zu "
            "tensors, at least %d)",
            n_names, max_names, count, WT_CHECKSUM_MIN_NAME_CAP);
  uint32_t nw = all_workers ? srv->nworkers : 1;
  idx = calloc(count ? count : 1, sizeof(*idx));
  seen = calloc(count ? count : 1, 1);
  if (idx == NULL || seen == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  /* Each tensor once, in the order first asked for. */
  size_t n = 0;
  for (size_t k = 0; k < (n_names ? n_names : count); k++) {
    size_t i = k;
    if (n_names) WT_CHECK(wt_param_store_find(s0, names[k], &i));
    if (seen[i]) continue;
    seen[i] = 1;
    idx[n++] = i;
  }
  size_t total = n * nw;
  /* What the reply will weigh (a name, a digest and a worker per entry, with
   * protobuf's framing): refused now rather than built and then not sent. */
  uint64_t reply = 16;
  for (size_t k = 0; k < n; k++)
    reply += (strlen(wt_param_store_meta(s0, idx[k])->name) +
              WT_DIGEST_HEX_MAX + 24) *
             (uint64_t)nw;
  if (reply > srv->config.max_send_bytes)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "ChecksumWeights: the reply for %zu digests would be about %" PRIu64
            " bytes, above the largest reply the server sends (%" PRIu64
            " bytes); ask for fewer names%s",
            total, reply, srv->config.max_send_bytes,
            all_workers ? " or without all_workers" : "");
  d = calloc(total ? total : 1, sizeof(*d));
  commits = calloc(nw, sizeof(*commits));
  if (d == NULL || commits == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  /* Every digest of the reply describes one version: each worker's store's
   * commit count is noted under the read lock of its first part, checked
   * under the lock of every later one, and the earlier workers' counts are
   * checked once more under the last worker's first lock (a commit between
   * two workers' passes). A commit landing during the pass makes the call
   * fail with ABORTED rather than mix two versions (one before it is
   * simply not seen, nor one after its last part). */
  /* Each tensor is hashed in parts of CHECKSUM_PART bytes, the read lock
   * held per part: a commit waits for one part, and the reader's thread
   * (niced below rounds') never holds the lock through a large tensor.
   * Every part is paid for from the peer's budget (reader_budget.c). */
  char key[80];
  wt_rpc_call_peer_key(call, key, sizeof(key));
  /* Readers pay from the model server's budgets for every set they read. */
  wt_server *bsrv = srv->base ? srv->base : srv;
  budget = wt_srv_budget_take(bsrv, key);
  WT_CHECK(wt_hasher_new(alg, &h));
  if (!trainer && (copy = malloc(CHECKSUM_PART)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "ChecksumWeights: out of memory");
  halt_arg ha = {srv, call};
  for (uint32_t w = 0; w < nw; w++) {
    wt_param_store *s = wt_worker_store(srv->workers[w]);
    for (size_t k = 0; k < n && st == NULL; k++) {
      uint64_t size = wt_param_store_meta(s, idx[k])->nbytes;
      wt_hasher_reset(h);
      uint64_t off = 0;
      do {
        /* A pass over a large model takes a while: a client that left, or
         * a server stopping, ends it between parts. */
        if (halted(&ha)) {
          st = wt_status_new(WT_CANCELLED,
                             "ChecksumWeights: stopped after %zu of %zu "
                             "digests: the client left or the server is "
                             "stopping",
                             (size_t)w * n + k, total);
          break;
        }
        size_t part =
            size - off < CHECKSUM_PART ? (size_t)(size - off) : CHECKSUM_PART;
        wt_param_store_read_lock(s);
        if (k == 0 && off == 0) commits[w] = wt_param_store_commits(s);
        bool same = wt_param_store_commits(s) == commits[w];
        /* At the last worker's first part, under its lock (a commit takes
         * every worker's write lock): no commit landed since the earlier
         * workers' passes. One after the last part does not matter: what
         * was hashed was whole. */
        for (uint32_t e = 0; same && w == nw - 1 && k == 0 && off == 0 && e < w;
             e++)
          same = wt_param_store_commits(wt_worker_store(srv->workers[e])) ==
                 commits[e];
        hash_part_job job = {s, idx[k], off, part, h, NULL};
        /* A trainer's own check (wt-push --verify) hashes on its thread, at
         * the trainer's priority: readers' niced threads may get a few
         * percent of a loaded host, and a trainer waits on no reader. */
        if (same && trainer) hash_part_run(&job);
        bool copied = false;
        if (same && !trainer &&
            wt_mem_kind_host_addressable(wt_param_store_memory(s))) {
          /* A reader's part of a host store: copied under the lock at this
           * thread's priority, hashed after it at the pool's. A niced
           * thread never holds the lock: on a loaded host it could wait
           * seconds for a CPU while a commit waits for it. */
          memcpy(copy, (const uint8_t *)wt_param_store_live(s, idx[k]) + off,
                 part);
          copied = true;
        } else if (same && !trainer) {
          wt_hash_pool_run(srv->readers.hashers, hash_part_run, &job);
        }
        if (same && !copied) st = job.st;
        wt_param_store_read_unlock(s);
        if (copied) {
          hash_copy_job cj = {copy, part, h};
          wt_hash_pool_run(srv->readers.hashers, hash_copy_run, &cj);
        }
        if (!same) st = version_changed((size_t)w * n + k, total);
        off += part;
        /* Halted while it waits: the next part's check says so. */
        if (st == NULL && part > 0)
          wt_srv_budget_spend(bsrv, budget, part, halted, &ha);
      } while (st == NULL && off < size);
      if (st == NULL) wt_hasher_final_hex(h, d[w * n + k].hex);
    }
    if (st != NULL) goto out;
    for (size_t k = 0; k < n; k++) {
      d[w * n + k].name = wt_param_store_meta(s, idx[k])->name;
      d[w * n + k].worker = w;
    }
  }

  *out = d;
  *nout = total;
  d = NULL;
out:
  free(copy);
  wt_hasher_free(h);
  if (budget != NULL)
    wt_srv_budget_release(srv->base ? srv->base : srv, budget);
  free(idx);
  free(seen);
  free(commits);
  free(d);
  return st;
}
