/* hash_pool.c: the threads that hash for readers (ChecksumWeights), below
 * every other thread of the server when the CPU is short (see
 * server_state.h). A handler hands over one part at a time and waits:
 * parts of different callers interleave in arrival order, and the reader
 * calls that hash nothing (GetServerInfo, GetWeightVersion, ...) keep
 * their handler threads' normal priority. */

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "server_state.h"
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
