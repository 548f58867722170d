/* state.c: what every part of a server reads of its round state (see
 * server_state.h): the round a thread logs for, the round's last activity,
 * the state's name, a worker that needs a new init, and the error a call
 * of a round that ended gets. None takes the round's mu (the prototypes
 * say which need it held); a worker's status is read under its own lock. */

#include <inttypes.h>

#include "server_state.h"
#include "wt/log.h"

void wt_srv_log_round(uint64_t round_id) {
  wt_log_context c = wt_log_context_get();
  c.round = round_id;
  wt_log_context_set(c);
}

void wt_srv_touch(wt_server *srv) {
  atomic_store(&srv->round.last_activity_ms, wt_mono_ms());
}

long wt_srv_needs_init_worker(const wt_server *srv, wt_worker_status *ws) {
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_worker_get_status(srv->workers[i], ws);
    if (ws->state == WT_WORKER_NEEDS_INIT) return (long)i;
  }
  return -1;
}

const char *wt_srv_state_locked(const wt_server *srv) {
  if (srv->round.initializing) return "initializing";
  if (!srv->round.initialized) return "uninitialized";
  if (srv->round.round_id != 0) return "updating";
  wt_worker_status ws;
  if (wt_srv_needs_init_worker(srv, &ws) >= 0) return "needs_init";
  return "ready";
}

wt_status *wt_srv_aborted_error(const wt_server *srv, const char *call,
                                uint64_t round) {
  if (srv->round.stopping)
    return wt_status_new(WT_UNAVAILABLE, "%s: the server is shutting down",
                         call);
  if (round == srv->round.aborted_round && srv->round.abort_reason != NULL)
    return wt_status_new(WT_ABORTED, "%s: round %" PRIu64 " was aborted: %s",
                         call, round, srv->round.abort_reason);
  return wt_status_new(WT_ABORTED, "%s: round %" PRIu64 " is no longer open",
                       call, round);
}
