/* worker.c: one receiver and its round state machine (see wt/worker.h). */

#include "wt/worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/log.h"

struct wt_worker {
  uint32_t rank;
  uint32_t num_workers;
  char *device;
  char *host;
  uint32_t default_timeout_ms;
  uint64_t max_message_bytes;
  wt_registry *engines;
  wt_param_store *store;
  wt_worker_state state;
  const wt_engine_ops *ops;
  char backend[64];
  /* Guards `engine` for wt_worker_cancel, which runs on other threads. */
  pthread_mutex_t engine_mu;
  wt_engine *engine;
};

static const char *const state_names[] = {
    [WT_WORKER_UNINITIALIZED] = "uninitialized",
    [WT_WORKER_READY] = "ready",
    [WT_WORKER_UPDATING] = "updating",
};

const char *wt_worker_state_name(wt_worker_state state) {
  if ((int)state < 0 || (int)state > WT_WORKER_UPDATING) return "unknown";
  return state_names[state];
}

wt_status *wt_worker_new(const wt_worker_options *o, wt_param_store *store,
                         wt_worker **out) {
  wt_status *st = NULL;
  wt_worker *w = calloc(1, sizeof(*w));
  if (w == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "worker: out of memory");
  w->rank = o->rank;
  w->num_workers = o->num_workers;
  w->default_timeout_ms = o->default_timeout_ms;
  w->max_message_bytes = o->max_message_bytes;
  w->engines = o->engines;
  w->store = store;
  store = NULL;
  w->device = strdup(o->device ? o->device : "cpu");
  w->host = strdup(o->host ? o->host : "127.0.0.1");
  if (w->device == NULL || w->host == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "worker %u: out of memory", o->rank);
  pthread_mutex_init(&w->engine_mu, NULL);
  *out = w;
  w = NULL;
out:
  wt_param_store_destroy(store);
  if (w != NULL) {
    wt_param_store_destroy(w->store);
    free(w->device);
    free(w->host);
    free(w);
  }
  return st;
}

/* Takes the engine away from wt_worker_cancel and destroys it. */
static void drop_engine(wt_worker *w) {
  pthread_mutex_lock(&w->engine_mu);
  wt_engine *e = w->engine;
  const wt_engine_ops *ops = w->ops;
  w->engine = NULL;
  w->ops = NULL;
  pthread_mutex_unlock(&w->engine_mu);
  if (e != NULL) ops->destroy(e);
  w->backend[0] = '\0';
  w->state = WT_WORKER_UNINITIALIZED;
}

void wt_worker_destroy(wt_worker *w) {
  if (w == NULL) return;
  wt_worker_abort(w);
  drop_engine(w);
  pthread_mutex_destroy(&w->engine_mu);
  wt_param_store_destroy(w->store);
  free(w->device);
  free(w->host);
  free(w);
}

uint32_t wt_worker_rank(const wt_worker *w) {
  return w->rank;
}
const char *wt_worker_device(const wt_worker *w) {
  return w->device;
}
wt_param_store *wt_worker_store(const wt_worker *w) {
  return w->store;
}
wt_worker_state wt_worker_get_state(const wt_worker *w) {
  return w->state;
}
const char *wt_worker_backend(const wt_worker *w) {
  return w->backend;
}
const wt_engine_ops *wt_worker_engine_ops(const wt_worker *w) {
  return w->ops;
}

wt_status *wt_worker_init_engine(wt_worker *w,
                                 const Wt__V1__WeightTransferInitInfo *init,
                                 wt_engine_endpoint *endpoint) {
  wt_status *st = NULL;
  const wt_engine_ops *ops = NULL;
  wt_engine *e = NULL;
  memset(endpoint, 0, sizeof(*endpoint));
  wt_worker_abort(w);
  drop_engine(w);
  const char *backend = init && init->backend ? init->backend : "";
  if (strlen(backend) >= sizeof(w->backend))
    WT_FAIL(WT_INVALID_ARGUMENT, "init_info.backend '%.64s...' is too long",
            backend);
  WT_CHECK(wt_engine_lookup(w->engines, backend, &ops));
  wt_worker_ctx ctx = {
      .rank = w->rank,
      .num_workers = w->num_workers,
      .device = w->device,
      .store = w->store,
      .timeout_ms =
          init && init->timeout_ms ? init->timeout_ms : w->default_timeout_ms,
      .host = w->host,
      .max_message_bytes = w->max_message_bytes,
  };
  WT_CHECK(ops->create(init, &ctx, &e));
  /* Published before init_transfer, which may block, so that a cancel from
   * another thread reaches it. */
  pthread_mutex_lock(&w->engine_mu);
  w->engine = e;
  w->ops = ops;
  pthread_mutex_unlock(&w->engine_mu);
  e = NULL;
  st = ops->init_transfer(w->engine, init, endpoint);
  if (st != NULL) {
    st = wt_status_prefix(st, "worker %u: backend '%s' init", w->rank, backend);
    drop_engine(w);
    free(endpoint->worker_address);
    memset(endpoint, 0, sizeof(*endpoint));
    goto out;
  }
  snprintf(w->backend, sizeof(w->backend), "%s", backend);
  w->state = WT_WORKER_READY;
out:
  if (e != NULL) ops->destroy(e);
  return st;
}

static wt_status *need_state(const wt_worker *w, wt_worker_state want,
                             const char *what) {
  if (w->state == want) return NULL;
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "worker %u: %s needs state '%s' (state: %s)", w->rank,
                       what, wt_worker_state_name(want),
                       wt_worker_state_name(w->state));
}

wt_status *wt_worker_start(wt_worker *w, uint64_t round_id) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_READY, "start"));
  wt_param_store_begin(w->store);
  WT_CHECK(w->ops->start_update(w->engine, round_id));
  w->state = WT_WORKER_UPDATING;
out:
  return st;
}

wt_status *wt_worker_receive(wt_worker *w, const wt_update *u,
                             wt_receive_stats *stats) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_UPDATING, "receive"));
  if (w->ops->receive == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "backend '%s' receives weights through PushWeights", w->backend);
  st = w->ops->receive(w->engine, u, stats);
  if (st != NULL) st = wt_status_prefix(st, "worker %u", w->rank);
out:
  return st;
}

static wt_status *need_stream(const wt_worker *w) {
  if (w->ops != NULL && w->ops->push_chunk != NULL) return NULL;
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "backend '%s' does not take PushWeights; its data "
                       "moves through UpdateWeights",
                       w->backend);
}

wt_status *wt_worker_push_begin(wt_worker *w, const wt_update *u) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_UPDATING, "PushWeights"));
  WT_CHECK(need_stream(w));
  WT_CHECK(w->ops->push_begin(w->engine, u));
out:
  return st;
}

wt_status *wt_worker_push_chunk(wt_worker *w, uint32_t bucket, uint64_t offset,
                                const struct iovec *iov, size_t iovcnt) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_UPDATING, "PushWeights"));
  WT_CHECK(need_stream(w));
  WT_CHECK(w->ops->push_chunk(w->engine, bucket, offset, iov, iovcnt));
out:
  return st;
}

wt_status *wt_worker_push_end(wt_worker *w, bool stream_ended,
                              wt_receive_stats *stats) {
  if (w->state != WT_WORKER_UPDATING || w->ops->push_end == NULL) return NULL;
  return w->ops->push_end(w->engine, stream_ended, stats);
}

wt_status *wt_worker_check_finish(const wt_worker *w) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_UPDATING, "finish"));
  st = wt_param_store_check_commit(w->store);
out:
  return st;
}

wt_status *wt_worker_prepare_finish(wt_worker *w) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_UPDATING, "finish"));
  st = w->ops->finish_update(w->engine);
  if (st != NULL)
    st = wt_status_prefix(st, "worker %u: backend '%s' finish", w->rank,
                          w->backend);
out:
  return st;
}

void wt_worker_commit(wt_worker *w) {
  if (w->state != WT_WORKER_UPDATING) return;
  wt_param_store_commit_locked(w->store);
  w->state = WT_WORKER_READY;
}

void wt_worker_release_engine(wt_worker *w) {
  wt_worker_abort(w);
  drop_engine(w);
}

void wt_worker_abort(wt_worker *w) {
  if (w->state != WT_WORKER_UPDATING) return;
  w->ops->abort_update(w->engine);
  wt_param_store_abort(w->store);
  w->state = WT_WORKER_READY;
}

void wt_worker_cancel(wt_worker *w) {
  pthread_mutex_lock(&w->engine_mu);
  if (w->engine != NULL && w->ops != NULL) w->ops->cancel(w->engine);
  pthread_mutex_unlock(&w->engine_mu);
}
