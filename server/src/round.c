/* round.c: the round state machine across a server's workers: init, start,
 * update / push, finish, abort (see server_internal.h for the locking).
 *
 * Every worker sees the same calls in the same order, so they are always in
 * the same state; the server's state is theirs. A version becomes visible
 * only after every worker committed, which finish does in two phases
 * (check and prepare everywhere, then commit everywhere).
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server_internal.h"
#include "wt/log.h"

int64_t wt_srv_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wt_srv_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *wt_srv_state_locked(const wt_server *srv) {
  if (!srv->initialized || srv->initializing) return "uninitialized";
  return srv->round_id != 0 ? "updating" : "ready";
}

/* --- running a step on every worker at once ------------------------------- */

typedef wt_status *(*worker_fn)(wt_worker *w, void *arg);

typedef struct par_job {
  wt_worker *w;
  worker_fn fn;
  void *arg;
  wt_status *st;
} par_job;

static void *par_main(void *p) {
  par_job *j = p;
  j->st = j->fn(j->w, j->arg);
  return NULL;
}

/* Runs fn on every worker, each on its own thread (worker 0 on the caller's),
 * because a blocking step of one worker (an NCCL rendezvous, a receive) may
 * need the others inside it at the same time. Returns the lowest rank's
 * error. */
static wt_status *run_all(wt_server *srv, worker_fn fn, void *arg) {
  uint32_t n = srv->nworkers;
  if (n == 1) return fn(srv->workers[0], arg);
  wt_status *st = NULL;
  par_job *jobs = calloc(n, sizeof(*jobs));
  pthread_t *tids = calloc(n, sizeof(*tids));
  bool *started = calloc(n, sizeof(*started));
  if (jobs == NULL || tids == NULL || started == NULL) {
    free(jobs);
    free(tids);
    free(started);
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "server: out of memory starting %u worker threads", n);
  }
  for (uint32_t i = 0; i < n; i++)
    jobs[i] = (par_job){.w = srv->workers[i], .fn = fn, .arg = arg};
  for (uint32_t i = 1; i < n; i++)
    started[i] = pthread_create(&tids[i], NULL, par_main, &jobs[i]) == 0;
  /* A thread that could not start runs here, after worker 0. */
  par_main(&jobs[0]);
  for (uint32_t i = 1; i < n; i++) {
    if (started[i])
      pthread_join(tids[i], NULL);
    else
      par_main(&jobs[i]);
  }
  for (uint32_t i = 0; i < n; i++) {
    if (st == NULL)
      st = jobs[i].st;
    else
      wt_status_free(jobs[i].st);
  }
  free(jobs);
  free(tids);
  free(started);
  return st;
}

/* --- preconditions (under mu) --------------------------------------------- */

static void wait_abort_locked(wt_server *srv) {
  while (srv->aborting) pthread_cond_wait(&srv->cv, &srv->mu);
}

static wt_status *need_init_locked(const wt_server *srv, const char *call) {
  if (srv->stopping)
    return wt_status_new(WT_UNAVAILABLE, "%s: the server is shutting down",
                         call);
  if (srv->initializing)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: InitWeightTransferEngine is still running "
                         "(state: uninitialized)",
                         call);
  if (!srv->initialized)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: no weight-transfer engine is initialized "
                         "(state: uninitialized); call "
                         "InitWeightTransferEngine first",
                         call);
  return NULL;
}

static wt_status *need_round_locked(const wt_server *srv, const char *call,
                                    uint64_t round_id) {
  wt_status *st = need_init_locked(srv, call);
  if (st != NULL) return st;
  if (srv->round_id == 0) {
    if (round_id != 0 && round_id == srv->aborted_round)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "%s: round %" PRIu64
                           " was aborted (%s); no round is in progress "
                           "(state: ready)",
                           call, round_id, srv->abort_reason);
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: no round is in progress (state: ready); call "
                         "StartWeightUpdate first",
                         call);
  }
  if (round_id != 0 && round_id != srv->round_id)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: round_id %" PRIu64
                         " is not the current round %" PRIu64
                         " (state: updating)",
                         call, round_id, srv->round_id);
  return NULL;
}

static wt_status *need_idle_locked(const wt_server *srv, const char *call) {
  if (srv->busy == NULL) return NULL;
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "%s: %s is still running in round %" PRIu64
                       " (state: updating); wait for it to end",
                       call, srv->busy, srv->round_id);
}

/* --- validation ----------------------------------------------------------- */

void wt_srv_resolved_clear(wt_srv_resolved *r) {
  free(r->index);
  free(r->nbytes);
  memset(r, 0, sizeof(*r));
}

wt_status *wt_srv_resolve_update(wt_server *srv,
                                 const Wt__V1__WeightTransferUpdateInfo *info,
                                 wt_srv_resolved *out) {
  wt_status *st = NULL;
  const wt_param_store *store = wt_worker_store(srv->workers[0]);
  size_t nmodel = wt_param_store_count(store);
  long *seen = NULL; /* position in the request + 1, per model tensor */
  memset(out, 0, sizeof(*out));
  if (info == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "update_info is missing");
  size_t n = info->n_names;
  if (info->n_dtype_names != n || info->n_shapes != n)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "update_info has %zu names, %zu dtype_names and %zu shapes; the "
            "three lists must have equal lengths",
            n, info->n_dtype_names, info->n_shapes);
  if (info->n_packed_tensor_sizes != 0 && info->n_packed_tensor_sizes != n)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "update_info has %zu packed_tensor_sizes for %zu names; give one "
            "per name or none",
            info->n_packed_tensor_sizes, n);
  out->index = calloc(n ? n : 1, sizeof(*out->index));
  out->nbytes = calloc(n ? n : 1, sizeof(*out->nbytes));
  seen = calloc(nmodel ? nmodel : 1, sizeof(*seen));
  if (out->index == NULL || out->nbytes == NULL || seen == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "update_info: out of memory for %zu names",
            n);
  for (size_t k = 0; k < n; k++) {
    const char *name = info->names[k];
    size_t idx = 0;
    wt_status *nf = wt_param_store_find(store, name, &idx);
    if (nf != NULL) {
      wt_status_free(nf);
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s' (update_info.names[%zu]) is not in the model",
              name, k);
    }
    if (seen[idx] != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s' appears twice in update_info.names (at %ld and "
              "%zu)",
              name, seen[idx] - 1, k);
    seen[idx] = (long)k + 1;
    const wt_tensor_meta *m = wt_param_store_meta(store, idx);
    wt_dtype dt;
    wt_status *bad = wt_dtype_from_name(info->dtype_names[k], &dt);
    if (bad != NULL) {
      st = wt_status_prefix(bad, "parameter '%s'", name);
      goto out;
    }
    if (dt != m->dtype)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s': dtype %s does not match the model's %s", name,
              wt_dtype_torch_name(dt), wt_dtype_torch_name(m->dtype));
    const Wt__V1__Shape *sh = info->shapes[k];
    size_t ndim = sh ? sh->n_dims : 0;
    const int64_t *dims = sh ? sh->dims : NULL;
    bool same = ndim == (size_t)m->ndim;
    for (size_t d = 0; same && d < ndim; d++) same = dims[d] == m->shape[d];
    if (!same) {
      char got[128], want[128];
      if (ndim > WT_MAX_NDIM)
        snprintf(got, sizeof(got), "of %zu dimensions", ndim);
      else
        wt_shape_format(dims, (int)ndim, got, sizeof(got));
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s': shape %s does not match the model's %s", name,
              got, wt_shape_format(m->shape, m->ndim, want, sizeof(want)));
    }
    if (info->n_packed_tensor_sizes != 0 &&
        info->packed_tensor_sizes[k] != m->nbytes)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "parameter '%s': update_info.packed_tensor_sizes[%zu] is %" PRIu64
              " bytes; the model's tensor has %" PRIu64,
              name, k, info->packed_tensor_sizes[k], m->nbytes);
    out->index[k] = idx;
    out->nbytes[k] = m->nbytes;
    out->u.total_bytes += m->nbytes;
  }
  out->u.n = n;
  out->u.index = out->index;
  out->u.nbytes = out->nbytes;
  out->u.packed = info->packed;
  out->u.info = info;
out:
  free(seen);
  if (st != NULL) wt_srv_resolved_clear(out);
  return st;
}

/* --- init ----------------------------------------------------------------- */

static const char *oneof_backend(const Wt__V1__WeightTransferInitInfo *init) {
  switch (init->backend_init_case) {
    case WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC:
      return "grpc";
    case WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX:
      return "ucx";
    case WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_NCCL:
      return "nccl";
    case WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC:
      return "ipc";
    default:
      return NULL;
  }
}

typedef struct init_arg {
  const Wt__V1__WeightTransferInitInfo *init;
  wt_engine_endpoint *endpoints;
} init_arg;

static wt_status *init_one(wt_worker *w, void *p) {
  init_arg *a = p;
  return wt_worker_init_engine(w, a->init, &a->endpoints[wt_worker_rank(w)]);
}

wt_status *wt_srv_init_engine(wt_server *srv,
                              const Wt__V1__WeightTransferInitInfo *init,
                              wt_engine_endpoint *endpoints) {
  wt_status *st = NULL;
  bool locked = false, marked = false;
  char *names = NULL;
  if (init == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "init_info is missing");
  const char *backend = init->backend ? init->backend : "";
  const char *oneof = oneof_backend(init);
  if (*backend == '\0') {
    wt_status *e = wt_engine_names(srv->engines, &names);
    if (e != NULL) names = NULL;
    wt_status_free(e);
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.backend is empty; registered backends: %s",
            names ? names : "(none)");
  }
  if (oneof != NULL && strcmp(oneof, backend) != 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.backend is '%s' but init_info carries %s settings",
            backend, oneof);
  /* An unknown backend is refused before the current engine is touched. */
  const wt_engine_ops *ops = NULL;
  WT_CHECK(wt_engine_lookup(srv->engines, backend, &ops));

  pthread_mutex_lock(&srv->mu);
  locked = true;
  wait_abort_locked(srv);
  if (srv->stopping)
    WT_FAIL(WT_UNAVAILABLE,
            "InitWeightTransferEngine: the server is shutting down");
  if (srv->initializing)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "InitWeightTransferEngine: another InitWeightTransferEngine is "
            "running (state: uninitialized)");
  if (srv->round_id != 0)
    wt_srv_abort_round_locked(srv,
                              "replaced by a new InitWeightTransferEngine");
  srv->initializing = true;
  srv->initialized = false;
  srv->backend[0] = '\0';
  marked = true;
  pthread_mutex_unlock(&srv->mu);
  locked = false;

  init_arg a = {.init = init, .endpoints = endpoints};
  st = run_all(srv, init_one, &a);

  pthread_mutex_lock(&srv->mu);
  locked = true;
  srv->initializing = false;
  if (st == NULL && srv->stopping)
    st = wt_status_new(WT_UNAVAILABLE,
                       "InitWeightTransferEngine: the server is shutting down");
  if (st == NULL) {
    srv->initialized = true;
    snprintf(srv->backend, sizeof(srv->backend), "%s", backend);
    WT_LOGI("server", "backend '%s' initialized on %u worker(s)", backend,
            srv->nworkers);
  } else {
    for (uint32_t i = 0; i < srv->nworkers; i++)
      wt_worker_release_engine(srv->workers[i]);
  }
out:
  if (marked) pthread_cond_broadcast(&srv->cv);
  if (locked) pthread_mutex_unlock(&srv->mu);
  free(names);
  return st;
}

/* --- start ---------------------------------------------------------------- */

wt_status *wt_srv_start(wt_server *srv, uint64_t *round_id) {
  wt_status *st = NULL;
  pthread_mutex_lock(&srv->mu);
  wait_abort_locked(srv);
  WT_CHECK(need_init_locked(srv, "StartWeightUpdate"));
  if (srv->round_id != 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "StartWeightUpdate: round %" PRIu64
            " is in progress (state: updating); finish or abort it first",
            srv->round_id);
  uint64_t id = srv->last_round_id + 1;
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    st = wt_worker_start(srv->workers[i], id);
    if (st != NULL) {
      for (uint32_t j = 0; j < i; j++) wt_worker_abort(srv->workers[j]);
      goto out;
    }
  }
  srv->last_round_id = id;
  srv->round_id = id;
  srv->busy = NULL;
  srv->last_activity_ms = wt_srv_now_ms();
  *round_id = id;
  pthread_cond_broadcast(&srv->cv);
  WT_LOGD("server", "round %" PRIu64 " started", id);
out:
  pthread_mutex_unlock(&srv->mu);
  return st;
}

/* --- update (receive) ----------------------------------------------------- */

typedef struct recv_arg {
  const wt_update *u;
  wt_receive_stats *stats; /* one per worker */
} recv_arg;

static wt_status *recv_one(wt_worker *w, void *p) {
  recv_arg *a = p;
  return wt_worker_receive(w, a->u, &a->stats[wt_worker_rank(w)]);
}

/* The error a data call gets once its round was aborted under it. */
static wt_status *aborted_error(const wt_server *srv, const char *call,
                                uint64_t round) {
  if (round == srv->aborted_round && srv->abort_reason != NULL)
    return wt_status_new(WT_ABORTED, "%s: round %" PRIu64 " was aborted: %s",
                         call, round, srv->abort_reason);
  return wt_status_new(WT_ABORTED, "%s: round %" PRIu64 " is no longer open",
                       call, round);
}

wt_status *wt_srv_update(wt_server *srv, uint64_t round_id,
                         const Wt__V1__WeightTransferUpdateInfo *info,
                         wt_receive_stats *stats) {
  wt_status *st = NULL;
  wt_srv_resolved r = {0};
  wt_receive_stats *per = NULL;
  pthread_mutex_lock(&srv->mu);
  wait_abort_locked(srv);
  WT_CHECK(need_round_locked(srv, "UpdateWeights", round_id));
  WT_CHECK(need_idle_locked(srv, "UpdateWeights"));
  const wt_engine_ops *ops = wt_worker_engine_ops(srv->workers[0]);
  if (ops->receive == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "UpdateWeights: backend '%s' receives weights through PushWeights",
            srv->backend);
  WT_CHECK(wt_srv_resolve_update(srv, info, &r));
  per = calloc(srv->nworkers, sizeof(*per));
  if (per == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "UpdateWeights: out of memory");
  uint64_t round = srv->round_id;
  r.u.round_id = round;
  srv->busy = "UpdateWeights";
  srv->receivers = (int)srv->nworkers;
  pthread_mutex_unlock(&srv->mu);

  recv_arg a = {.u = &r.u, .stats = per};
  st = run_all(srv, recv_one, &a);

  pthread_mutex_lock(&srv->mu);
  srv->receivers = 0;
  srv->last_activity_ms = wt_srv_now_ms();
  if (srv->aborting || srv->round_id != round) {
    wt_status_free(st);
    st = aborted_error(srv, "UpdateWeights", round);
  } else {
    srv->busy = NULL;
  }
  pthread_cond_broadcast(&srv->cv);
  if (st == NULL) *stats = per[0];
out:
  pthread_mutex_unlock(&srv->mu);
  wt_srv_resolved_clear(&r);
  free(per);
  return st;
}

/* --- push (stream ops) ---------------------------------------------------- */

wt_status *wt_srv_push_begin(wt_server *srv, wt_rpc_call *call,
                             uint64_t round_id,
                             const Wt__V1__WeightTransferUpdateInfo *info,
                             uint64_t packed_buffer_bytes, uint64_t *push_id) {
  wt_status *st = NULL;
  wt_srv_resolved r = {0};
  pthread_mutex_lock(&srv->mu);
  wait_abort_locked(srv);
  WT_CHECK(need_round_locked(srv, "PushWeights", round_id));
  WT_CHECK(need_idle_locked(srv, "PushWeights"));
  const wt_engine_ops *ops = wt_worker_engine_ops(srv->workers[0]);
  if (ops->push_chunk == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "PushWeights: backend '%s' does not take PushWeights; its data "
            "moves through UpdateWeights",
            srv->backend);
  WT_CHECK(wt_srv_resolve_update(srv, info, &r));
  r.u.round_id = srv->round_id;
  r.u.packed_buffer_bytes = packed_buffer_bytes;
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    st = wt_worker_push_begin(srv->workers[i], &r.u);
    if (st != NULL) {
      for (uint32_t j = 0; j < i; j++)
        wt_status_free(wt_worker_push_end(srv->workers[j], false, NULL));
      goto out;
    }
  }
  srv->push_id = ++srv->next_push_id;
  srv->push_call = call;
  srv->busy = "PushWeights";
  srv->last_activity_ms = wt_srv_now_ms();
  *push_id = srv->push_id;
  WT_LOGD("server",
          "round %" PRIu64 ": push %" PRIu64 " of %zu tensors, %" PRIu64
          " bytes",
          srv->round_id, srv->push_id, r.u.n, r.u.total_bytes);
out:
  pthread_mutex_unlock(&srv->mu);
  wt_srv_resolved_clear(&r);
  return st;
}

wt_status *wt_srv_push_chunk(wt_server *srv, uint64_t push_id, uint32_t bucket,
                             uint64_t offset, const struct iovec *iov,
                             size_t iovcnt) {
  wt_status *st = NULL;
  pthread_mutex_lock(&srv->mu);
  if (srv->push_id != push_id || srv->aborting) {
    st = srv->stopping
             ? wt_status_new(WT_UNAVAILABLE,
                             "PushWeights: the server is shutting down")
             : aborted_error(srv, "PushWeights", srv->aborted_round);
    pthread_mutex_unlock(&srv->mu);
    return st;
  }
  srv->writers++;
  srv->last_activity_ms = wt_srv_now_ms();
  pthread_mutex_unlock(&srv->mu);

  for (uint32_t i = 0; i < srv->nworkers && st == NULL; i++)
    st = wt_worker_push_chunk(srv->workers[i], bucket, offset, iov, iovcnt);

  pthread_mutex_lock(&srv->mu);
  srv->writers--;
  srv->last_activity_ms = wt_srv_now_ms();
  pthread_cond_broadcast(&srv->cv);
  pthread_mutex_unlock(&srv->mu);
  return st;
}

wt_status *wt_srv_push_end(wt_server *srv, uint64_t push_id, bool stream_ended,
                           wt_receive_stats *stats) {
  wt_status *st = NULL;
  pthread_mutex_lock(&srv->mu);
  if (srv->push_id != push_id) {
    /* Aborted under the push: the engines were reset by the abort. */
    if (stream_ended)
      st = srv->stopping
               ? wt_status_new(WT_UNAVAILABLE,
                               "PushWeights: the server is "
                               "shutting down")
               : aborted_error(srv, "PushWeights", srv->aborted_round);
    goto out;
  }
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_receive_stats s = {0};
    wt_status *e = wt_worker_push_end(srv->workers[i], stream_ended, &s);
    if (i == 0 && stats != NULL) *stats = s;
    if (st == NULL)
      st = e;
    else
      wt_status_free(e);
  }
  srv->push_id = 0;
  srv->push_call = NULL;
  srv->busy = NULL;
  srv->last_activity_ms = wt_srv_now_ms();
  pthread_cond_broadcast(&srv->cv);
out:
  pthread_mutex_unlock(&srv->mu);
  return st;
}

/* --- finish and abort ----------------------------------------------------- */

wt_status *wt_srv_finish(wt_server *srv, uint64_t round_id,
                         const char *version) {
  wt_status *st = NULL;
  char *copy = NULL;
  if (version == NULL || *version == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "FinishWeightUpdate: weight_version is empty; name "
                         "the version this round commits");
  /* Versions are kept (WT_VERSION_HISTORY of them) and sent in every
   * GetServerInfo and GetWeightVersion, which must stay small. */
  size_t vlen = strlen(version);
  if (vlen > WT_MAX_VERSION_BYTES)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "FinishWeightUpdate: weight_version is %zu bytes; at "
                         "most %d",
                         vlen, WT_MAX_VERSION_BYTES);
  pthread_mutex_lock(&srv->mu);
  wait_abort_locked(srv);
  WT_CHECK(need_round_locked(srv, "FinishWeightUpdate", round_id));
  WT_CHECK(need_idle_locked(srv, "FinishWeightUpdate"));
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    st = wt_worker_check_finish(srv->workers[i]);
    if (st != NULL) {
      st = wt_status_prefix(st, "FinishWeightUpdate");
      goto out;
    }
  }
  if ((copy = strdup(version)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "FinishWeightUpdate: out of memory");
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    st = wt_worker_prepare_finish(srv->workers[i]);
    if (st != NULL) {
      st = wt_status_prefix(st, "FinishWeightUpdate");
      wt_srv_abort_round_locked(srv, wt_status_message(st));
      goto out;
    }
  }
  /* A reader (ChecksumWeights) may hold a store's read lock for seconds:
   * wait for it without mu, so that every other call is answered meanwhile.
   * `writers` keeps an abort and the watchdog waiting, `busy` keeps other
   * data calls and finishes out. */
  uint64_t round = srv->round_id;
  srv->busy = "FinishWeightUpdate";
  srv->writers++;
  pthread_mutex_unlock(&srv->mu);
  for (uint32_t i = 0; i < srv->nworkers; i++)
    wt_param_store_write_lock(wt_worker_store(srv->workers[i]));
  pthread_mutex_lock(&srv->mu);
  srv->writers--;
  pthread_cond_broadcast(&srv->cv);
  if (srv->aborting || srv->round_id != round) {
    for (uint32_t i = 0; i < srv->nworkers; i++)
      wt_param_store_write_unlock(wt_worker_store(srv->workers[i]));
    st = aborted_error(srv, "FinishWeightUpdate", round);
    goto out;
  }
  size_t staged = 0;
  uint64_t bytes = 0;
  wt_param_store_round_stats(wt_worker_store(srv->workers[0]), &staged, NULL,
                             &bytes);
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_worker_commit(srv->workers[i]);
    wt_param_store_write_unlock(wt_worker_store(srv->workers[i]));
  }
  srv->last_activity_ms = wt_srv_now_ms();
  uint64_t seq = ++srv->sequence;
  wt_version_entry *e = &srv->history[seq % WT_VERSION_HISTORY];
  free(e->version);
  e->version = copy;
  copy = NULL;
  e->sequence = seq;
  e->committed_unix_ms = wt_srv_unix_ms();
  WT_LOGI("server",
          "round %" PRIu64 " committed version '%s' (%zu tensors, %" PRIu64
          " bytes, sequence %" PRIu64 ")",
          srv->round_id, version, staged, bytes, seq);
  srv->round_id = 0;
  srv->busy = NULL;
  pthread_cond_broadcast(&srv->cv);
out:
  pthread_mutex_unlock(&srv->mu);
  free(copy);
  return st;
}

void wt_srv_abort_round_locked(wt_server *srv, const char *reason) {
  if (srv->round_id == 0 || srv->aborting) return;
  uint64_t id = srv->round_id;
  char *why = strdup(reason ? reason : "aborted");
  srv->aborting = true;
  free(srv->abort_reason);
  srv->abort_reason = why;
  srv->aborted_round = id;
  if (srv->push_call != NULL) {
    /* Its handler may be blocked reading a client gone quiet. */
    char msg[512];
    snprintf(msg, sizeof(msg), "PushWeights: round %" PRIu64 " was aborted: %s",
             id, why ? why : "(out of memory)");
    wt_rpc_call_cancel(srv->push_call, WT_ABORTED, msg);
    srv->push_call = NULL;
  }
  srv->push_id = 0;
  srv->busy = NULL;
  for (uint32_t i = 0; i < srv->nworkers; i++)
    wt_worker_cancel(srv->workers[i]);
  while (srv->writers > 0 || srv->receivers > 0)
    pthread_cond_wait(&srv->cv, &srv->mu);
  for (uint32_t i = 0; i < srv->nworkers; i++) wt_worker_abort(srv->workers[i]);
  srv->round_id = 0;
  srv->aborting = false;
  pthread_cond_broadcast(&srv->cv);
  WT_LOGW("server", "round %" PRIu64 " aborted: %s", id,
          why ? why : "(out of memory)");
}

wt_status *wt_srv_abort(wt_server *srv, uint64_t round_id, const char *reason,
                        bool *aborted) {
  wt_status *st = NULL;
  *aborted = false;
  pthread_mutex_lock(&srv->mu);
  wait_abort_locked(srv);
  WT_CHECK(need_init_locked(srv, "AbortWeightUpdate"));
  if (srv->round_id == 0 && round_id == 0) goto out;
  WT_CHECK(need_round_locked(srv, "AbortWeightUpdate", round_id));
  char why[256];
  snprintf(why, sizeof(why), "AbortWeightUpdate%s%.200s",
           reason && *reason ? ": " : "", reason ? reason : "");
  wt_srv_abort_round_locked(srv, why);
  *aborted = true;
out:
  pthread_mutex_unlock(&srv->mu);
  return st;
}
