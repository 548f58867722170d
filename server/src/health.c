/* health.c: the standard grpc.health.v1.Health service (Check and Watch)
 * on the control port, for probes (docs/operations.md):
 *
 *   service ""                      SERVING once the model is loaded and
 *   service "wt.v1.WeightTransfer"  every worker is up; NOT_SERVING while
 *                                   the server is going away (from SIGTERM
 *                                   on: the health notice, then the drain)
 *                                   or a worker needs a new init
 *   any other name                  Check: NOT_FOUND; Watch: SERVICE_UNKNOWN
 *
 * Both methods need no token (WT_SCOPE_PUBLIC: probes carry none) and say
 * nothing but the status. Watch streams are told each change; the service
 * calls wt_srv_health_changed where the status may change (a round's end,
 * an init, an abort, the stop). */

#include <stdlib.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "server_state.h"
#include "wt/log.h"
#include "wt/lock.h"

#define SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define NOT_SERVING \
  GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define SERVICE_UNKNOWN \
  GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

struct wt_health_watcher {
  wt_rpc_stream *stream;
  int status; /* the last one sent, -1: none */
  bool known;
  wt_health_watcher *prev, *next;
};

static bool known_service(const char *name) {
  return name == NULL || *name == '\0' ||
         strcmp(name, "wt.v1.WeightTransfer") == 0;
}

/* The server's status now (SERVING or NOT_SERVING). */
static int status_now(wt_server *srv) {
  wt_mutex_lock(&srv->round.mu);
  bool down = srv->round.stopping || srv->health.down;
  const char *state = down ? "" : wt_srv_state_locked(srv);
  wt_mutex_unlock(&srv->round.mu);
  return down || strcmp(state, "needs_init") == 0 ? NOT_SERVING : SERVING;
}

static void send_status(wt_health_watcher *w, int status) {
  Grpc__Health__V1__HealthCheckResponse r =
      GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = status;
  wt_status *st = wt_rpc_stream_send(w->stream, &r.base);
  if (st != NULL) {
    WT_LOGD("health", "Watch to %s: %s", wt_rpc_stream_peer(w->stream),
            wt_status_message(st));
    wt_status_free(st);
  }
  w->status = status;
}

void wt_srv_health_changed(wt_server *srv) {
  int now = status_now(srv);
  wt_mutex_lock(&srv->health.mu);
  for (wt_health_watcher *w = srv->health.watchers; w != NULL; w = w->next)
    if (w->known && w->status != now) send_status(w, now);
  wt_mutex_unlock(&srv->health.mu);
}

void wt_srv_health_end(wt_server *srv) {
  wt_mutex_lock(&srv->health.mu);
  for (wt_health_watcher *w = srv->health.watchers; w != NULL; w = w->next)
    wt_rpc_stream_end(w->stream, NULL);
  wt_mutex_unlock(&srv->health.mu);
}

wt_status *wt_srv_health_check(wt_rpc_call *call,
                               const ProtobufCMessage *request, void *user) {
  wt_server *srv = user;
  const Grpc__Health__V1__HealthCheckRequest *r =
      (const Grpc__Health__V1__HealthCheckRequest *)request;
  if (!known_service(r->service))
    return wt_status_new(WT_NOT_FOUND,
                         "Health.Check: no service '%.64s' here (\"\" and "
                         "\"wt.v1.WeightTransfer\" answer)",
                         r->service);
  Grpc__Health__V1__HealthCheckResponse resp =
      GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  resp.status = status_now(srv);
  return wt_rpc_call_respond(call, &resp.base);
}

wt_status *wt_srv_health_watch_open(wt_rpc_stream *s,
                                    const ProtobufCMessage *request,
                                    void *user) {
  wt_server *srv = user;
  const Grpc__Health__V1__HealthCheckRequest *r =
      (const Grpc__Health__V1__HealthCheckRequest *)request;
  wt_health_watcher *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "Health.Watch: out of memory");
  w->stream = s;
  w->status = -1;
  w->known = known_service(r->service);
  wt_rpc_stream_set_user(s, w);
  wt_mutex_lock(&srv->health.mu);
  w->next = srv->health.watchers;
  if (w->next) w->next->prev = w;
  srv->health.watchers = w;
  send_status(w, w->known ? status_now(srv) : SERVICE_UNKNOWN);
  wt_mutex_lock(&srv->round.mu);
  bool stopping = srv->round.stopping;
  wt_mutex_unlock(&srv->round.mu);
  if (stopping) wt_rpc_stream_end(s, NULL);
  wt_mutex_unlock(&srv->health.mu);
  return NULL;
}

void wt_srv_health_watch_closed(wt_rpc_stream *s, void *user) {
  wt_server *srv = user;
  wt_health_watcher *w = wt_rpc_stream_user(s);
  wt_mutex_lock(&srv->health.mu);
  if (w->prev)
    w->prev->next = w->next;
  else
    srv->health.watchers = w->next;
  if (w->next) w->next->prev = w->prev;
  wt_mutex_unlock(&srv->health.mu);
  free(w);
  wt_rpc_stream_release(s);
}
