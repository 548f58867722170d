/* worker.c: one receiver, its thread and its round state machine (see
 * wt/worker.h).
 *
 * Fields are of three kinds: fixed after wt_worker_new; the queue and the
 * published status, under `mu`; and the engine and round state, which only
 * the worker's thread touches (the engine pointer is also read by
 * wt_worker_cancel, under `engine_mu`).
 */

#include "wt/server.h"
#include "wt/worker.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt/clock.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/lock.h"

struct wt_worker {
  /* Fixed. */
  uint32_t rank;
  uint32_t num_workers;
  wt_device device;
  char device_name[WT_DEVICE_NAME_MAX];
  char *host;
  uint32_t data_timeout_ms;
  uint64_t max_message_bytes;
  wt_registry *engines;
  const wt_backend_option *engine_options; /* the server's; borrowed */
  size_t n_engine_options;
  int engine_check_ms; /* 0: never between rounds */
  wt_param_store *store;
  char where[64]; /* "worker 0 (cuda:0)" for messages */

  pthread_t thread;
  wt_mutex mu;
  pthread_cond_t work_cv; /* an op was queued, or quit */
  pthread_cond_t done_cv; /* an op is done, or the thread started */
  wt_worker_op *head, *tail;
  bool quit;
  bool closed; /* no more submits */
  bool started;
  bool serving; /* the thread runs ops (its device bound) */
  wt_status *start_st;
  int aborts_pending; /* ABORT ops queued or running */
  wt_worker_status pub;
  wt_worker_totals totals[WT_WORKER_MAX_TOTALS]; /* under mu */
  size_t ntotals;

  /* The worker's thread only (ops, engine_mu for the engine pointer). */
  wt_mutex engine_mu;
  const wt_engine_ops *ops;
  wt_engine *engine;
  wt_worker_state state;
  uint64_t round_id;
  uint64_t push_id;
  /* The engine was given up between rounds (READY, no engine): why, for
   * the next start's refusal. */
  bool given_up;
  char given_up_why[640];
};

static const char *const state_names[] = {
    [WT_WORKER_UNINITIALIZED] = "uninitialized",
    [WT_WORKER_INITIALIZING] = "initializing",
    [WT_WORKER_READY] = "ready",
    [WT_WORKER_UPDATING] = "updating",
    [WT_WORKER_ABORTING] = "aborting",
    [WT_WORKER_NEEDS_INIT] = "needs_init",
};

const char *wt_worker_state_name(wt_worker_state state) {
  if ((int)state < 0 || (int)state > WT_WORKER_NEEDS_INIT) return "unknown";
  return state_names[state];
}

/* --- published status (worker's thread) ---------------------------------- */

static void publish(wt_worker *w, const char *reason) {
  wt_mutex_lock(&w->mu);
  w->pub.state = w->state;
  w->pub.round_id = w->round_id;
  snprintf(w->pub.backend, sizeof(w->pub.backend), "%s",
           w->ops ? w->ops->header.name : "");
  if (reason != NULL)
    snprintf(w->pub.reason, sizeof(w->pub.reason), "%.*s",
             (int)sizeof(w->pub.reason) - 1, reason); /* cut to fit */
  else if (w->state != WT_WORKER_NEEDS_INIT)
    w->pub.reason[0] = '\0';
  wt_mutex_unlock(&w->mu);
}

/* Adds what a receive or a push moved to the published totals. */
static void count_stats(wt_worker *w, const wt_receive_stats *s) {
  wt_mutex_lock(&w->mu);
  w->pub.bytes_received += s->bytes;
  w->pub.bytes_forwarded += s->forwarded_bytes;
  size_t i = 0;
  while (i < w->ntotals && strcmp(w->totals[i].backend, w->pub.backend) != 0)
    i++;
  if (i == w->ntotals) {
    if (w->ntotals < WT_WORKER_MAX_TOTALS) {
      w->ntotals++;
      snprintf(w->totals[i].backend, sizeof(w->totals[i].backend), "%s",
               w->pub.backend);
    } else {
      i = WT_WORKER_MAX_TOTALS - 1;
    }
  }
  w->totals[i].tensors_received += s->tensors;
  w->totals[i].bytes_received += s->bytes;
  w->totals[i].bytes_forwarded += s->forwarded_bytes;
  wt_mutex_unlock(&w->mu);
}

size_t wt_worker_get_totals(const wt_worker *w, wt_worker_totals *out,
                            size_t cap) {
  wt_worker *m = (wt_worker *)w; /* the lock only */
  wt_mutex_lock(&m->mu);
  size_t n = w->ntotals;
  for (size_t i = 0; i < n && i < cap; i++) out[i] = w->totals[i];
  wt_mutex_unlock(&m->mu);
  return n;
}

static void set_state(wt_worker *w, wt_worker_state state) {
  w->state = state;
  publish(w, NULL);
}

/* --- the engine (worker's thread) ---------------------------------------- */

/* Takes the engine away from wt_worker_cancel and destroys it. */
static void drop_engine(wt_worker *w) {
  wt_mutex_lock(&w->engine_mu);
  wt_engine *e = w->engine;
  const wt_engine_ops *ops = w->ops;
  w->engine = NULL;
  w->ops = NULL;
  wt_mutex_unlock(&w->engine_mu);
  if (e != NULL) ops->destroy(e);
}

/* Ends an open round without commit. */
static void abort_round(wt_worker *w) {
  if (w->state != WT_WORKER_UPDATING) return;
  if (w->ops != NULL) w->ops->abort_update(w->engine);
  if (w->store != NULL) wt_param_store_abort(w->store);
  w->round_id = 0;
  w->push_id = 0;
}

static wt_status *need_state(const wt_worker *w, wt_worker_state want,
                             const char *what) {
  if (w->state == want) return NULL;
  if (w->state == WT_WORKER_NEEDS_INIT)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: %s: the worker needs a new "
                         "InitWeightTransferEngine: %s (state: needs_init)",
                         w->where, what, w->pub.reason);
  return wt_status_new(
      WT_FAILED_PRECONDITION, "%s: %s needs state '%s' (state: %s)", w->where,
      what, wt_worker_state_name(want), wt_worker_state_name(w->state));
}

static wt_status *need_round(const wt_worker *w, uint64_t round_id,
                             const char *what) {
  wt_status *st = need_state(w, WT_WORKER_UPDATING, what);
  if (st != NULL) return st;
  if (round_id != w->round_id)
    return wt_status_new(WT_ABORTED,
                         "%s: %s of round %" PRIu64
                         ": the worker is in another round",
                         w->where, what, round_id);
  return NULL;
}

static wt_status *op_init(wt_worker *w, wt_worker_op *op) {
  wt_status *st = NULL;
  const wt_engine_ops *ops = NULL;
  wt_engine *e = NULL;
  const Wt__V1__WeightTransferInitInfo *init = op->init;
  memset(op->endpoint, 0, sizeof(*op->endpoint));
  abort_round(w);
  drop_engine(w);
  w->given_up = false;
  set_state(w, WT_WORKER_INITIALIZING);
  const char *backend = init && init->backend ? init->backend : "";
  WT_CHECK(wt_engine_lookup(w->engines, backend, &ops));
  wt_mem_kind kind = wt_param_store_memory(w->store);
  uint32_t takes = ops->memory_kinds ? ops->memory_kinds : WT_MEM_HOST_KINDS;
  if (!(takes & WT_MEM_BIT(kind))) {
    char kinds[64];
    WT_FAIL(WT_FAILED_PRECONDITION,
            "%s: backend '%s' cannot receive into '%s' memory (this worker's "
            "param store); it takes %s",
            w->where, backend, wt_mem_kind_name(kind),
            wt_mem_kinds_format(takes, kinds, sizeof(kinds)));
  }
  wt_worker_ctx ctx = {
      .rank = w->rank,
      .num_workers = w->num_workers,
      .device = w->device,
      .device_name = w->device_name,
      .store = w->store,
      .data_timeout_ms =
          init && init->timeout_ms ? init->timeout_ms : w->data_timeout_ms,
      .host = w->host,
      .max_message_bytes = w->max_message_bytes,
  };
  wt_backend_option *mine = NULL;
  WT_CHECK(wt_engine_options_for(backend, w->engine_options,
                                 w->n_engine_options, &mine, &ctx.n_options));
  ctx.options = mine;
  st = ops->create(init, &ctx, &e);
  free(mine); /* create keeps what it needs of them */
  WT_CHECK(wt_status_prefix(st, "%s: backend '%s'", w->where, backend));
  /* Published before init_transfer, which may block, so that a cancel from
   * another thread reaches it. */
  wt_mutex_lock(&w->engine_mu);
  w->engine = e;
  w->ops = ops;
  wt_mutex_unlock(&w->engine_mu);
  e = NULL;
  st = ops->init_transfer(w->engine, op->endpoint);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s: backend '%s' init", w->where, backend);
    drop_engine(w);
    free(op->endpoint->worker_address);
    memset(op->endpoint, 0, sizeof(*op->endpoint));
    goto out;
  }
  w->state = WT_WORKER_READY;
  publish(w, "");
out:
  if (e != NULL) ops->destroy(e);
  if (st != NULL) set_state(w, WT_WORKER_UNINITIALIZED);
  return st;
}

/* Whether the ready worker's engine must be given up (needs_reinit); if
 * so it is dropped, the worker goes to needs_init, and *reason (n bytes)
 * says why. */
static bool give_up_engine(wt_worker *w, char *reason, size_t n) {
  char why[400];
  if (w->given_up) {
    snprintf(reason, n, "%s", w->given_up_why);
    w->given_up = false;
    w->state = WT_WORKER_NEEDS_INIT;
    publish(w, reason);
    return true;
  }
  if (w->ops == NULL || w->ops->needs_reinit == NULL ||
      !w->ops->needs_reinit(w->engine, why, sizeof(why)))
    return false;
  snprintf(reason, n,
           "backend '%s' gave its engine up (%s); call "
           "InitWeightTransferEngine again",
           w->ops->header.name, why);
  drop_engine(w);
  w->state = WT_WORKER_NEEDS_INIT;
  publish(w, reason);
  WT_LOGW("server", "%s: %s", w->where, reason);
  return true;
}

/* Between rounds, on the worker's thread: an engine that must be given up
 * goes now, so that what strangers hold through it is freed at once, not
 * at the next round's start. The state stays READY, its reason says what
 * happened, and the next start needs a new init. */
static void check_engine_idle(wt_worker *w) {
  char why[400] = "";
  if (w->state != WT_WORKER_READY || w->given_up || w->ops == NULL ||
      w->ops->needs_reinit == NULL ||
      !w->ops->needs_reinit(w->engine, why, sizeof(why)))
    return;
  char backend[sizeof(w->pub.backend)];
  snprintf(backend, sizeof(backend), "%s", w->ops->header.name);
  snprintf(w->given_up_why, sizeof(w->given_up_why),
           "backend '%s' gave its engine up between rounds (%s); call "
           "InitWeightTransferEngine again",
           backend, why);
  drop_engine(w);
  w->given_up = true;
  publish(w, w->given_up_why);
  wt_mutex_lock(&w->mu);
  snprintf(w->pub.backend, sizeof(w->pub.backend), "%s", backend);
  wt_mutex_unlock(&w->mu);
  WT_LOGW("server", "%s: %s", w->where, w->given_up_why);
}

static wt_status *op_start(wt_worker *w, wt_worker_op *op) {
  wt_status *st = NULL;
  WT_CHECK(need_state(w, WT_WORKER_READY, "start"));
  char reason[640];
  if (give_up_engine(w, reason, sizeof(reason)))
    WT_FAIL(WT_FAILED_PRECONDITION,
            "%s needs a new InitWeightTransferEngine: %s", w->where, reason);
  wt_param_store_begin(w->store);
  st = w->ops->start_update(w->engine, op->round_id);
  if (st != NULL) {
    st = wt_status_prefix(st, "%s: backend '%s' start", w->where,
                          w->ops->header.name);
    wt_param_store_abort(w->store);
    goto out;
  }
  w->round_id = op->round_id;
  w->push_id = 0;
  set_state(w, WT_WORKER_UPDATING);
out:
  return st;
}

static wt_status *op_receive(wt_worker *w, wt_worker_op *op) {
  wt_status *st = NULL;
  WT_CHECK(need_round(w, op->round_id, "receive"));
  if (w->ops->receive == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "backend '%s' receives weights through PushWeights",
            w->ops->header.name);
  st = w->ops->receive(w->engine, op->update, &op->stats);
  count_stats(w, &op->stats);
  if (st != NULL) st = wt_status_prefix(st, "%s", w->where);
out:
  return st;
}

static wt_status *need_stream(const wt_worker *w) {
  if (w->ops != NULL && w->ops->push_chunk != NULL) return NULL;
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "backend '%s' does not take PushWeights; its data "
                       "moves through UpdateWeights",
                       w->ops ? w->ops->header.name : "");
}

static wt_status *op_push_begin(wt_worker *w, wt_worker_op *op) {
  wt_status *st = NULL;
  WT_CHECK(need_round(w, op->round_id, "PushWeights"));
  WT_CHECK(need_stream(w));
  WT_CHECK(w->ops->push_begin(w->engine, op->update));
  w->push_id = op->push_id;
out:
  return st;
}

static wt_status *op_push_chunk(wt_worker *w, wt_worker_op *op) {
  if (w->state != WT_WORKER_UPDATING || w->push_id != op->push_id ||
      op->push_id == 0)
    return wt_status_new(WT_ABORTED,
                         "%s: bucket %" PRIu32 " offset %" PRIu64
                         ": push %" PRIu64 " is no longer open",
                         w->where, op->bucket, op->offset, op->push_id);
  if (op->delta) {
    if (w->ops->push_delta == NULL || op->iovcnt != 1)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: bucket %" PRIu32 " offset %" PRIu64
                           ": backend '%s' takes no delta chunks",
                           w->where, op->bucket, op->offset,
                           w->ops->header.name);
    return w->ops->push_delta(w->engine, op->bucket, op->offset, op->raw_len,
                              op->base_digest, op->iov[0].iov_base,
                              op->iov[0].iov_len);
  }
  return w->ops->push_chunk(w->engine, op->bucket, op->offset, op->iov,
                            op->iovcnt);
}

static wt_status *op_push_end(wt_worker *w, wt_worker_op *op) {
  if (w->state != WT_WORKER_UPDATING || w->push_id != op->push_id ||
      op->push_id == 0)
    return NULL; /* aborted under the push: nothing of it is left */
  w->push_id = 0;
  if (w->ops->push_end == NULL) return NULL;
  wt_status *st = w->ops->push_end(w->engine, op->stream_ended, &op->stats);
  count_stats(w, &op->stats);
  return st;
}

static wt_status *op_prepare(wt_worker *w, wt_worker_op *op) {
  wt_status *st = NULL;
  WT_CHECK(need_round(w, op->round_id, "finish"));
  WT_CHECK(wt_param_store_check_commit(w->store));
  st = w->ops->finish_update(w->engine);
  if (st != NULL)
    st = wt_status_prefix(st, "%s: backend '%s' finish", w->where,
                          w->ops->header.name);
out:
  return st;
}

static wt_status *op_commit(wt_worker *w, wt_worker_op *op) {
  wt_status *st = NULL;
  WT_CHECK(need_round(w, op->round_id, "commit"));
  wt_param_store_commit_locked(w->store);
  w->round_id = 0;
  w->push_id = 0;
  set_state(w, WT_WORKER_READY);
out:
  return st;
}

static void op_abort(wt_worker *w, wt_worker_op *op) {
  if (w->state != WT_WORKER_UPDATING ||
      (op->round_id != 0 && op->round_id != w->round_id))
    return;
  abort_round(w);
  if (w->ops != NULL && !(w->ops->caps & WT_ENGINE_SURVIVES_ABORT)) {
    char reason[512];
    snprintf(reason, sizeof(reason),
             "backend '%s' cannot continue after an abort (its round was "
             "aborted: %.300s); call InitWeightTransferEngine again",
             w->ops->header.name, op->reason ? op->reason : "aborted");
    drop_engine(w);
    w->state = WT_WORKER_NEEDS_INIT;
    publish(w, reason);
    WT_LOGW("server", "%s: %s", w->where, reason);
    return;
  }
  set_state(w, WT_WORKER_READY);
}

static void op_release(wt_worker *w) {
  abort_round(w);
  drop_engine(w);
  set_state(w, WT_WORKER_UNINITIALIZED);
}

static wt_status *run_op(wt_worker *w, wt_worker_op *op) {
  switch (op->kind) {
    case WT_WORKER_OP_INIT:
      return op_init(w, op);
    case WT_WORKER_OP_RELEASE:
      op_release(w);
      return NULL;
    case WT_WORKER_OP_START:
      return op_start(w, op);
    case WT_WORKER_OP_RECEIVE:
      return op_receive(w, op);
    case WT_WORKER_OP_PUSH_BEGIN:
      return op_push_begin(w, op);
    case WT_WORKER_OP_PUSH_CHUNK:
      return op_push_chunk(w, op);
    case WT_WORKER_OP_PUSH_END:
      return op_push_end(w, op);
    case WT_WORKER_OP_PREPARE:
      return op_prepare(w, op);
    case WT_WORKER_OP_COMMIT:
      return op_commit(w, op);
    case WT_WORKER_OP_ABORT:
      op_abort(w, op);
      return NULL;
    case WT_WORKER_OP_CALL:
      return op->fn(w, op->arg);
  }
  return wt_status_new(WT_INTERNAL, "%s: unknown op %d", w->where,
                       (int)op->kind);
}

/* --- the thread ----------------------------------------------------------- */

static void *worker_main(void *arg) {
  wt_worker *w = arg;
  wt_status *st = NULL;
  if (w->device.type == WT_DEVICE_CUDA) {
    st = wt_cuda_check_device(w->device.index);
    if (st == NULL)
      st = wt_status_prefix(wt_cuda_bind(w->device.index), "device '%s'",
                            w->device_name);
  }
  wt_log_context_set((wt_log_context){0, (int)w->rank, NULL});
  wt_mutex_lock(&w->mu);
  w->start_st = st;
  w->started = true;
  w->serving = st == NULL;
  pthread_cond_broadcast(&w->done_cv);
  if (st != NULL) {
    wt_mutex_unlock(&w->mu);
    return NULL;
  }
  int64_t next_check = wt_mono_ms() + w->engine_check_ms;
  for (;;) {
    while (w->head == NULL && !w->quit) {
      bool idle_check = w->engine_check_ms > 0 && w->state == WT_WORKER_READY &&
                        !w->given_up && w->ops != NULL &&
                        w->ops->needs_reinit != NULL;
      if (!idle_check) {
        wt_cond_wait(&w->work_cv, &w->mu);
        continue;
      }
      int64_t now = wt_mono_ms();
      if (now >= next_check) {
        next_check = now + w->engine_check_ms;
        wt_mutex_unlock(&w->mu);
        check_engine_idle(w);
        wt_mutex_lock(&w->mu);
        continue;
      }
      wt_cond_wait_until(&w->work_cv, &w->mu, next_check);
    }
    if (w->head == NULL) break;
    wt_worker_op *op = w->head;
    w->head = op->next;
    if (w->head == NULL) w->tail = NULL;
    wt_mutex_unlock(&w->mu);

    wt_log_context_set((wt_log_context){op->round_id, (int)w->rank, NULL});
    wt_status *rst = run_op(w, op);

    wt_mutex_lock(&w->mu);
    if (op->kind == WT_WORKER_OP_ABORT) w->aborts_pending--;
    if (op->on_done != NULL) {
      /* Detached: the op may be freed by on_done. */
      wt_mutex_unlock(&w->mu);
      op->on_done(op, rst, op->user);
      wt_mutex_lock(&w->mu);
    } else {
      op->st = rst;
      op->failed = rst != NULL;
      op->done = true;
      pthread_cond_broadcast(&w->done_cv);
    }
  }
  wt_mutex_unlock(&w->mu);
  return NULL;
}

wt_status *wt_worker_new(const wt_worker_options *o, wt_worker **out) {
  wt_status *st = NULL;
  *out = NULL;
  wt_worker *w = calloc(1, sizeof(*w));
  if (w == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "worker: out of memory");
  w->rank = o->rank;
  w->num_workers = o->num_workers;
  w->device = o->device;
  wt_device_format(o->device, w->device_name);
  snprintf(w->where, sizeof(w->where), "worker %u (%s)", o->rank,
           w->device_name);
  w->data_timeout_ms = o->data_timeout_ms ? o->data_timeout_ms
                                          : WT_SERVER_DEFAULT_DATA_TIMEOUT_MS;
  w->max_message_bytes = o->max_message_bytes;
  w->engines = o->engines;
  w->engine_options = o->engine_options;
  w->engine_check_ms = o->engine_check_ms == 0  ? WT_WORKER_ENGINE_CHECK_MS
                       : o->engine_check_ms < 0 ? 0
                                                : o->engine_check_ms;
  w->n_engine_options = o->n_engine_options;
  w->host = strdup(o->host ? o->host : "127.0.0.1");
  if (w->host == NULL) {
    free(w);
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "worker %u: out of memory", o->rank);
  }
  wt_mutex_init(&w->mu, WT_LOCK_WORKER, o->rank, "worker.mu");
  wt_cond_init_monotonic(&w->work_cv);
  pthread_cond_init(&w->done_cv, NULL);
  wt_mutex_init(&w->engine_mu, WT_LOCK_WORKER_ENGINE, o->rank,
                "worker.engine_mu");
  w->pub.state = WT_WORKER_UNINITIALIZED;
  int rc = pthread_create(&w->thread, NULL, worker_main, w);
  if (rc != 0) {
    st = wt_status_from_errno(rc, "worker %u: starting its thread", o->rank);
    w->closed = true;
    wt_worker_destroy(w);
    goto out;
  }
  wt_mutex_lock(&w->mu);
  while (!w->started) wt_cond_wait(&w->done_cv, &w->mu);
  st = w->start_st;
  w->start_st = NULL;
  wt_mutex_unlock(&w->mu);
  if (st != NULL) {
    st = wt_status_prefix(st, "worker %u", o->rank);
    wt_worker_destroy(w);
    goto out;
  }
  *out = w;
out:
  return st;
}

wt_status *wt_worker_submit(wt_worker *w, wt_worker_op *op) {
  op->st = NULL;
  op->failed = false;
  op->done = false;
  op->next = NULL;
  wt_mutex_lock(&w->mu);
  if (w->closed) {
    wt_mutex_unlock(&w->mu);
    return wt_status_new(WT_UNAVAILABLE, "%s is shutting down", w->where);
  }
  if (op->kind == WT_WORKER_OP_ABORT) w->aborts_pending++;
  if (w->tail)
    w->tail->next = op;
  else
    w->head = op;
  w->tail = op;
  pthread_cond_signal(&w->work_cv);
  wt_mutex_unlock(&w->mu);
  return NULL;
}

wt_status *wt_worker_wait(wt_worker *w, wt_worker_op *op) {
  wt_mutex_lock(&w->mu);
  while (!op->done) wt_cond_wait(&w->done_cv, &w->mu);
  wt_status *st = op->st;
  op->st = NULL;
  wt_mutex_unlock(&w->mu);
  return st;
}

wt_status *wt_worker_run(wt_worker *w, wt_worker_op *op) {
  wt_status *st = wt_worker_submit(w, op);
  if (st != NULL) return st;
  return wt_worker_wait(w, op);
}

static wt_status *destroy_store(wt_worker *w, void *arg) {
  (void)arg;
  wt_param_store_destroy(w->store);
  w->store = NULL;
  return NULL;
}

void wt_worker_destroy(wt_worker *w) {
  if (w == NULL) return;
  wt_mutex_lock(&w->mu);
  bool running = w->serving && !w->closed;
  wt_mutex_unlock(&w->mu);
  if (running) {
    wt_worker_op release = {.kind = WT_WORKER_OP_RELEASE};
    wt_worker_op store = {.kind = WT_WORKER_OP_CALL, .fn = destroy_store};
    wt_status_free(wt_worker_run(w, &release));
    wt_status_free(wt_worker_run(w, &store));
  }
  wt_mutex_lock(&w->mu);
  w->closed = true;
  w->quit = true;
  bool joinable = w->started || w->head != NULL;
  pthread_cond_broadcast(&w->work_cv);
  wt_mutex_unlock(&w->mu);
  if (joinable) pthread_join(w->thread, NULL);
  /* A worker whose thread never ran its ops (bind failed). */
  if (w->store != NULL) wt_param_store_destroy(w->store);
  wt_status_free(w->start_st);
  wt_mutex_destroy(&w->engine_mu);
  pthread_cond_destroy(&w->done_cv);
  pthread_cond_destroy(&w->work_cv);
  wt_mutex_destroy(&w->mu);
  free(w->host);
  free(w);
}

void wt_worker_set_store(wt_worker *w, wt_param_store *store) {
  w->store = store;
}

uint32_t wt_worker_rank(const wt_worker *w) {
  return w->rank;
}

wt_device wt_worker_device(const wt_worker *w) {
  return w->device;
}

const char *wt_worker_device_name(const wt_worker *w) {
  return w->device_name;
}

wt_param_store *wt_worker_store(const wt_worker *w) {
  return w->store;
}

void wt_worker_get_status(const wt_worker *w, wt_worker_status *out) {
  wt_worker *mw = (wt_worker *)w;
  wt_mutex_lock(&mw->mu);
  *out = w->pub;
  if (w->aborts_pending > 0 && out->state == WT_WORKER_UPDATING)
    out->state = WT_WORKER_ABORTING;
  wt_mutex_unlock(&mw->mu);
}

const wt_engine_ops *wt_worker_engine_ops(const wt_worker *w) {
  wt_worker *mw = (wt_worker *)w;
  wt_mutex_lock(&mw->engine_mu);
  const wt_engine_ops *ops = w->ops;
  wt_mutex_unlock(&mw->engine_mu);
  return ops;
}

void wt_worker_cancel(wt_worker *w) {
  wt_mutex_lock(&w->engine_mu);
  if (w->engine != NULL && w->ops != NULL) w->ops->cancel(w->engine);
  wt_mutex_unlock(&w->engine_mu);
}
