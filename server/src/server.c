/* server.c: an embeddable wt server's lifecycle: options, model loading,
 * the round watchdog, start and stop (see wt/server.h). */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server_internal.h"
#include "wt/log.h"
#include "wt/safetensors.h"

#define SYNTHETIC_PREFIX "synthetic:"
/* More workers than this is a typo, not a machine. */
#define MAX_WORKERS 1024u

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

/* One store per worker, each holding the whole model. */
static wt_status *load_model(wt_server *srv, const char *model,
                             wt_param_store **stores) {
  wt_status *st = NULL;
  wt_checkpoint *ck = NULL;
  int64_t t0 = wt_srv_now_ms();
  if (strncmp(model, SYNTHETIC_PREFIX, strlen(SYNTHETIC_PREFIX)) == 0) {
    const char *layout = model + strlen(SYNTHETIC_PREFIX);
    for (uint32_t i = 0; i < srv->nworkers; i++)
      WT_CHECK(
          wt_param_store_from_synthetic(layout, 0, srv->staging, &stores[i]));
  } else {
    WT_CHECK(wt_checkpoint_open(model, &ck));
    for (uint32_t i = 0; i < srv->nworkers; i++)
      WT_CHECK(wt_param_store_from_checkpoint(ck, srv->staging, &stores[i]));
  }
  WT_LOGI("server",
          "model '%s': %zu tensors, %" PRIu64
          " bytes per worker, %u worker(s), %s staging (%" PRId64 " ms)",
          model, wt_param_store_count(stores[0]),
          wt_param_store_total_bytes(stores[0]), srv->nworkers,
          wt_staging_name(srv->staging), wt_srv_now_ms() - t0);
out:
  wt_checkpoint_close(ck);
  if (st != NULL) st = wt_status_prefix(st, "model '%s'", model);
  return st;
}

/* Runs until stop: aborts a round idle longer than the round timeout. A
 * receive in progress is not idle (the engine's own deadlines bound it). */
static void *watchdog_main(void *p) {
  wt_server *srv = p;
  int64_t period = srv->round_timeout_ms / 4;
  if (period < 10) period = 10;
  if (period > 1000) period = 1000;
  pthread_mutex_lock(&srv->mu);
  while (!srv->stopping) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += period / 1000;
    ts.tv_nsec += (period % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
    if (srv->stopping) break;
    int64_t idle = wt_srv_now_ms() - srv->last_activity_ms;
    if (srv->round_id != 0 && !srv->aborting && srv->receivers == 0 &&
        srv->writers == 0 && idle > (int64_t)srv->round_timeout_ms) {
      char why[128];
      snprintf(why, sizeof(why),
               "idle for %" PRId64
               " ms, longer than the round timeout of %u ms",
               idle, srv->round_timeout_ms);
      wt_srv_abort_round_locked(srv, why);
    }
  }
  pthread_mutex_unlock(&srv->mu);
  return NULL;
}

/* From wt_rpc_server_shutdown (or stop): no new work, abort the round so
 * that handlers blocked on it return, end watch streams. */
static void on_shutdown(void *user) {
  wt_server *srv = user;
  pthread_mutex_lock(&srv->mu);
  if (!srv->stopping) {
    srv->stopping = true;
    wt_srv_abort_round_locked(srv, "the server is shutting down");
    for (uint32_t i = 0; i < srv->nworkers; i++)
      if (srv->workers[i] != NULL) wt_worker_cancel(srv->workers[i]);
  }
  pthread_cond_broadcast(&srv->cv);
  pthread_mutex_unlock(&srv->mu);
}

static void server_free(wt_server *srv) {
  wt_rpc_server_destroy(srv->rpc);
  for (uint32_t i = 0; srv->workers != NULL && i < srv->nworkers; i++)
    wt_worker_destroy(srv->workers[i]);
  free(srv->workers);
  for (size_t i = 0; i < WT_VERSION_HISTORY; i++) free(srv->history[i].version);
  free(srv->abort_reason);
  free(srv->listen);
  free(srv->host);
  free(srv->model_name);
  pthread_cond_destroy(&srv->cv);
  pthread_mutex_destroy(&srv->mu);
  free(srv);
}

wt_status *wt_server_start(const wt_server_options *opts, wt_server **out) {
  wt_status *st = NULL;
  wt_server *srv = NULL;
  wt_param_store **stores = NULL;
  wt_server_options o = {0};
  if (out == NULL) WT_FAIL(WT_INVALID_ARGUMENT, "server: 'out' is NULL");
  *out = NULL;
  if (opts != NULL) o = *opts;
  if (o.listen == NULL || *o.listen == '\0')
    o.listen = WT_SERVER_DEFAULT_LISTEN;
  if (o.model == NULL || *o.model == '\0') o.model = WT_SERVER_DEFAULT_MODEL;
  if (o.workers == 0) o.workers = 1;
  if (o.round_timeout_ms == 0)
    o.round_timeout_ms = WT_SERVER_DEFAULT_ROUND_TIMEOUT_MS;
  if (o.engine_timeout_ms == 0)
    o.engine_timeout_ms = WT_SERVER_DEFAULT_ENGINE_TIMEOUT_MS;
  if (o.drain_ms == 0) o.drain_ms = WT_SERVER_DEFAULT_DRAIN_MS;
  if (o.workers > MAX_WORKERS)
    WT_FAIL(WT_INVALID_ARGUMENT, "workers is %u; at most %u", o.workers,
            MAX_WORKERS);
  if (wt_staging_name(o.staging) == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "staging %d is not shadow or inplace",
            (int)o.staging);

  srv = calloc(1, sizeof(*srv));
  if (srv == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  pthread_mutex_init(&srv->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&srv->cv, &ca);
  pthread_condattr_destroy(&ca);
  srv->staging = o.staging;
  srv->round_timeout_ms = o.round_timeout_ms;
  srv->engine_timeout_ms = o.engine_timeout_ms;
  srv->drain_ms = o.drain_ms;
  srv->nworkers = o.workers;
  srv->listen = strdup(o.listen);
  srv->model_name = strdup(o.model);
  srv->workers = calloc(o.workers, sizeof(*srv->workers));
  stores = calloc(o.workers, sizeof(*stores));
  if (!srv->listen || !srv->model_name || !srv->workers || !stores)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "server: out of memory");
  WT_CHECK(listen_host(o.listen, &srv->host));
  srv->engines = o.engine_registry;
  if (srv->engines == NULL) WT_CHECK(wt_engine_registry(&srv->engines));

  WT_CHECK(load_model(srv, o.model, stores));
  uint64_t max_msg = o.max_receive_message_bytes < 0 ? UINT64_MAX
                     : o.max_receive_message_bytes == 0
                         ? WT_RPC_DEFAULT_MAX_RECEIVE_BYTES
                         : (uint64_t)o.max_receive_message_bytes;
  for (uint32_t i = 0; i < o.workers; i++) {
    wt_worker_options wo = {.rank = i,
                            .num_workers = o.workers,
                            .device = "cpu",
                            .host = srv->host,
                            .default_timeout_ms = o.engine_timeout_ms,
                            .max_message_bytes = max_msg,
                            .engines = srv->engines};
    wt_param_store *s = stores[i];
    stores[i] = NULL;
    WT_CHECK(wt_worker_new(&wo, s, &srv->workers[i]));
  }

  int rc = pthread_create(&srv->watchdog, NULL, watchdog_main, srv);
  if (rc != 0) {
    st = wt_status_from_errno(rc, "server: starting the round watchdog");
    goto out;
  }
  srv->watchdog_started = true;

  size_t nmethods = 0;
  const wt_rpc_method *methods = wt_srv_methods(&nmethods);
  wt_rpc_server_options ro = {
      .listen = o.listen,
      .max_receive_message_bytes = o.max_receive_message_bytes,
      .max_send_message_bytes = o.max_send_message_bytes,
      .on_shutdown = on_shutdown,
  };
  WT_CHECK(wt_rpc_server_new(&ro, methods, nmethods, srv, &srv->rpc));
  WT_CHECK(wt_rpc_server_start(srv->rpc));
  WT_LOGI("server", "serving wt.v1.WeightTransfer on %s (port %d)", o.listen,
          wt_rpc_server_port(srv->rpc));
  *out = srv;
  srv = NULL;
out:
  if (stores != NULL) {
    for (uint32_t i = 0; i < o.workers; i++) wt_param_store_destroy(stores[i]);
    free(stores);
  }
  if (srv != NULL) wt_server_stop(srv);
  return st;
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

void wt_server_stop(wt_server *srv) {
  if (srv == NULL) return;
  if (srv->rpc != NULL) wt_rpc_server_shutdown(srv->rpc, srv->drain_ms);
  /* Also when the RPC server never started, so the watchdog ends. */
  on_shutdown(srv);
  if (srv->watchdog_started) pthread_join(srv->watchdog, NULL);
  server_free(srv);
}
