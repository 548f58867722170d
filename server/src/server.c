/* server.c: an embeddable wt server's lifecycle: options, devices and
 * workers, model loading, the round watchdog, start and stop (see
 * wt/server.h). */

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "leases.h"
#include "server_state.h"
#include "wt/log.h"
#include "wt/safetensors.h"
#include "wt/synthetic.h"
#include "wt/lock.h"

#define SYNTHETIC_PREFIX "synthetic:"
/* More workers than this is a typo, not a machine. */
#define MAX_WORKERS 1024u
/* Reader calls that may wait for a thread, per reader thread. */
#define READER_QUEUE_FACTOR 64
/* Round calls that may wait for a thread, per round thread. */
#define ROUND_QUEUE_FACTOR 4

/* "host" of "host:port" or "[v6]:port"; the caller frees it. */
static wt_status *listen_host(const char *listen, char **out) {
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

/* Whether `host` (as listen_host gives it) is a loopback address: only
 * processes on this machine can reach a port bound to it. */
static bool loopback_host(const char *host) {
  if (strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0) return true;
  struct in_addr a4;
  if (inet_pton(AF_INET, host, &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  return false;
}

/* Refuses what would hand the weights to anyone who reaches the port. */
static wt_status *check_exposure(const wt_server_options *o, const char *host) {
  bool tls = o->tls_cert != NULL;
  if (!tls && !loopback_host(host) && !o->insecure)
    return wt_status_new(
        WT_INVALID_ARGUMENT,
        "--listen %s: not a loopback address, and TLS is off: anyone who "
        "reaches the port could read the traffic and, without tokens, drive "
        "the weights; give --tls-cert and --tls-key (and --token-file or "
        "--tls-ca), or --insecure to listen in plaintext anyway",
        o->listen);
  if (!loopback_host(host) && o->token_file == NULL && !o->generate_tokens &&
      o->tls_ca == NULL)
    WT_LOGW("server",
            "--listen %s without --token-file or --tls-ca: every client that "
            "reaches the port may drive the weights",
            o->listen);
  return NULL;
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

/* Every worker loads the whole model into its own store, all at once, each
 * on its own thread (so device memory is filled on its device). */
static wt_status *load_model(wt_server *srv, const char *model) {
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
    parked = wt_srv_plan_watch_locked(srv);
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

/* From wt_rpc_server_shutdown (or stop): no new work, abort the round so
 * that handlers waiting on it return, end watch streams. */
static void on_shutdown(void *user) {
  wt_server *srv = user;
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
  wt_srv_adapters_shutdown(srv);
}

void wt_srv_shutdown(wt_server *srv) {
  on_shutdown(srv);
}

static void server_free(wt_server *srv) {
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

/* The workers' devices: one per listed device, or `workers` cpu workers. */
static wt_status *worker_devices(const wt_server_options *o, wt_device **out,
                                 uint32_t *n) {
  wt_status *st = NULL;
  wt_device *list = NULL;
  size_t count = 0;
  *out = NULL;
  *n = 0;
  if (o->devices == NULL || *o->devices == '\0' ||
      strcmp(o->devices, "cpu") == 0) {
    uint32_t w = o->workers ? o->workers : 1;
    if (w > MAX_WORKERS)
      WT_FAIL(WT_INVALID_ARGUMENT, "workers is %u; at most %u", w, MAX_WORKERS);
    list = calloc(w, sizeof(*list));
    if (list == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
    count = w;
  } else {
    WT_CHECK(wt_status_prefix(wt_device_list_parse(o->devices, &list, &count),
                              "devices"));
    if (o->workers > 1)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "workers (%u) applies to cpu workers; devices '%s' makes one "
              "worker per device",
              o->workers, o->devices);
    if (count > MAX_WORKERS)
      WT_FAIL(WT_INVALID_ARGUMENT, "devices: %zu workers; at most %u", count,
              MAX_WORKERS);
    for (size_t i = 0; i < count; i++)
      if (list[i].type == WT_DEVICE_CUDA && o->memory != WT_MEM_HOST)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "memory '%s' applies to cpu workers; cuda:%d holds device "
                "memory",
                wt_mem_kind_name(o->memory), list[i].index);
  }
  *out = list;
  *n = (uint32_t)count;
  list = NULL;
out:
  free(list);
  return st;
}

void wt_server_options_defaults(wt_server_options *o) {
  if (o->listen == NULL || *o->listen == '\0')
    o->listen = WT_SERVER_DEFAULT_LISTEN;
  if (o->model == NULL || *o->model == '\0') o->model = WT_SERVER_DEFAULT_MODEL;
  if (o->round_timeout_ms == 0)
    o->round_timeout_ms = WT_SERVER_DEFAULT_ROUND_TIMEOUT_MS;
  if (o->data_timeout_ms == 0)
    o->data_timeout_ms = WT_SERVER_DEFAULT_DATA_TIMEOUT_MS;
  if (o->header_timeout_ms == 0)
    o->header_timeout_ms = WT_SERVER_DEFAULT_HEADER_TIMEOUT_MS;
  if (o->drain_ms == 0) o->drain_ms = WT_SERVER_DEFAULT_DRAIN_MS;
  if (o->max_round_calls == 0)
    o->max_round_calls = WT_SERVER_DEFAULT_ROUND_CALLS;
  if (o->max_reader_calls == 0)
    o->max_reader_calls = WT_SERVER_DEFAULT_READER_CALLS;
  if (o->max_watchers == 0) o->max_watchers = WT_SERVER_DEFAULT_WATCHERS;
  if (o->max_reader_calls_per_peer == 0)
    o->max_reader_calls_per_peer = WT_SERVER_DEFAULT_READER_CALLS_PER_PEER;
  if (o->max_watchers_per_peer == 0)
    o->max_watchers_per_peer = WT_SERVER_DEFAULT_WATCHERS_PER_PEER;
  if (o->reader_bytes_per_sec == 0)
    o->reader_bytes_per_sec = WT_SERVER_DEFAULT_READER_BYTES_PER_SEC;
  if (o->lease_wait_ms == 0) o->lease_wait_ms = WT_SERVER_DEFAULT_LEASE_WAIT_MS;
  if (o->max_adapters == 0) o->max_adapters = WT_SERVER_DEFAULT_MAX_ADAPTERS;
  if (o->max_adapter_bytes == 0)
    o->max_adapter_bytes = WT_SERVER_DEFAULT_MAX_ADAPTER_BYTES;
}

/* The options' ranges (after wt_server_options_defaults), before anything
 * starts. INVALID_ARGUMENT naming the option. */
static wt_status *check_options(const wt_server_options *o) {
  if (o->max_reader_calls_per_peer < 0 || o->max_watchers_per_peer < 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "max_reader_calls_per_peer %d, max_watchers_per_peer "
                         "%d: at least 1",
                         o->max_reader_calls_per_peer,
                         o->max_watchers_per_peer);
  if (o->max_round_calls < 0 || o->max_round_calls > 4096)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "max_round_calls is %d; 1 to 4096",
                         o->max_round_calls);
  if (o->max_reader_calls < 0 || o->max_reader_calls > 4096)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "max_reader_calls is %d; 1 to 4096",
                         o->max_reader_calls);
  if (o->max_watchers < 0 || o->max_watchers > 1000000)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "max_watchers is %d; 1 to 1000000", o->max_watchers);
  if (wt_staging_name(o->staging) == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "staging %d is not shadow or inplace",
                         (int)o->staging);
  if (!wt_mem_kind_host_addressable(o->memory))
    return wt_status_new(
        WT_INVALID_ARGUMENT,
        "memory '%s' is not a host memory kind (host, shared, pinned); "
        "device memory comes with cuda:N devices",
        wt_mem_kind_name(o->memory));
  return NULL;
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

/* A server with its fixed settings and its locks, no thread yet. */
static wt_status *server_new(const wt_server_options *o, uint32_t nworkers,
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
  *out = srv; /* from here on, wt_server_stop releases it */
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
  srv->nworkers = nworkers; /* what wt_server_stop walks */
  WT_CHECK(listen_host(o->listen, &c->host));
  c->engines = o->engine_registry;
  if (c->engines == NULL) WT_CHECK(wt_engine_registry(&c->engines));
  WT_CHECK(copy_engine_options(srv, o));
  WT_CHECK(keep_slot_options(srv, o));
out:
  return st;
}

/* The bearer tokens: a --token-file's, generated ones (checked before the
 * model loads: a runtime directory someone else made fails the start at
 * once), or none. */
static wt_status *auth_start(wt_server *srv, const wt_server_options *o) {
  wt_status *st = NULL;
  wt_srv_auth *a = &srv->auth;
  if (o->token_file != NULL) {
    st = wt_tokens_load(o->token_file, &a->tokens, &a->ntokens);
    if (st != NULL) return wt_status_prefix(st, "--token-file");
    a->mode = "tokens";
  } else if (o->generate_tokens) {
    char dir[4096];
    WT_CHECK(wt_runtime_dir(o->runtime_base, true, dir, sizeof(dir)));
    WT_CHECK(wt_tokens_generate(&a->tokens, &a->ntokens));
    if ((a->token_dir = strdup(dir)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
    a->mode = "generated";
  } else {
    a->mode = "none";
  }
out:
  return st;
}

/* One worker per device, each with the data deadline and the engines. */
static wt_status *workers_start(wt_server *srv, const wt_server_options *o,
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

/* The round watchdog (aborts a round idle past the round timeout). */
static wt_status *watchdog_start(wt_server *srv) {
  wt_srv_touch(srv);
  int rc = pthread_create(&srv->watchdog, NULL, watchdog_main, srv);
  if (rc != 0)
    return wt_status_from_errno(rc, "server: starting the round watchdog");
  srv->watchdog_started = true;
  return NULL;
}

/* The readers' hashing threads: half the CPUs, at most 8, niced. */
static wt_status *readers_start(wt_server *srv) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned nh = cpus > 1 ? (unsigned)(cpus / 2) : 1;
  return wt_hash_pool_new(nh > 8 ? 8 : nh, WT_SERVER_READER_NICE,
                          &srv->readers.hashers);
}

/* The export and its leases (--export). */
static wt_status *export_start(wt_server *srv, const wt_server_options *o) {
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

/* The admission classes of the service and the RPC server serving it. */
static wt_status *rpc_start(wt_server *srv, const wt_server_options *o) {
  wt_status *st = NULL;
  srv->classes[WT_CLASS_ROUND] =
      (wt_rpc_class){.name = "round",
                     .max_running = o->max_round_calls,
                     .max_queued = o->max_round_calls * ROUND_QUEUE_FACTOR,
                     .option = "wt-server --max-round-calls",
                     /* a trainer's reader calls too (GetServerInfo before
                      * a push): readers never delay or refuse them */
                     .trainers = true};
  /* Readers: a quota per peer (their hashing runs on readers.hashers,
   * below the rounds' threads when the CPU is short). */
  srv->classes[WT_CLASS_READER] = (wt_rpc_class){
      .name = "reader",
      .max_running = o->max_reader_calls,
      .max_queued = o->max_reader_calls * READER_QUEUE_FACTOR,
      .option = "wt-server --max-reader-calls",
      .max_per_peer = o->max_reader_calls_per_peer,
      .option_per_peer = "wt-server --max-reader-calls-per-peer"};
  srv->classes[WT_CLASS_HEALTH] = (wt_rpc_class){.name = "health",
                                                 .max_running = 2,
                                                 .max_queued = 64,
                                                 .max_per_peer = 8,
                                                 .per_peer_cap = true};
  /* Reflection (grpcurl): a stream holds its thread, so few at once and
   * two per peer; one silent for 10 s is ended (reflection.c). */
  srv->classes[WT_CLASS_REFLECTION] = (wt_rpc_class){.name = "reflection",
                                                     .max_running = 4,
                                                     .max_queued = 16,
                                                     .max_per_peer = 2};
  /* Health.Watch holds no thread; a kubelet or a load balancer needs a
   * few streams, a stranger gets no more than 4 per peer. */
  srv->classes[WT_CLASS_HEALTH_WATCH] = (wt_rpc_class){.name = "health-watch",
                                                       .max_running = 256,
                                                       .max_per_peer = 4,
                                                       .per_peer_cap = true};
  srv->classes[WT_CLASS_WATCH] =
      (wt_rpc_class){.name = "watch",
                     .max_running = o->max_watchers,
                     .option = "wt-server --max-watchers",
                     .max_per_peer = o->max_watchers_per_peer,
                     .option_per_peer = "wt-server --max-watchers-per-peer"};
  size_t nmethods = 0;
  const wt_rpc_method *methods = wt_srv_methods(&nmethods);
  wt_rpc_server_options ro = {
      .listen = o->listen,
      .max_receive_message_bytes = o->max_receive_message_bytes,
      .max_send_message_bytes = o->max_send_message_bytes,
      .classes = srv->classes,
      .nclasses = WT_NCLASSES,
      .on_shutdown = on_shutdown,
      .tls = &(wt_rpc_tls){.cert_file = o->tls_cert,
                           .key_file = o->tls_key,
                           .ca_file = o->tls_ca},
      .tokens = srv->auth.tokens,
      .ntokens = srv->auth.ntokens,
      .max_connections = o->max_connections,
      .auth_grace_ms = o->auth_grace_ms,
  };
  WT_CHECK(wt_rpc_server_new(&ro, methods, nmethods, srv, &srv->rpc));
  WT_CHECK(wt_rpc_server_start(srv->rpc));
out:
  return st;
}

/* The Prometheus endpoint (--metrics-listen): loopback unless --insecure. */
static wt_status *metrics_start(wt_server *srv, const wt_server_options *o) {
  if (o->metrics_listen == NULL) return NULL;
  char *mhost = NULL;
  wt_status *st = listen_host(o->metrics_listen, &mhost);
  if (st != NULL) return wt_status_prefix(st, "--metrics-listen");
  if (!loopback_host(mhost) && !o->insecure)
    st = wt_status_new(
        WT_INVALID_ARGUMENT,
        "--metrics-listen %s: not a loopback address; the metrics are "
        "plaintext HTTP without tokens: give --insecure to serve them "
        "beyond this host anyway",
        o->metrics_listen);
  else
    st =
        wt_srv_metrics_start(srv, o->metrics_listen, mhost, &srv->metrics.http);
  free(mhost);
  return st;
}

/* Generated tokens go to the runtime directory once the port is known. */
static wt_status *tokens_publish(wt_server *srv) {
  wt_status *st = NULL;
  if (srv->auth.token_dir == NULL) return NULL;
  char path[4200];
  wt_runtime_token_path(srv->auth.token_dir, wt_rpc_server_port(srv->rpc), path,
                        sizeof(path));
  WT_CHECK(wt_tokens_write(path, srv->auth.tokens, srv->auth.ntokens));
  if ((srv->auth.token_path = strdup(path)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  WT_LOGI("server",
          "tokens: generated in %s (trainer and reader, mode 0600); wt-push, "
          "wt-ctl and the client library of this user on this host find "
          "them (--token-file to give your own, --no-auth to run open)",
          path);
out:
  return st;
}

wt_status *wt_server_start(const wt_server_options *opts, wt_server **out) {
  wt_status *st = NULL;
  wt_server *srv = NULL;
  wt_device *devices = NULL;
  uint32_t ndevices = 0;
  if (out == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "server: 'out' is NULL");
  *out = NULL;
  wt_server_options o = opts ? *opts : (wt_server_options){0};
  wt_server_options_defaults(&o);
  WT_CHECK(check_options(&o));
  WT_CHECK(worker_devices(&o, &devices, &ndevices));
  /* A kind this machine lacks fails here, naming it and why, before any
   * thread starts. */
  for (uint32_t i = 0; i < ndevices; i++)
    WT_CHECK(wt_mem_kind_available(
        devices[i].type == WT_DEVICE_CUDA ? WT_MEM_DEVICE : o.memory,
        devices[i]));
  WT_CHECK(server_new(&o, ndevices, &srv));
  WT_CHECK(check_exposure(&o, srv->config.host));
  WT_CHECK(auth_start(srv, &o));
  WT_CHECK(workers_start(srv, &o, devices));
  WT_CHECK(load_model(srv, o.model));
  WT_CHECK(watchdog_start(srv));
  WT_CHECK(readers_start(srv));
  WT_CHECK(export_start(srv, &o));
  WT_CHECK(rpc_start(srv, &o));
  WT_CHECK(metrics_start(srv, &o));
  WT_CHECK(tokens_publish(srv));
  WT_LOGI("server", "serving wt.v1.WeightTransfer on %s (port %d; %s%s)",
          o.listen, wt_rpc_server_port(srv->rpc),
          o.tls_cert ? (o.tls_ca ? "mutual TLS" : "TLS") : "plaintext",
          srv->auth.token_dir ? ", generated bearer tokens"
          : srv->auth.ntokens ? ", bearer tokens"
                              : ", no tokens: any process that reaches the "
                                "port may call");
  *out = srv;
  srv = NULL;
out:
  free(devices);
  if (srv != NULL) wt_server_stop(srv);
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
  WT_CHECK(server_new(&o, base->nworkers, &srv));
  srv->base = base;
  srv->auth.mode = base->auth.mode;
  WT_CHECK(workers_start(srv, &o, devices));
  wt_worker_op *ops = calloc(srv->nworkers, sizeof(*ops));
  if (ops == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  load_arg a = {.srv = srv, .metas = metas, .nmetas = n};
  wt_worker_op proto = {.kind = WT_WORKER_OP_CALL, .fn = load_store, .arg = &a};
  st = wt_srv_run_all(srv, ops, &proto);
  free(ops);
  if (st != NULL) goto out;
  WT_CHECK(watchdog_start(srv));
  WT_CHECK(wt_hash_pool_new(1, WT_SERVER_READER_NICE, &srv->readers.hashers));
  WT_CHECK(export_start(srv, &o));
  *out = srv;
  srv = NULL;
out:
  free(devices);
  if (srv != NULL) wt_server_stop(srv);
  return st;
}

int wt_server_metrics_port(const wt_server *srv) {
  return srv ? wt_srv_metrics_port(srv->metrics.http) : 0;
}

int wt_server_port(const wt_server *srv) {
  return srv && srv->rpc ? wt_rpc_server_port(srv->rpc) : 0;
}

uint32_t wt_server_workers(const wt_server *srv) {
  return srv ? srv->nworkers : 0;
}

wt_param_store *wt_server_store(wt_server *srv, uint32_t rank) {
  if (srv == NULL || rank >= srv->nworkers || srv->workers[rank] == NULL)
    return NULL;
  return wt_worker_store(srv->workers[rank]);
}

void wt_server_auth_counts(wt_server *srv, wt_rpc_auth_counts *out) {
  memset(out, 0, sizeof(*out));
  if (srv != NULL && srv->rpc != NULL) wt_rpc_server_auth_counts(srv->rpc, out);
}

void wt_server_conn_counts(wt_server *srv, wt_rpc_conn_counts *out) {
  memset(out, 0, sizeof(*out));
  if (srv != NULL && srv->rpc != NULL) wt_rpc_server_conn_counts(srv->rpc, out);
}

void wt_server_admission(wt_server *srv, wt_server_class cls, int *running,
                         int *queued, int *threads) {
  wt_rpc_class_load l = {0};
  if (srv != NULL && srv->rpc != NULL && cls >= WT_SERVER_CLASS_ROUND &&
      cls <= WT_SERVER_CLASS_WATCH)
    wt_rpc_server_class_load(srv->rpc, (size_t)cls, &l);
  if (running) *running = l.running;
  if (queued) *queued = l.queued;
  if (threads) *threads = l.threads;
}

void wt_server_stop(wt_server *srv) {
  if (srv == NULL) return;
  if (srv->rpc != NULL && srv->config.health_grace_ms > 0) {
    /* Probes see NOT_SERVING while every call is still served. */
    wt_mutex_lock(&srv->round.mu);
    srv->health.down = true;
    wt_mutex_unlock(&srv->round.mu);
    wt_srv_health_changed(srv);
    struct timespec ts = {
        srv->config.health_grace_ms / 1000,
        (long)(srv->config.health_grace_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (srv->rpc != NULL) wt_rpc_server_shutdown(srv->rpc, srv->config.drain_ms);
  /* Also when the RPC server never started, so the watchdog ends. */
  on_shutdown(srv);
  /* No handler runs now: the adapter sets' servers go. */
  wt_srv_adapters_stop(srv);
  if (srv->watchdog_started) pthread_join(srv->watchdog, NULL);
  server_free(srv);
}
