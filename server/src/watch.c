/* watch.c: WatchWeightVersion streams: every open stream is told each
 * commit, oldest first (see server_state.h). The service opens a stream
 * on the server its request names (service.c) and its method table names
 * the close handler; a commit (round.c) and a stop (slot.c) reach the
 * watchers here, never through the service. */

#include <stdlib.h>
#include <string.h>

#include "server_state.h"
#include "wt/log.h"
#include "wt/lock.h"

/* One open WatchWeightVersion stream. Watchers are in a doubly linked list
 * under srv->watch.mu; each remembers the next sequence it is owed. */
struct wt_watcher {
  wt_rpc_stream *stream;
  wt_server *srv; /* the model's server or an adapter set's */
  uint64_t next;  /* the sequence to send next */
  wt_watcher *prev, *nextw;
};

/* Sends `w` every committed version from w->next on, oldest first (one that
 * fell behind the history resumes at its oldest entry). Under watch_mu. */
static void watcher_catch_up(wt_server *srv, wt_watcher *w) {
  for (;;) {
    Wt__V1__WeightVersion v = WT__V1__WEIGHT_VERSION__INIT;
    char *version = NULL;
    wt_mutex_lock(&srv->round.mu);
    uint64_t seq = srv->round.sequence;
    if (w->next > seq) {
      wt_mutex_unlock(&srv->round.mu);
      return;
    }
    if (seq >= WT_VERSION_HISTORY && w->next <= seq - WT_VERSION_HISTORY)
      w->next = seq - WT_VERSION_HISTORY + 1;
    const wt_version_entry *e =
        &srv->round.history[w->next % WT_VERSION_HISTORY];
    version = strdup(e->version);
    v.sequence = e->sequence;
    v.committed_unix_ms = e->committed_unix_ms;
    wt_mutex_unlock(&srv->round.mu);
    v.version = version ? version : (char *)"";
    wt_status *st = wt_rpc_stream_send(w->stream, &v.base);
    free(version);
    if (st != NULL) {
      WT_LOGW("server", "WatchWeightVersion to %s: %s",
              wt_rpc_stream_peer(w->stream), wt_status_message(st));
      wt_status_free(st);
    }
    w->next++;
  }
}

void wt_srv_notify_watchers(wt_server *srv) {
  wt_mutex_lock(&srv->watch.mu);
  for (wt_watcher *w = srv->watch.list; w != NULL; w = w->nextw)
    watcher_catch_up(srv, w);
  wt_mutex_unlock(&srv->watch.mu);
}

void wt_srv_end_watchers(wt_server *srv) {
  wt_mutex_lock(&srv->watch.mu);
  for (wt_watcher *w = srv->watch.list; w != NULL; w = w->nextw)
    wt_rpc_stream_end(w->stream, NULL);
  wt_mutex_unlock(&srv->watch.mu);
}

/* On the polling thread: the current version first, if any, then every
 * commit after it. */
wt_status *wt_srv_watch_open(wt_server *srv, wt_rpc_stream *s) {
  wt_watcher *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "WatchWeightVersion: out of memory");
  w->stream = s;
  w->srv = srv;
  wt_rpc_stream_set_user(s, w);
  wt_mutex_lock(&srv->watch.mu);
  wt_mutex_lock(&srv->round.mu);
  bool stopping = srv->round.stopping;
  w->next = srv->round.sequence > 0 ? srv->round.sequence : 1;
  wt_mutex_unlock(&srv->round.mu);
  w->nextw = srv->watch.list;
  if (srv->watch.list) srv->watch.list->prev = w;
  srv->watch.list = w;
  srv->watch.n++;
  watcher_catch_up(srv, w);
  if (stopping) wt_rpc_stream_end(s, NULL);
  wt_mutex_unlock(&srv->watch.mu);
  return NULL;
}

void wt_srv_watch_closed(wt_rpc_stream *s, void *user) {
  (void)user;
  wt_watcher *w = wt_rpc_stream_user(s);
  wt_server *srv = w->srv;
  wt_mutex_lock(&srv->watch.mu);
  if (w->prev)
    w->prev->nextw = w->nextw;
  else
    srv->watch.list = w->nextw;
  if (w->nextw) w->nextw->prev = w->prev;
  srv->watch.n--;
  wt_mutex_unlock(&srv->watch.mu);
  free(w);
  wt_rpc_stream_release(s);
}
