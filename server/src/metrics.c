/* metrics.c: the server's Prometheus metrics (text exposition 0.0.4) and
 * the HTTP endpoint that serves them (--metrics-listen), on libmicrohttpd.
 *
 * Every value is read when a scrape asks: rounds from the server's own
 * counts (under mu), bytes from the workers' totals, admission, auth and
 * connections from the RPC server, the process from /proc. A scrape takes
 * mu once, briefly, and never a store's lock, so it cannot hold a round
 * up. The endpoint is one thread with at most METRICS_CONNECTIONS
 * connections, each closed after METRICS_TIMEOUT_S of silence, with
 * METRICS_CONNECTION_MEMORY bytes for its request: garbage, floods and
 * silent connections cost that endpoint, never the control port. */

#include <dirent.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "leases.h"
#include "server_state.h"
#include "wt/clock.h"
#include "wt/log.h"
#include "wt/lock.h"

#define METRICS_CONNECTIONS 64
#define METRICS_TIMEOUT_S 5
/* A request's headers must be whole this long after its connection opened,
 * however slowly they trickle in (trust row 4: a byte every 4 s kept all 64
 * places); each connection serves one request (Connection: close). */
#define METRICS_HEADER_MS 2000
#define METRICS_CONNECTION_MEMORY (32u << 10)

/* Upper bounds of the round duration histogram, in seconds. */
static const double k_buckets[WT_METRICS_BUCKETS] = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

static const char *const k_causes[WT_CAUSE_COUNT] = {
    [WT_CAUSE_TRAINER_ABORT] = "trainer_abort",
    [WT_CAUSE_REINIT] = "reinit",
    [WT_CAUSE_START] = "start",
    [WT_CAUSE_RECEIVE] = "receive",
    [WT_CAUSE_FINISH] = "finish",
    [WT_CAUSE_TIMEOUT] = "timeout",
    [WT_CAUSE_SHUTDOWN] = "shutdown",
};

const char *wt_srv_cause_name(wt_srv_cause cause) {
  return cause < WT_CAUSE_COUNT ? k_causes[cause] : "receive";
}

void wt_srv_round_began_locked(wt_server *srv) {
  wt_srv_round_metrics *m = &srv->metrics.rounds;
  m->started_ms = wt_mono_ms();
  m->started_unix_ms = wt_unix_ms();
  if (m->base_bytes == NULL)
    m->base_bytes =
        calloc(srv->nworkers ? srv->nworkers : 1, sizeof(*m->base_bytes));
  for (uint32_t i = 0; m->base_bytes && i < srv->nworkers; i++) {
    wt_worker_status ws;
    wt_worker_get_status(srv->workers[i], &ws);
    m->base_bytes[i] = ws.bytes_received;
  }
}

uint64_t wt_srv_round_bytes_locked(wt_server *srv, uint32_t i,
                                   uint64_t received_now) {
  const wt_srv_round_metrics *m = &srv->metrics.rounds;
  if (srv->round.round_id == 0 || m->base_bytes == NULL || i >= srv->nworkers ||
      received_now < m->base_bytes[i])
    return 0;
  return received_now - m->base_bytes[i];
}

void wt_srv_round_ended_locked(wt_server *srv, bool committed,
                               wt_srv_cause cause, const char *version,
                               uint64_t seq) {
  wt_srv_round_metrics *m = &srv->metrics.rounds;
  int64_t took_ms = wt_mono_ms() - m->started_ms;
  if (committed) {
    double s = took_ms > 0 ? (double)took_ms / 1000.0 : 0.0;
    size_t b = 0;
    while (b < WT_METRICS_BUCKETS && s > k_buckets[b]) b++;
    m->duration_counts[b]++;
    m->duration_sum_s += s;
    m->committed++;
  } else {
    m->failed[cause < WT_CAUSE_COUNT ? cause : WT_CAUSE_RECEIVE]++;
  }
  wt_srv_round_record *r = &m->recent[m->ended % WT_RECENT_ROUNDS];
  free(r->version);
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_worker_status ws;
    wt_worker_get_status(srv->workers[i], &ws);
    bytes += wt_srv_round_bytes_locked(srv, i, ws.bytes_received);
  }
  *r = (wt_srv_round_record){
      .committed = committed,
      .cause = cause,
      .version = committed && version ? strdup(version) : NULL,
      .sequence = committed ? seq : 0,
      .started_unix_ms = m->started_unix_ms,
      .ended_unix_ms = wt_unix_ms(),
      .bytes = bytes,
  };
  m->ended++;
}

void wt_srv_rounds_free(wt_server *srv) {
  for (size_t i = 0; i < WT_RECENT_ROUNDS; i++)
    free(srv->metrics.rounds.recent[i].version);
  free(srv->metrics.rounds.base_bytes);
}

/* ---- the exposition ------------------------------------------------------ */

/* A label value as the format wants it: \, " and newline escaped. */
static void put_label(FILE *f, const char *v) {
  for (; v && *v; v++) {
    if (*v == '\\')
      fputs("\\\\", f);
    else if (*v == '"')
      fputs("\\\"", f);
    else if (*v == '\n')
      fputs("\\n", f);
    else
      fputc(*v, f);
  }
}

static void head(FILE *f, const char *name, const char *type,
                 const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(FILE *f, const char *name, const char *type, const char *help,
                double v) {
  head(f, name, type, help);
  fprintf(f, "%s %.17g\n", name, v);
}

static long proc_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f == NULL) return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return rss * sysconf(_SC_PAGESIZE);
}

static long proc_open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  long n = 0;
  if (d == NULL) return 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

static void render(wt_server *srv, FILE *f) {
  /* Rounds and versions: one look under mu. */
  wt_mutex_lock(&srv->round.mu);
  wt_srv_round_metrics r = srv->metrics.rounds;
  uint64_t seq = srv->round.sequence;
  int64_t committed_ms =
      seq ? srv->round.history[seq % WT_VERSION_HISTORY].committed_unix_ms : 0;
  bool open = srv->round.round_id != 0;
  char backend[64];
  snprintf(backend, sizeof(backend), "%s", srv->round.backend);
  wt_mutex_unlock(&srv->round.mu);

  head(f, "wt_server_info", "gauge",
       "The server: its model, backend (empty before an init) and auth.");
  fputs("wt_server_info{model=\"", f);
  put_label(f, srv->config.model_name);
  fputs("\",backend=\"", f);
  put_label(f, backend);
  fprintf(f, "\",auth=\"%s\",workers=\"%u\"} 1\n", srv->auth.mode,
          srv->nworkers);

  uint64_t failed = 0;
  for (int c = 0; c < WT_CAUSE_COUNT; c++) failed += r.failed[c];
  head(f, "wt_rounds_total", "counter",
       "Rounds ended since start, by outcome (committed, or failed: aborted "
       "for any cause).");
  fprintf(f, "wt_rounds_total{outcome=\"committed\"} %" PRIu64 "\n",
          r.committed);
  fprintf(f, "wt_rounds_total{outcome=\"failed\"} %" PRIu64 "\n", failed);
  head(f, "wt_round_failures_total", "counter",
       "Rounds that ended without a commit, by cause.");
  for (int c = 0; c < WT_CAUSE_COUNT; c++)
    fprintf(f, "wt_round_failures_total{cause=\"%s\"} %" PRIu64 "\n",
            k_causes[c], r.failed[c]);
  head(f, "wt_round_duration_seconds", "histogram",
       "Committed rounds, StartWeightUpdate to the commit.");
  uint64_t cum = 0;
  for (int b = 0; b < WT_METRICS_BUCKETS; b++) {
    cum += r.duration_counts[b];
    fprintf(f, "wt_round_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
            k_buckets[b], cum);
  }
  cum += r.duration_counts[WT_METRICS_BUCKETS];
  fprintf(f, "wt_round_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n",
          cum);
  fprintf(f, "wt_round_duration_seconds_sum %.6f\n", r.duration_sum_s);
  fprintf(f, "wt_round_duration_seconds_count %" PRIu64 "\n", cum);
  one(f, "wt_round_in_progress", "gauge", "1 while a round is open.",
      open ? 1 : 0);
  one(f, "wt_committed_sequence", "gauge",
      "Sequence of the committed version (0: none yet).", (double)seq);
  one(f, "wt_committed_timestamp_seconds", "gauge",
      "When the committed version was committed (Unix time; 0: none yet).",
      (double)committed_ms / 1000.0);

  /* Workers. */
  static const char *const k_bytes[3][3] = {
      {"wt_received_bytes_total", "counter",
       "Bytes the worker's engines received, by backend (failed rounds "
       "included)."},
      {"wt_received_tensors_total", "counter",
       "Tensors the worker's engines received, by backend."},
      {"wt_forwarded_bytes_total", "counter",
       "Bytes the worker forwarded to the next server (the ucx chain)."}};
  for (int k = 0; k < 3; k++) {
    head(f, k_bytes[k][0], k_bytes[k][1], k_bytes[k][2]);
    for (uint32_t i = 0; i < srv->nworkers; i++) {
      wt_worker_totals t[WT_WORKER_MAX_TOTALS];
      size_t n = wt_worker_get_totals(srv->workers[i], t, WT_WORKER_MAX_TOTALS);
      for (size_t j = 0; j < n && j < WT_WORKER_MAX_TOTALS; j++) {
        uint64_t v = k == 0   ? t[j].bytes_received
                     : k == 1 ? t[j].tensors_received
                              : t[j].bytes_forwarded;
        fprintf(f, "%s{worker=\"%u\",device=\"%s\",backend=\"", k_bytes[k][0],
                i, wt_worker_device_name(srv->workers[i]));
        put_label(f, t[j].backend);
        fprintf(f, "\"} %" PRIu64 "\n", v);
      }
    }
  }
  head(f, "wt_worker_state", "gauge",
       "1 for each worker's state now (uninitialized, initializing, ready, "
       "updating, aborting, needs_init).");
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_worker_status ws;
    wt_worker_get_status(srv->workers[i], &ws);
    fprintf(f, "wt_worker_state{worker=\"%u\",device=\"%s\",state=\"%s\"} 1\n",
            i, wt_worker_device_name(srv->workers[i]),
            wt_worker_state_name(ws.state));
  }

  /* Admission. */
  static const char *const k_adm[3][2] = {
      {"wt_admission_running",
       "Calls of the class running (watch: streams open)."},
      {"wt_admission_queued", "Calls of the class waiting for a thread."},
      {"wt_admission_refused_total",
       "Calls of the class refused RESOURCE_EXHAUSTED (the class or the "
       "peer's quota full)."}};
  wt_rpc_class_load load[WT_NCLASSES] = {{0}};
  for (size_t c = 0; c < WT_NCLASSES; c++)
    if (srv->rpc) wt_rpc_server_class_load(srv->rpc, c, &load[c]);
  for (int k = 0; k < 3; k++) {
    head(f, k_adm[k][0], k == 2 ? "counter" : "gauge", k_adm[k][1]);
    for (size_t c = 0; c < WT_NCLASSES; c++)
      fprintf(f, "%s{class=\"%s\"} %" PRIu64 "\n", k_adm[k][0],
              srv->classes[c].name,
              k == 0   ? (uint64_t)load[c].running
              : k == 1 ? (uint64_t)load[c].queued
                       : load[c].refused);
  }
  wt_mutex_lock(&srv->watch.mu);
  size_t watchers = srv->watch.n;
  wt_mutex_unlock(&srv->watch.mu);
  one(f, "wt_watch_streams", "gauge", "Open WatchWeightVersion streams.",
      (double)watchers);
  if (srv->ex.leases != NULL)
    one(f, "wt_export_leases", "gauge",
        "Leases consumers of the export hold now.",
        (double)wt_leases_list(srv->ex.leases, NULL, 0));

  /* Trust and connections. */
  wt_rpc_auth_counts ac = {0};
  wt_rpc_conn_counts cc = {0};
  if (srv->rpc) {
    wt_rpc_server_auth_counts(srv->rpc, &ac);
    wt_rpc_server_conn_counts(srv->rpc, &cc);
  }
  head(f, "wt_auth_refusals_total", "counter",
       "Calls refused before admission: no or a wrong token "
       "(unauthenticated), a token of too narrow a scope (denied).");
  fprintf(f, "wt_auth_refusals_total{reason=\"unauthenticated\"} %" PRIu64 "\n",
          ac.unauthenticated);
  fprintf(f, "wt_auth_refusals_total{reason=\"denied\"} %" PRIu64 "\n",
          ac.denied);
  one(f, "wt_connections_open", "gauge",
      "Connections open on the control port (plaintext servers).",
      (double)cc.open);
  one(f, "wt_connections_limit", "gauge",
      "The cap on them (--max-connections).", (double)cc.limit);
  head(f, "wt_connections_total", "counter",
       "Control-port connections since start: accepted, and closed by the "
       "server (evicted to make room, expired without an authorized call, "
       "refused over the cap, shed when descriptors ran out).");
  const uint64_t ev[5] = {cc.accepted, cc.evicted, cc.expired, cc.refused,
                          cc.shed};
  static const char *const k_ev[5] = {"accepted", "evicted", "expired",
                                      "refused", "shed"};
  for (int k = 0; k < 5; k++)
    fprintf(f, "wt_connections_total{event=\"%s\"} %" PRIu64 "\n", k_ev[k],
            ev[k]);

  /* The process (the names Prometheus' own clients use). */
  one(f, "process_resident_memory_bytes", "gauge", "Resident memory.",
      (double)proc_rss_bytes());
  one(f, "process_open_fds", "gauge", "Open file descriptors.",
      (double)proc_open_fds());
  one(f, "process_start_time_seconds", "gauge",
      "When the server started (Unix time).",
      (double)srv->config.started_unix_ms / 1000.0);
}

wt_status *wt_server_metrics_text(wt_server *srv, char **text, size_t *len) {
  *text = NULL;
  if (len) *len = 0;
  if (srv == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "metrics: no server");
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (f == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "metrics: out of memory");
  render(srv, f);
  bool bad = ferror(f) != 0;
  fclose(f);
  if (bad) {
    free(buf);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "metrics: out of memory");
  }
  *text = buf;
  if (len) *len = n;
  return NULL;
}

/* ---- the endpoint ----------------------------------------------------------
 */

/* One open connection, for the header deadline. */
typedef struct metrics_conn {
  struct metrics_conn *next;
  int fd;
  int64_t opened_ms;
  bool asked; /* its request's headers came whole */
  bool cut;
} metrics_conn;

struct wt_metrics_http {
  struct MHD_Daemon *daemon;
  wt_server *srv;
  int port;
  char error[256]; /* libmicrohttpd's last message, for a failed start */
  wt_mutex mu;     /* conns */
  metrics_conn *conns;
  pthread_t watchdog;
  atomic_bool quit;
  bool watching;
};

/* libmicrohttpd has no deadline for a request's headers, only one for
 * silence: every connection is noted as it opens, and one whose request
 * has not come whole within METRICS_HEADER_MS is shut down (its reads then
 * end; libmicrohttpd closes it). */
static void on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                          enum MHD_ConnectionNotificationCode toe) {
  struct wt_metrics_http *h = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    metrics_conn *m = calloc(1, sizeof(*m));
    if (m == NULL || ci == NULL) {
      free(m);
      return;
    }
    m->fd = ci->connect_fd;
    m->opened_ms = wt_mono_ms();
    wt_mutex_lock(&h->mu);
    m->next = h->conns;
    h->conns = m;
    wt_mutex_unlock(&h->mu);
    *ctx = m;
  } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *ctx != NULL) {
    wt_mutex_lock(&h->mu);
    for (metrics_conn **pp = &h->conns; *pp; pp = &(*pp)->next)
      if (*pp == *ctx) {
        *pp = (*pp)->next;
        break;
      }
    wt_mutex_unlock(&h->mu);
    free(*ctx);
    *ctx = NULL;
  }
}

static void *watchdog_main(void *arg) {
  struct wt_metrics_http *h = arg;
  while (!atomic_load(&h->quit)) {
    int64_t now = wt_mono_ms();
    wt_mutex_lock(&h->mu);
    for (metrics_conn *m = h->conns; m; m = m->next)
      if (!m->asked && !m->cut && now - m->opened_ms > METRICS_HEADER_MS) {
        shutdown(m->fd, SHUT_RDWR);
        m->cut = true;
      }
    wt_mutex_unlock(&h->mu);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  struct wt_metrics_http *h = cls;
  vsnprintf(h->error, sizeof(h->error), fmt, ap);
  h->error[strcspn(h->error, "\n")] = '\0';
  WT_LOGD("metrics", "%s", h->error);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code,
                             const char *text, const char *allow) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
  if (r == NULL) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  if (allow) MHD_add_response_header(r, "Allow", allow);
  enum MHD_Result ok = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **req) {
  (void)version;
  (void)upload;
  (void)req;
  struct wt_metrics_http *h = cls;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (ci != NULL && ci->socket_context != NULL) {
    wt_mutex_lock(&h->mu);
    ((metrics_conn *)ci->socket_context)->asked = true;
    wt_mutex_unlock(&h->mu);
  }
  bool get = strcmp(method, "GET") == 0, headm = strcmp(method, "HEAD") == 0;
  if (!get && !headm) {
    *upload_size = 0; /* the body is not read */
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n",
                 "GET, HEAD");
  }
  if (strcmp(url, "/metrics") != 0)
    return reply(c, MHD_HTTP_NOT_FOUND,
                 "not found: the metrics are at /metrics\n", NULL);
  char *text = NULL;
  size_t len = 0;
  wt_status *st = wt_server_metrics_text(h->srv, &text, &len);
  if (st != NULL) {
    wt_status_free(st);
    return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "metrics: out of memory\n",
                 NULL);
  }
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (r == NULL) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type",
                          "text/plain; version=0.0.4; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ok;
}

wt_status *wt_srv_metrics_start(wt_server *srv, const char *listen,
                                const char *host,
                                struct wt_metrics_http **out) {
  *out = NULL;
  const char *colon = strrchr(listen, ':');
  const char *port = colon ? colon + 1 : "";
  char *endp = NULL;
  long pn = strtol(port, &endp, 10);
  if (*port == '\0' || *endp != '\0' || pn < 0 || pn > 65535)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "--metrics-listen '%s': not HOST:PORT", listen);
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE};
  struct addrinfo *ai = NULL;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc != 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "--metrics-listen '%s': %s",
                         listen, gai_strerror(rc));
  struct wt_metrics_http *h = calloc(1, sizeof(*h));
  if (h == NULL) {
    freeaddrinfo(ai);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "metrics: out of memory");
  }
  h->srv = srv;
  wt_mutex_init(&h->mu, WT_LOCK_METRICS_HTTP, 0, "metrics_http.mu");
  atomic_init(&h->quit, false);
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  h->daemon = MHD_start_daemon(
      flags, (uint16_t)pn, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
      ai->ai_addr, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONNECTIONS,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_TIMEOUT_S,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)METRICS_CONNECTION_MEMORY,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (h->daemon == NULL) {
    wt_status *st =
        wt_status_new(WT_UNAVAILABLE, "--metrics-listen '%s': cannot serve: %s",
                      listen, h->error[0] ? h->error : "bind failed");
    wt_mutex_destroy(&h->mu);
    free(h);
    return st;
  }
  h->watching = pthread_create(&h->watchdog, NULL, watchdog_main, h) == 0;
  if (!h->watching) {
    MHD_stop_daemon(h->daemon);
    wt_mutex_destroy(&h->mu);
    free(h);
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "--metrics-listen '%s': cannot start a thread",
                         listen);
  }
  const union MHD_DaemonInfo *di =
      MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  h->port = di ? di->port : (int)pn;
  WT_LOGI("server", "metrics on http://%s%s%s:%d/metrics",
          strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
          h->port);
  *out = h;
  return NULL;
}

int wt_srv_metrics_port(const struct wt_metrics_http *h) {
  return h ? h->port : 0;
}

void wt_srv_metrics_stop(struct wt_metrics_http *h) {
  if (h == NULL) return;
  atomic_store(&h->quit, true);
  if (h->watching) pthread_join(h->watchdog, NULL);
  MHD_stop_daemon(h->daemon);
  wt_mutex_destroy(&h->mu);
  free(h);
}

size_t wt_srv_recent_rounds_locked(const wt_server *srv,
                                   const wt_srv_round_record **out) {
  uint64_t ended = srv->metrics.rounds.ended;
  size_t nrec = ended < WT_RECENT_ROUNDS ? (size_t)ended : WT_RECENT_ROUNDS;
  for (size_t k = 0; k < nrec; k++)
    out[k] = &srv->metrics.rounds.recent[(ended - 1 - k) % WT_RECENT_ROUNDS];
  return nrec;
}
