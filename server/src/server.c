/* server.c: an embeddable wt server's lifecycle as a process: options and
 * devices, tokens, the RPC server, metrics, the adapter sets, start and
 * stop (see wt/server.h). What it serves, the model's stores, workers,
 * round watchdog, hashing threads and export, is a slot (slot.c). */

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "server_state.h"
#include "wt/log.h"
#include "wt/lock.h"

/* More workers than this is a typo, not a machine. */
#define MAX_WORKERS 1024u
/* Reader calls that may wait for a thread, per reader thread. */
#define READER_QUEUE_FACTOR 64
/* Round calls that may wait for a thread, per round thread. */
#define ROUND_QUEUE_FACTOR 4

/* Whether `host` (as wt_srv_listen_host gives it) is a loopback address: only
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

/* From wt_rpc_server_shutdown (or stop): no new work, abort the round so
 * that handlers waiting on it return, end watch streams; then the same for
 * every adapter set. */
static void on_shutdown(void *user) {
  wt_server *srv = user;
  wt_srv_slot_shutdown(srv);
  wt_srv_adapters_shutdown(srv);
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

/* The readers' hashing threads: half the CPUs, at most 8, niced. */
static wt_status *readers_start(wt_server *srv) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned nh = cpus > 1 ? (unsigned)(cpus / 2) : 1;
  return wt_hash_pool_new(nh > 8 ? 8 : nh, WT_SERVER_READER_NICE,
                          &srv->readers.hashers);
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
  wt_status *st = wt_srv_listen_host(o->metrics_listen, &mhost);
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
  WT_CHECK(wt_srv_slot_new(&o, ndevices, &srv));
  WT_CHECK(check_exposure(&o, srv->config.host));
  WT_CHECK(auth_start(srv, &o));
  WT_CHECK(wt_srv_slot_workers_start(srv, &o, devices));
  WT_CHECK(wt_srv_slot_load_model(srv, o.model));
  WT_CHECK(wt_srv_slot_watchdog_start(srv));
  WT_CHECK(readers_start(srv));
  WT_CHECK(wt_srv_slot_export_start(srv, &o));
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
  wt_srv_slot_free(srv);
}
