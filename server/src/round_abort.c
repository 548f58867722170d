/* round_abort.c: how a round ends without a commit, on every worker at
 * once (see server_state.h for the locking): the abort itself and the
 * ABORT ops nobody waits for. Used by the round's calls (round.c, push.c),
 * which also abort on a shard plan's word (multirank.c), and by the
 * watchdog and the stop (slot.c); the ranks a plan parked in the round get
 * its error (wt_srv_plan_settle_locked, with wt_srv_aborted_error). */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_state.h"
#include "wt/log.h"

/* An ABORT of `round` that nobody waits for: freed once it ran. */
typedef struct detached_abort {
  wt_worker_op op;
  char reason[512];
} detached_abort;

static void detached_done(wt_worker_op *op, wt_status *st, void *user) {
  (void)user;
  wt_status_free(st);
  free(op);
}

void wt_srv_submit_detached(wt_server *srv, wt_worker_op_kind kind,
                            uint64_t round, const char *reason) {
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    detached_abort *d = calloc(1, sizeof(*d));
    if (d == NULL) {
      WT_LOGE("server", "worker %u: out of memory queueing an abort", i);
      continue;
    }
    snprintf(d->reason, sizeof(d->reason), "%s", reason ? reason : "");
    d->op.kind = kind;
    d->op.round_id = round;
    d->op.reason = d->reason;
    d->op.on_done = detached_done;
    wt_status *st = wt_worker_submit(srv->workers[i], &d->op);
    if (st != NULL) {
      wt_status_free(st);
      free(d);
    }
  }
}

bool wt_srv_abort_round_locked(wt_server *srv, wt_srv_cause cause,
                               const char *reason) {
  if (srv->round.round_id == 0 || srv->round.committing) return false;
  uint64_t id = srv->round.round_id;
  wt_srv_round_ended_locked(srv, false, cause, NULL, 0);
  /* In place, the live bytes may be part written: no base for a delta. */
  if (srv->config.staging == WT_STAGING_INPLACE)
    srv->round.committed_digest = 0;
  char *why = strdup(reason ? reason : "aborted");
  /* A caller's words, later quoted in errors, GetServerInfo and logs: no
   * control byte (a newline forging a log line, a terminal escape). */
  for (char *p = why; p && *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  free(srv->round.abort_reason);
  srv->round.abort_reason = why;
  srv->round.aborted_round = id;
  if (srv->round.push_call != NULL) {
    /* Its handler may be blocked reading a client gone quiet. */
    char msg[512];
    snprintf(msg, sizeof(msg), "PushWeights: round %" PRIu64 " was aborted: %s",
             id, why ? why : "(out of memory)");
    wt_rpc_call_cancel(srv->round.push_call, WT_ABORTED, msg);
    srv->round.push_call = NULL;
  }
  srv->round.push_id = 0;
  srv->round.busy = NULL;
  srv->round.round_id = 0;
  /* Blocked engine calls return at once; the ABORT ops run after them. */
  for (uint32_t i = 0; i < srv->nworkers; i++)
    wt_worker_cancel(srv->workers[i]);
  wt_srv_submit_detached(srv, WT_WORKER_OP_ABORT, id, why);
  /* The ranks parked in the round get its error now. */
  wt_srv_plan_settle_locked(srv);
  pthread_cond_broadcast(&srv->round.cv);
  WT_LOGW("server", "round %" PRIu64 " aborted: %s", id,
          why ? why : "(out of memory)");
  return true;
}
