/* slot.c: one served model, a slot: a server's fixed settings and locks,
 * a store per worker and the workers, the round watchdog, the readers'
 * hashing threads and the export (see server_state.h). The model's server
 * is a slot with the process around it (server.c: options, tokens, the RPC
 * server, metrics, adapter sets); an adapter set's server is a slot beside
 * it (wt_srv_slot_start, for adapters.c). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leases.h"
#include "server_state.h"
#include "wt/log.h"
#include "wt/safetensors.h"
#include "wt/synthetic.h"
#include "wt/lock.h"

#define SYNTHETIC_PREFIX "synthetic:"

wt_status *wt_srv_listen_host(const char *listen, char **out) {
  const char *colon = strrchr(listen, ':');
  if (colon == NULL || colon == listen || colon[1] == '\0')
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "listen address '%s' is not HOST:PORT", listen);
  const char *b = listen, *e = colon;
  if (*b == '[' && e[-1] == ']') {
    b++;
    e--;
  }
  *out = strndup(b, (size_t)(e - b));
  if (*out == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "listen address: out of memory");
  return NULL;
}

/* Checks the backends' settings against their tables and keeps a copy. */
static wt_status *copy_engine_options(wt_server *srv,
                                      const wt_server_options *o) {
  wt_status *st = NULL;
  if (o->n_engine_options == 0) return NULL;
  if (o->engine_options == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "engine_options is NULL but n_engine_options "
            "is %zu",
            o->n_engine_options);
  WT_CHECK(wt_engine_options_check(srv->config.engines, o->engine_options,
                                   o->n_engine_options));
  srv->config.engine_options =
      calloc(o->n_engine_options, sizeof(wt_backend_option));
  if (srv->config.engine_options == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory for engine options");
  for (size_t i = 0; i < o->n_engine_options; i++) {
    wt_backend_option *d = &srv->config.engine_options[i];
    srv->config.n_engine_options = i + 1;
    d->key = strdup(o->engine_options[i].key);
    d->value =
        strdup(o->engine_options[i].value ? o->engine_options[i].value : "");
    if (d->key == NULL || d->value == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "server: out of memory for engine options");
  }
out:
  return st;
}

/* What an adapter set's server needs of the start's options
 * (wt_srv_config.slot). */
static wt_status *keep_slot_options(wt_server *srv,
                                    const wt_server_options *o) {
  wt_server_options *k = &srv->config.slot;
  *k = (wt_server_options){
      .staging = o->staging,
      .memory = o->memory,
      .round_timeout_ms = o->round_timeout_ms,
      .data_timeout_ms = o->data_timeout_ms,
      .max_receive_message_bytes = o->max_receive_message_bytes,
      .engine_check_ms = o->engine_check_ms,
      .lease_wait_ms = o->lease_wait_ms,
      .export_idle_ms = o->export_idle_ms,
      .export_frame_ms = o->export_frame_ms,
      .max_adapters = o->max_adapters,
      .max_adapter_bytes = o->max_adapter_bytes,
  };
  size_t nu = o->export_allow_uids ? o->n_export_allow_uids : 0;
  size_t ng = o->export_allow_gids ? o->n_export_allow_gids : 0;
  unsigned *uids = nu ? malloc(nu * sizeof(*uids)) : NULL;
  unsigned *gids = ng ? malloc(ng * sizeof(*gids)) : NULL;
  k->export_allow_uids = uids;
  k->export_allow_gids = gids;
  if (o->export_path != NULL) k->export_path = strdup(o->export_path);
  if ((nu && !uids) || (ng && !gids) || (o->export_path && !k->export_path))
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  if (nu) memcpy(uids, o->export_allow_uids, nu * sizeof(*uids));
  if (ng) memcpy(gids, o->export_allow_gids, ng * sizeof(*gids));
  k->n_export_allow_uids = nu;
  k->n_export_allow_gids = ng;
  return NULL;
}

wt_status *wt_srv_slot_new(const wt_server_options *o, uint32_t nworkers,
                           wt_server **out) {
  wt_status *st = NULL;
  wt_server *srv = calloc(1, sizeof(*srv));
  if (srv == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  wt_mutex_init(&srv->round.mu, WT_LOCK_ROUND, 0, "round.mu");
  wt_cond_init_monotonic(&srv->round.cv);
  wt_mutex_init(&srv->readers.mu, WT_LOCK_READERS, 0, "readers.mu");
  wt_mutex_init(&srv->watch.mu, WT_LOCK_WATCH, 0, "watch.mu");
  wt_mutex_init(&srv->health.mu, WT_LOCK_HEALTH, 0, "health.mu");
  wt_mutex_init(&srv->adapters.mu, WT_LOCK_ADAPTERS, 0, "adapters.mu");
  wt_mutex_init(&srv->adapters.create_mu, WT_LOCK_ADAPTERS_CREATE, 0,
                "adapters.create_mu");
  *out = srv; /* from here on, wt_srv_slot_free releases it */
  wt_srv_config *c = &srv->config;
  c->health_grace_ms = o->health_grace_ms;
  c->started_unix_ms = wt_unix_ms();
  c->staging = o->staging;
  c->memory = o->memory;
  c->embed = o->embed;
  c->round_timeout_ms = o->round_timeout_ms;
  c->data_timeout_ms = o->data_timeout_ms;
  c->header_timeout_ms = o->header_timeout_ms;
  c->drain_ms = o->drain_ms;
  c->max_send_bytes = o->max_send_message_bytes < 0 ? UINT64_MAX
                      : o->max_send_message_bytes == 0
                          ? WT_RPC_DEFAULT_MAX_SEND_BYTES
                          : (uint64_t)o->max_send_message_bytes;
  srv->readers.bytes_per_sec = o->reader_bytes_per_sec;
  c->listen = strdup(o->listen);
  c->model_name = strdup(o->model);
  srv->workers = calloc(nworkers, sizeof(*srv->workers));
  if (!c->listen || !c->model_name || !srv->workers)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  srv->nworkers = nworkers; /* what wt_srv_slot_free walks */
  WT_CHECK(wt_srv_listen_host(o->listen, &c->host));
  c->engines = o->engine_registry;
  if (c->engines == NULL) WT_CHECK(wt_engine_registry(&c->engines));
  WT_CHECK(copy_engine_options(srv, o));
  WT_CHECK(keep_slot_options(srv, o));
out:
  return st;
}

wt_status *wt_srv_slot_workers_start(wt_server *srv, const wt_server_options *o,
                                     const wt_device *devices) {
  wt_status *st = NULL;
  uint64_t max_msg = o->max_receive_message_bytes < 0 ? UINT64_MAX
                     : o->max_receive_message_bytes == 0
                         ? WT_RPC_DEFAULT_MAX_RECEIVE_BYTES
                         : (uint64_t)o->max_receive_message_bytes;
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_worker_options wo = {.rank = i,
                            .num_workers = srv->nworkers,
                            .device = devices[i],
                            .host = srv->config.host,
                            .data_timeout_ms = srv->config.data_timeout_ms,
                            .max_message_bytes = max_msg,
                            .engines = srv->config.engines,
                            .engine_options = srv->config.engine_options,
                            .n_engine_options = srv->config.n_engine_options,
                            .engine_check_ms = o->engine_check_ms};
    WT_CHECK(wt_worker_new(&wo, &srv->workers[i]));
  }
out:
  return st;
}

/* What one worker's thread loads. */
typedef struct load_arg {
  wt_server *srv;
  const char *layout;          /* synthetic, or */
  const wt_checkpoint *ck;     /* a checkpoint, shared read-only, or */
  const wt_tensor_meta *metas; /* an adapter set's layout (zeros) */
  size_t nmetas;
} load_arg;

static wt_status *load_store(wt_worker *w, void *arg) {
  load_arg *a = arg;
  wt_device dev = wt_worker_device(w);
  char name[32];
  snprintf(name, sizeof(name), "worker-%u", wt_worker_rank(w));
  wt_store_config cfg = {
      .staging = a->srv->config.staging,
      .memory =
          dev.type == WT_DEVICE_CUDA ? WT_MEM_DEVICE : a->srv->config.memory,
      .device = dev,
      .name = name,
      .embed = a->srv->config.embed,
  };
  wt_param_store *store = NULL;
  wt_status *st =
      a->layout != NULL
          ? wt_param_store_from_synthetic(a->layout, 0, &cfg, &store)
      : a->metas != NULL ? wt_param_store_new(a->metas, a->nmetas, &cfg, &store)
                         : wt_param_store_from_checkpoint(a->ck, &cfg, &store);
  if (st != NULL)
    return wt_status_prefix(st, "worker %u (%s)", wt_worker_rank(w),
                            wt_worker_device_name(w));
  wt_param_store_set_lock_index(store, wt_worker_rank(w));
  wt_worker_set_store(w, store);
  return NULL;
}

wt_status *wt_srv_slot_load_model(wt_server *srv, const char *model) {
  wt_status *st = NULL;
  wt_checkpoint *ck = NULL;
  wt_worker_op *ops = calloc(srv->nworkers, sizeof(*ops));
  int64_t t0 = wt_mono_ms();
  load_arg a = {.srv = srv};
  if (ops == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  if (strncmp(model, SYNTHETIC_PREFIX, strlen(SYNTHETIC_PREFIX)) == 0) {
    /* An unknown layout is the model's error, not any worker's. */
    wt_tensor_meta *metas = NULL;
    size_t n = 0;
    a.layout = model + strlen(SYNTHETIC_PREFIX);
    WT_CHECK(wt_synthetic_layout(a.layout, &metas, &n));
    wt_tensor_meta_array_free(metas, n);
  } else {
    WT_CHECK(wt_checkpoint_open(model, &ck));
  }
  a.ck = ck;
  wt_worker_op proto = {.kind = WT_WORKER_OP_CALL, .fn = load_store, .arg = &a};
  WT_CHECK(wt_srv_run_all(srv, ops, &proto));
  const wt_param_store *s0 = wt_worker_store(srv->workers[0]);
  WT_LOGI("server",
          "model '%s': %zu tensors, %" PRIu64
          " bytes per worker, %u worker(s), %s staging, %s memory (%" PRId64
          " ms)",
          model, wt_param_store_count(s0), wt_param_store_total_bytes(s0),
          srv->nworkers, wt_staging_name(srv->config.staging),
          wt_mem_kind_name(wt_param_store_memory(s0)), wt_mono_ms() - t0);
out:
  wt_checkpoint_close(ck);
  free(ops);
  if (st != NULL) st = wt_status_prefix(st, "model '%s'", model);
  return st;
}

/* Runs until stop: aborts a round idle longer than the round timeout. A
 * call waiting for its workers is not idle (the engines' own deadlines
 * bound it). Never blocks on the workers: an abort only signals. */
static void *watchdog_main(void *p) {
  wt_server *srv = p;
  int64_t period = srv->config.round_timeout_ms / 4;
  if (period < 10) period = 10;
  if (period > 1000) period = 1000;
  bool parked = false;
  wt_mutex_lock(&srv->round.mu);
  while (!srv->round.stopping) {
    /* While trainer ranks' calls are parked (multirank.c), look at them
     * often: one that was cut fails the round within this period. */
    wt_cond_wait_until(&srv->round.cv, &srv->round.mu,
                       wt_mono_ms() + (parked ? WT_PLAN_WATCH_MS : period));
    if (srv->round.stopping) break;
    wt_srv_plan_fail fail;
    parked = wt_srv_plan_watch_locked(srv, &fail);
    if (fail.why[0] != '\0')
      wt_srv_abort_round_locked(srv, fail.cause, fail.why);
    int64_t idle = wt_mono_ms() - atomic_load(&srv->round.last_activity_ms);
    /* Parked ranks are bounded by the data deadline instead. */
    if (srv->round.round_id != 0 && srv->round.engine_calls == 0 && !parked &&
        !srv->round.committing &&
        idle > (int64_t)srv->config.round_timeout_ms) {
      char why[128];
      snprintf(why, sizeof(why),
               "idle for %" PRId64
               " ms, longer than the round timeout of %u ms",
               idle, srv->config.round_timeout_ms);
      wt_srv_abort_round_locked(srv, WT_CAUSE_TIMEOUT, why);
    }
    /* Health watchers learn a change at the latest at the next tick. */
    wt_mutex_unlock(&srv->round.mu);
    wt_srv_health_changed(srv);
    wt_mutex_lock(&srv->round.mu);
  }
  wt_mutex_unlock(&srv->round.mu);
  return NULL;
}

wt_status *wt_srv_slot_watchdog_start(wt_server *srv) {
  wt_srv_touch(srv);
  int rc = pthread_create(&srv->watchdog, NULL, watchdog_main, srv);
  if (rc != 0)
    return wt_status_from_errno(rc, "server: starting the round watchdog");
  srv->watchdog_started = true;
  return NULL;
}

wt_status *wt_srv_slot_export_start(wt_server *srv,
                                    const wt_server_options *o) {
  wt_status *st = NULL;
  if (o->export_path == NULL) return NULL;
  wt_lease_limits lim = {0};
  WT_CHECK(wt_leases_new(&lim, &srv->ex.leases));
  srv->ex.lease_wait_ms = o->lease_wait_ms;
  WT_CHECK(wt_export_start(srv, o, &srv->ex.handle));
  if ((srv->ex.path = strdup(o->export_path)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
out:
  return st;
}

wt_status *wt_srv_slot_start(wt_server *base, const char *name,
                             const wt_tensor_meta *metas, size_t n,
                             const char *export_path, wt_server **out) {
  wt_status *st = NULL;
  wt_server *srv = NULL;
  wt_device *devices = NULL;
  char model[128];
  *out = NULL;
  snprintf(model, sizeof(model), "adapter:%s", name);
  wt_server_options o = base->config.slot;
  o.listen = base->config.listen;
  o.model = model;
  o.engine_registry = base->config.engines;
  o.engine_options = base->config.engine_options;
  o.n_engine_options = base->config.n_engine_options;
  o.embed = NULL; /* an embedding engine's buffers are the model's */
  o.export_path = export_path;
  o.max_send_message_bytes = base->config.max_send_bytes > INT32_MAX
                                 ? -1
                                 : (int)base->config.max_send_bytes;
  o.header_timeout_ms = base->config.header_timeout_ms;
  o.drain_ms = base->config.drain_ms;
  devices = calloc(base->nworkers, sizeof(*devices));
  if (devices == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  for (uint32_t i = 0; i < base->nworkers; i++)
    devices[i] = wt_worker_device(base->workers[i]);
  WT_CHECK(wt_srv_slot_new(&o, base->nworkers, &srv));
  srv->base = base;
  srv->auth.mode = base->auth.mode;
  WT_CHECK(wt_srv_slot_workers_start(srv, &o, devices));
  wt_worker_op *ops = calloc(srv->nworkers, sizeof(*ops));
  if (ops == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  load_arg a = {.srv = srv, .metas = metas, .nmetas = n};
  wt_worker_op proto = {.kind = WT_WORKER_OP_CALL, .fn = load_store, .arg = &a};
  st = wt_srv_run_all(srv, ops, &proto);
  free(ops);
  if (st != NULL) goto out;
  WT_CHECK(wt_srv_slot_watchdog_start(srv));
  WT_CHECK(wt_hash_pool_new(1, WT_SERVER_READER_NICE, &srv->readers.hashers));
  WT_CHECK(wt_srv_slot_export_start(srv, &o));
  *out = srv;
  srv = NULL;
out:
  free(devices);
  if (srv != NULL) wt_srv_slot_stop(srv);
  return st;
}

void wt_srv_slot_shutdown(wt_server *srv) {
  wt_mutex_lock(&srv->round.mu);
  if (!srv->round.stopping) {
    srv->round.stopping = true;
    wt_srv_abort_round_locked(srv, WT_CAUSE_SHUTDOWN,
                              "the server is shutting down");
    /* An init or a commit waiting on the engines returns too. */
    for (uint32_t i = 0; i < srv->nworkers; i++)
      if (srv->workers[i] != NULL) wt_worker_cancel(srv->workers[i]);
  }
  pthread_cond_broadcast(&srv->round.cv);
  wt_mutex_unlock(&srv->round.mu);
  wt_srv_end_watchers(srv);
  wt_srv_health_changed(srv); /* NOT_SERVING, then the streams end */
  wt_srv_health_end(srv);
}

void wt_srv_slot_free(wt_server *srv) {
  if (srv->watchdog_started) pthread_join(srv->watchdog, NULL);
  wt_srv_metrics_stop(srv->metrics.http); /* it reads everything below */
  wt_srv_rounds_free(srv);
  wt_rpc_server_destroy(srv->rpc);
  wt_export_stop(srv->ex.handle); /* its consumers' leases end with it */
  wt_leases_free(srv->ex.leases);
  free(srv->ex.path);
  wt_hash_pool_free(srv->readers.hashers);
  for (uint32_t i = 0; srv->workers != NULL && i < srv->nworkers; i++)
    wt_worker_destroy(srv->workers[i]);
  free(srv->workers);
  for (size_t i = 0; i < WT_VERSION_HISTORY; i++)
    free(srv->round.history[i].version);
  free(srv->round.abort_reason);
  wt_srv_plan_free(srv->round.plan);
  if (srv->auth.token_path != NULL)
    wt_tokens_unlink_if_ours(srv->auth.token_path, srv->auth.tokens,
                             srv->auth.ntokens);
  free(srv->auth.token_path);
  free(srv->auth.token_dir);
  wt_tokens_free(srv->auth.tokens, srv->auth.ntokens);
  free(srv->config.listen);
  free(srv->config.host);
  free(srv->config.model_name);
  for (size_t i = 0; i < srv->config.n_engine_options; i++) {
    free((char *)srv->config.engine_options[i].key);
    free((char *)srv->config.engine_options[i].value);
  }
  free(srv->config.engine_options);
  free((char *)srv->config.slot.export_path);
  free((unsigned *)srv->config.slot.export_allow_uids);
  free((unsigned *)srv->config.slot.export_allow_gids);
  wt_mutex_destroy(&srv->adapters.mu);
  wt_mutex_destroy(&srv->adapters.create_mu);
  wt_mutex_destroy(&srv->watch.mu);
  wt_mutex_destroy(&srv->health.mu);
  pthread_cond_destroy(&srv->round.cv);
  wt_mutex_destroy(&srv->round.mu);
  wt_mutex_destroy(&srv->readers.mu);
  free(srv);
}

void wt_srv_slot_stop(wt_server *srv) {
  if (srv == NULL) return;
  wt_srv_slot_shutdown(srv);
  wt_srv_slot_free(srv);
}

/* --- what GetServerInfo shows of the slot -------------------------------- */

/* What a backend's engine table says it can do; a lazy module that is not
 * loaded stays unloaded (asking for its table would dlopen it). */
static void backend_info(wt_server *srv, const wt_registry_entry *e,
                         wt_srv_backend_info *bi) {
  bi->name = e->name;
  bi->loaded = e->loaded;
  bi->n_memory_kinds = 0;
  bi->reason[0] = '\0';
  if (!e->loaded) return;
  const wt_engine_ops *ops = NULL;
  wt_status *st = wt_engine_lookup(srv->config.engines, e->name, &ops);
  if (st != NULL) {
    wt_status_free(st);
    bi->loaded = false;
    return;
  }
  uint32_t takes = ops->memory_kinds ? ops->memory_kinds : WT_MEM_HOST_KINDS;
  for (unsigned k = 0; k < WT_MEM_KIND_COUNT; k++)
    if (takes & WT_MEM_BIT(k))
      bi->memory_kinds[bi->n_memory_kinds++] = wt_mem_kind_name((wt_mem_kind)k);
  bi->cross_host = (ops->caps & WT_ENGINE_CROSS_HOST) != 0;
  bi->survives_abort = (ops->caps & WT_ENGINE_SURVIVES_ABORT) != 0;
  /* Available: the host has what it needs, and the stores suit it. */
  wt_mem_kind store = wt_param_store_memory(wt_worker_store(srv->workers[0]));
  st = ops->probe ? ops->probe() : NULL;
  if (st == NULL && (takes & WT_MEM_BIT(store)) && ops->probe_memory)
    st = ops->probe_memory(store);
  if (st == NULL && !(takes & WT_MEM_BIT(store)))
    st = wt_status_new(WT_FAILED_PRECONDITION,
                       "it cannot receive into '%s' memory (this server's "
                       "param stores)",
                       wt_mem_kind_name(store));
  bi->available = st == NULL;
  if (st != NULL) {
    snprintf(bi->reason, sizeof(bi->reason), "%s", wt_status_message(st));
    wt_status_free(st);
  }
}

wt_status *wt_srv_backends_info(wt_server *srv, wt_srv_backend_info **out,
                                size_t *n) {
  wt_registry_entry *entries = NULL;
  size_t nentries = 0;
  *out = NULL;
  *n = 0;
  wt_status *st = wt_registry_names(srv->config.engines, &entries, &nentries);
  if (st != NULL) return st;
  wt_srv_backend_info *bi = calloc(nentries ? nentries : 1, sizeof(*bi));
  if (bi == NULL) {
    free(entries);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  }
  for (size_t i = 0; i < nentries; i++) backend_info(srv, &entries[i], &bi[i]);
  free(entries);
  *out = bi;
  *n = nentries;
  return NULL;
}

void wt_srv_workers_info(const wt_server *srv, wt_srv_worker_info *out) {
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    const wt_worker *w = srv->workers[i];
    const wt_param_store *ps = wt_worker_store(w);
    wt_srv_worker_info *wi = &out[i];
    wt_worker_get_status(w, &wi->status);
    wi->rank = wt_worker_rank(w);
    wi->device = wt_worker_device_name(w);
    wi->memory_kind = wt_mem_kind_name(wt_param_store_memory(ps));
    wi->bytes_held = wt_param_store_bytes_held(ps);
    wi->store_complete = wt_param_store_complete(ps);
  }
}
