/* round.c: the round state machine across a server's workers: init, start,
 * update, finish, abort (see server_state.h for the locking).
 *
 * Every call checks and changes the server's state under mu, submits its
 * ops to every worker there (so every worker sees the same ops in the same
 * order), and waits for them outside mu. A version becomes visible only
 * after every worker committed, which finish does in two phases: prepare
 * everywhere (nothing partly received, the engines' finish), then commit
 * everywhere.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leases.h"
#include "server_state.h"
#include "wt/init_info.h"
#include "wt/log.h"
#include "wt/secure.h"
#include "wt/lock.h"

/* --- running an op on every worker ---------------------------------------- */

wt_status *wt_srv_submit_all(wt_server *srv, wt_worker_op *ops,
                             const wt_worker_op *proto) {
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    ops[i] = *proto;
    if (proto->endpoint != NULL) ops[i].endpoint = &proto->endpoint[i];
    wt_status *st = wt_worker_submit(srv->workers[i], &ops[i]);
    if (st != NULL) {
      /* Only at destroy: the earlier ones must still be waited for. */
      for (uint32_t j = i; j < srv->nworkers; j++) ops[j].done = true;
      for (uint32_t j = 0; j < i; j++)
        wt_status_free(wt_worker_wait(srv->workers[j], &ops[j]));
      return st;
    }
  }
  return NULL;
}

wt_status *wt_srv_wait_all(wt_server *srv, wt_worker_op *ops) {
  wt_status *st = NULL;
  for (uint32_t i = 0; i < srv->nworkers; i++) {
    wt_status *e = wt_worker_wait(srv->workers[i], &ops[i]);
    if (st == NULL)
      st = e;
    else
      wt_status_free(e);
  }
  return st;
}

wt_status *wt_srv_run_all(wt_server *srv, wt_worker_op *ops,
                          const wt_worker_op *proto) {
  wt_status *st = wt_srv_submit_all(srv, ops, proto);
  if (st != NULL) return st;
  return wt_srv_wait_all(srv, ops);
}

/* Under mu: submits `proto` to every worker, releases mu while they run,
 * and holds it again once every op is done. */
static wt_status *run_all_unlocked(wt_server *srv, wt_worker_op *ops,
                                   const wt_worker_op *proto) {
  wt_status *st = wt_srv_submit_all(srv, ops, proto);
  wt_mutex_unlock(&srv->round.mu);
  if (st == NULL) st = wt_srv_wait_all(srv, ops);
  wt_mutex_lock(&srv->round.mu);
  return st;
}

/* Under mu: one op of round proto->round_id on every worker (see
 * run_all_unlocked), counted as an engine call. A round that ended
 * meanwhile (aborted, timed out) is `call`'s error, whatever the op said;
 * then srv->round.round_id differs from the op's. */
static wt_status *run_round_op(wt_server *srv, wt_worker_op *ops,
                               const wt_worker_op *proto, const char *call) {
  srv->round.engine_calls++;
  wt_status *st = run_all_unlocked(srv, ops, proto);
  srv->round.engine_calls--;
  wt_srv_touch(srv);
  if (srv->round.round_id != proto->round_id) {
    wt_status_free(st);
    st = wt_srv_aborted_error(srv, call, proto->round_id);
  }
  return st;
}

static wt_worker_op *ops_new(const wt_server *srv) {
  return calloc(srv->nworkers, sizeof(wt_worker_op));
}

/* --- preconditions (under mu) --------------------------------------------- */

static wt_status *need_init_locked(const wt_server *srv, const char *call) {
  if (srv->round.stopping)
    return wt_status_new(WT_UNAVAILABLE, "%s: the server is shutting down",
                         call);
  if (srv->round.initializing)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: InitWeightTransferEngine is still running "
                         "(state: initializing)",
                         call);
  if (!srv->round.initialized)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: no weight-transfer engine is initialized "
                         "(state: uninitialized); call "
                         "InitWeightTransferEngine first",
                         call);
  return NULL;
}

wt_status *wt_srv_need_round_locked(const wt_server *srv, const char *call,
                                    uint64_t round_id) {
  wt_status *st = need_init_locked(srv, call);
  if (st != NULL) return st;
  if (round_id == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: round_id is 0; pass the round_id that "
                         "StartWeightUpdate returned (0 does not name the "
                         "current round: only the trainer that started a "
                         "round may drive it)",
                         call);
  if (srv->round.round_id == 0) {
    if (round_id == srv->round.aborted_round)
      return wt_status_new(WT_FAILED_PRECONDITION,
                           "%s: round %" PRIu64
                           " was aborted (%s); no round is in progress "
                           "(state: ready)",
                           call, round_id, srv->round.abort_reason);
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: no round is in progress (state: ready); call "
                         "StartWeightUpdate first",
                         call);
  }
  /* The current id is said only to the caller of StartWeightUpdate: a
   * caller with another id learns nothing of it. */
  if (round_id != srv->round.round_id)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: round_id %" PRIu64
                         " is not the current round (state: updating)",
                         call, round_id);
  return NULL;
}

wt_status *wt_srv_need_idle_locked(const wt_server *srv, const char *call) {
  if (srv->round.busy == NULL) return NULL;
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "%s: %s is still running in the current round "
                       "(state: updating); wait for it to end",
                       call, srv->round.busy);
}

/* --- abort ---------------------------------------------------------------- */

wt_status *wt_srv_abort(wt_server *srv, uint64_t round_id, const char *reason,
                        bool *aborted) {
  wt_status *st = NULL;
  *aborted = false;
  wt_srv_log_round(round_id);
  wt_mutex_lock(&srv->round.mu);
  WT_CHECK(need_init_locked(srv, "AbortWeightUpdate"));
  /* The round already failed (a trainer aborts what failed under it): it
   * is over, which is what the caller asks for. */
  if (round_id != 0 && round_id != srv->round.round_id &&
      round_id == srv->round.aborted_round)
    goto out;
  WT_CHECK(wt_srv_need_round_locked(srv, "AbortWeightUpdate", round_id));
  if (srv->round.committing)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "AbortWeightUpdate: the round is being committed by "
            "FinishWeightUpdate and can no longer be aborted");
  char why[256];
  snprintf(why, sizeof(why), "AbortWeightUpdate%s%.200s",
           reason && *reason ? ": " : "", reason ? reason : "");
  *aborted = wt_srv_abort_round_locked(srv, WT_CAUSE_TRAINER_ABORT, why);
out:
  wt_mutex_unlock(&srv->round.mu);
  return st;
}

/* --- init ----------------------------------------------------------------- */

/* Under mu: rank `rank` of `plan` joins the init of the same plan (digest)
 * that the server has or is making; endpoints as the init gave them. */
static wt_status *join_init_locked(wt_server *srv, const wt_srv_plan *plan,
                                   uint32_t rank, const char *peer,
                                   wt_engine_endpoint *endpoints) {
  const char *digest = wt_srv_plan_digest(plan);
  int64_t deadline = wt_mono_ms() + srv->config.data_timeout_ms;
  while (srv->round.initializing && srv->round.plan != NULL &&
         strcmp(wt_srv_plan_digest(srv->round.plan), digest) == 0 &&
         wt_mono_ms() < deadline)
    wt_cond_wait_until(&srv->round.cv, &srv->round.mu, deadline);
  if (!srv->round.initialized || srv->round.initializing ||
      srv->round.plan == NULL ||
      strcmp(wt_srv_plan_digest(srv->round.plan), digest) != 0)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "InitWeightTransferEngine: the init of plan "
                         "%.16s... that rank %u joins failed or was replaced "
                         "(state: %s); init again",
                         digest, rank, wt_srv_state_locked(srv));
  wt_status *st = wt_srv_plan_join_locked(srv->round.plan, rank, peer);
  if (st == NULL)
    st = wt_srv_plan_endpoints(srv->round.plan, endpoints, srv->nworkers);
  if (st == NULL)
    WT_LOGI("server", "trainer rank %u joined the init of plan %.16s...", rank,
            digest);
  return st;
}

wt_status *wt_srv_init_engine(wt_server *srv,
                              const Wt__V1__WeightTransferInitInfo *init,
                              const char *peer, wt_engine_endpoint *endpoints) {
  wt_status *st = NULL;
  wt_srv_plan *plan = NULL;
  bool locked = false, marked = false;
  char *names = NULL;
  const char *backend = NULL;
  wt_worker_op *ops = ops_new(srv);
  if (ops == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "InitWeightTransferEngine: out of memory");
  st = wt_init_info_backend(init, &backend);
  if (st != NULL) {
    wt_status *e = wt_engine_names(srv->config.engines, &names);
    if (e != NULL) names = NULL;
    wt_status_free(e);
    wt_status *named =
        wt_status_new(wt_status_code(st), "%s; registered backends: %s",
                      wt_status_message(st), names ? names : "(none)");
    wt_status_free(st);
    st = named;
    goto out;
  }
  /* An unknown backend is refused before the current engine is touched. */
  const wt_engine_ops *eops = NULL;
  WT_CHECK(wt_engine_lookup(srv->config.engines, backend, &eops));
  if (strlen(backend) >= sizeof(srv->round.backend))
    WT_FAIL(WT_INVALID_ARGUMENT, "init_info.backend '%.64s...' is too long",
            backend);
  /* The trainer's world must hold this server's workers. */
  WT_CHECK(wt_init_info_check_ranks(init, srv->nworkers));
  if (init->shard_plan != NULL) {
    if (!(eops->caps & WT_ENGINE_TAKES_BOXES))
      WT_FAIL(WT_FAILED_PRECONDITION,
              "InitWeightTransferEngine: init_info.shard_plan: backend '%s' "
              "cannot take a shard plan's boxes (docs/multirank.md lists the "
              "backends that can)",
              backend);
    WT_CHECK(wt_srv_plan_new(srv, init->shard_plan, &plan));
  }

  wt_mutex_lock(&srv->round.mu);
  locked = true;
  if (srv->round.stopping)
    WT_FAIL(WT_UNAVAILABLE,
            "InitWeightTransferEngine: the server is shutting down");
  /* Another rank of the same plan: it joins the init, which stays. */
  if (plan != NULL && srv->round.plan != NULL &&
      strcmp(wt_srv_plan_digest(srv->round.plan), wt_srv_plan_digest(plan)) ==
          0) {
    st = join_init_locked(srv, plan, init->shard_plan->rank, peer, endpoints);
    goto out;
  }
  /* Another plan: only a newer generation replaces the live one; a stale
   * rank's init (an older or equal generation) is refused, and the round
   * it would have aborted goes on. */
  if (srv->round.plan != NULL && plan != NULL) {
    uint64_t live = wt_srv_plan_generation(srv->round.plan);
    uint64_t mine = wt_srv_plan_generation(plan);
    if (live != 0 && mine <= live)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "InitWeightTransferEngine: init_info.shard_plan: generation "
              "%" PRIu64
              " is not newer than this server's plan (generation "
              "%" PRIu64
              ", digest %.16s..., %u ranks); a stale rank's init "
              "replaces nothing (docs/multirank.md)",
              mine, live, wt_srv_plan_digest(srv->round.plan),
              wt_srv_plan_world(srv->round.plan));
  }
  if (srv->round.initializing)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "InitWeightTransferEngine: another InitWeightTransferEngine is "
            "running (state: initializing)");
  if (srv->round.committing)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "InitWeightTransferEngine: FinishWeightUpdate is committing the "
            "current round; try again when it returns");
  if (srv->round.round_id != 0)
    wt_srv_abort_round_locked(srv, WT_CAUSE_REINIT,
                              "replaced by a new InitWeightTransferEngine");
  srv->round.initializing = true;
  srv->round.initialized = false;
  srv->round.backend[0] = '\0';
  /* The new init's plan (or none) replaces the old one at once: a rank of
   * the old plan is refused from now on, a rank of the new one waits. */
  wt_srv_plan_free(srv->round.plan);
  srv->round.plan = plan;
  plan = NULL;
  {
    /* A plan's ranks call at once (every start, every push): the round
     * class queues at least two calls per rank, beside its running places
     * (the plan bounds the ranks). */
    wt_rpc_server *rpc = srv->base ? srv->base->rpc : srv->rpc;
    if (rpc != NULL && srv->round.plan != NULL) {
      uint32_t world = 0, joined = 0;
      wt_srv_plan_info(srv->round.plan, &world, &joined);
      wt_rpc_server_class_queue_floor(rpc, WT_CLASS_ROUND, (int)(2 * world));
    }
  }
  if (srv->round.plan != NULL) /* the first rank: never refused */
    wt_status_free(
        wt_srv_plan_join_locked(srv->round.plan, init->shard_plan->rank, peer));
  srv->round.engine_calls++;
  marked = true;
  Wt__V1__WeightTransferInitInfo named = *init;
  named.backend = (char *)backend;
  wt_worker_op proto = {
      .kind = WT_WORKER_OP_INIT, .init = &named, .endpoint = endpoints};
  st = run_all_unlocked(srv, ops, &proto);
  srv->round.initializing = false;
  srv->round.engine_calls--;
  if (st == NULL && srv->round.stopping)
    st = wt_status_new(WT_UNAVAILABLE,
                       "InitWeightTransferEngine: the server is shutting down");
  if (st == NULL) {
    srv->round.initialized = true;
    snprintf(srv->round.backend, sizeof(srv->round.backend), "%s", backend);
    srv->round.data_timeout_ms =
        init->timeout_ms ? init->timeout_ms : srv->config.data_timeout_ms;
    if (srv->round.plan != NULL)
      st =
          wt_srv_plan_keep_endpoints(srv->round.plan, endpoints, srv->nworkers);
    WT_LOGI("server", "backend '%s' initialized on %u worker(s)", backend,
            srv->nworkers);
  } else {
    /* Workers whose init succeeded give their engine up again. */
    wt_srv_submit_detached(srv, WT_WORKER_OP_RELEASE, 0, NULL);
    wt_srv_plan_free(srv->round.plan);
    srv->round.plan = NULL;
  }
out:
  if (marked) pthread_cond_broadcast(&srv->round.cv);
  if (locked) wt_mutex_unlock(&srv->round.mu);
  wt_srv_plan_free(plan);
  free(names);
  free(ops);
  return st;
}

/* --- start ---------------------------------------------------------------- */

static bool server_stopping(void *arg) {
  wt_server *srv = arg;
  wt_mutex_lock(&srv->round.mu);
  bool stop = srv->round.stopping;
  wt_mutex_unlock(&srv->round.mu);
  return stop;
}

/* The leases a round must outwait (export.c): every lease with in-place
 * staging, those on versions older than the live one with shadow staging
 * (the copies a round writes hold older versions' bytes). Under mu. */
static uint64_t leases_below_locked(const wt_server *srv) {
  wt_param_store *s = wt_worker_store(srv->workers[0]);
  return wt_param_store_staging(s) == WT_STAGING_INPLACE ? UINT64_MAX
                                                         : srv->round.sequence;
}

/* Under mu: a start under a shard plan (docs/multirank.md) checks the
 * rank and the digest, and joins the round in progress (*joined, with its
 * id) if there is one. Without a plan, a start naming one is refused. */
static wt_status *plan_start_locked(wt_server *srv, uint32_t rank,
                                    const char *digest, bool *joined,
                                    uint64_t *round_id) {
  *joined = false;
  if (srv->round.plan == NULL) {
    if (digest == NULL || *digest == '\0') return NULL;
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "StartWeightUpdate: plan_digest %.16s... (rank %u) "
                         "names a shard plan; this server's init has none "
                         "(state: %s): init again with the plan",
                         digest, rank, wt_srv_state_locked(srv));
  }
  wt_status *st = need_init_locked(srv, "StartWeightUpdate");
  if (st == NULL) st = wt_srv_plan_check_start(srv->round.plan, rank, digest);
  if (st != NULL || srv->round.round_id == 0) return st;
  st = wt_srv_plan_round_join(srv->round.plan, srv->round.round_id, rank);
  if (st == NULL) {
    *joined = true;
    *round_id = srv->round.round_id;
    wt_srv_touch(srv);
    WT_LOGD("server", "rank %u joined round %" PRIu64, rank, *round_id);
  }
  return st;
}

wt_status *wt_srv_start(wt_server *srv, uint32_t trainer_rank,
                        const char *plan_digest, uint64_t *round_id) {
  wt_status *st = NULL;
  bool joined = false;
  wt_mutex_lock(&srv->round.mu);
  st = plan_start_locked(srv, trainer_rank, plan_digest, &joined, round_id);
  wt_mutex_unlock(&srv->round.mu);
  if (st != NULL || joined) return st;
  wt_worker_op *ops = ops_new(srv);
  if (ops == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "StartWeightUpdate: out of memory");
  int64_t lease_deadline = wt_mono_ms() + srv->ex.lease_wait_ms;
lease_wait:
  if (srv->ex.leases != NULL) {
    wt_mutex_lock(&srv->round.mu);
    uint64_t below = leases_below_locked(srv);
    wt_mutex_unlock(&srv->round.mu);
    st = wt_leases_wait_free(srv->ex.leases, below, lease_deadline,
                             "--lease-wait", server_stopping, srv);
    if (st != NULL) {
      free(ops);
      return wt_status_prefix(st, "StartWeightUpdate");
    }
  }
  wt_mutex_lock(&srv->round.mu);
  /* A consumer may have taken a lease since the wait: acquires take theirs
   * under mu, so this check and the round's start are one step for them. */
  if (srv->ex.leases != NULL &&
      wt_leases_any_below(srv->ex.leases, leases_below_locked(srv), NULL) &&
      srv->round.round_id == 0) {
    wt_mutex_unlock(&srv->round.mu);
    goto lease_wait;
  }
  WT_CHECK(need_init_locked(srv, "StartWeightUpdate"));
  /* Another rank may have opened the plan's round meanwhile. */
  WT_CHECK(
      plan_start_locked(srv, trainer_rank, plan_digest, &joined, round_id));
  if (joined) goto out;
  if (srv->round.round_id != 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "StartWeightUpdate: a round is in progress (state: updating); "
            "finish or abort it first");
  wt_worker_status ws;
  long w = wt_srv_needs_init_worker(srv, &ws);
  if (w >= 0)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "StartWeightUpdate: worker %ld (%s) needs a new "
            "InitWeightTransferEngine: %s (state: needs_init)",
            w, wt_worker_device_name(srv->workers[w]), ws.reason);
  /* Unguessable: a round is driven only by whoever StartWeightUpdate
   * answered (under TLS, nobody else ever sees the id). */
  uint64_t id = wt_random_u64(srv->round.last_round_id);
  wt_srv_log_round(id);
  srv->round.last_round_id = id;
  srv->round.round_id = id;
  srv->round.round_digest = 0;
  srv->round.round_updates = 0;
  wt_srv_round_began_locked(srv);
  srv->round.busy = "StartWeightUpdate";
  if (srv->round.plan != NULL)
    wt_status_free(wt_srv_plan_round_join(srv->round.plan, id, trainer_rank));
  wt_srv_touch(srv);
  wt_worker_op proto = {.kind = WT_WORKER_OP_START, .round_id = id};
  st = run_round_op(srv, ops, &proto, "StartWeightUpdate");
  if (st != NULL && srv->round.round_id == id) {
    st = wt_status_prefix(st, "StartWeightUpdate");
    wt_srv_abort_round_locked(srv, WT_CAUSE_START, wt_status_message(st));
  } else if (st == NULL) {
    srv->round.busy = NULL;
    *round_id = id;
    WT_LOGD("server", "round %" PRIu64 " started", id);
  }
  pthread_cond_broadcast(&srv->round.cv);
out:
  wt_mutex_unlock(&srv->round.mu);
  free(ops);
  return st;
}

wt_status *wt_srv_check_delta_base_locked(const wt_server *srv,
                                          const char *call, const char *what,
                                          const Wt__V1__DeltaBase *base,
                                          bool takes) {
  if (base == NULL) return NULL;
  if (!takes)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: delta base refused: backend '%s' takes no delta "
                         "rounds; send the full bytes",
                         call, srv->round.backend);
  if (srv->round.committed_digest != 0 &&
      base->digest == srv->round.committed_digest &&
      base->sequence == srv->round.sequence)
    return NULL;
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "%s: delta base refused: the %s is relative to "
                       "sequence %" PRIu64 " (digest %016" PRIx64
                       "), this server holds sequence %" PRIu64
                       " (digest %s%016" PRIx64 "); send the full bytes",
                       call, what, base->sequence, base->digest,
                       srv->round.sequence,
                       srv->round.committed_digest ? "" : "unknown, ",
                       srv->round.committed_digest);
}

/* --- update (receive) ----------------------------------------------------- */

wt_status *wt_srv_update(wt_server *srv, wt_rpc_call *call, uint64_t round_id,
                         uint32_t trainer_rank,
                         const Wt__V1__WeightTransferUpdateInfo *info,
                         wt_receive_stats *stats) {
  wt_status *st = NULL;
  uint64_t round = 0;
  wt_srv_resolved r = {0};
  wt_srv_log_round(round_id);
  wt_worker_op *ops = ops_new(srv);
  if (ops == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "UpdateWeights: out of memory");
  wt_mutex_lock(&srv->round.mu);
  WT_CHECK(wt_srv_need_round_locked(srv, "UpdateWeights", round_id));
  const wt_engine_ops *eops = wt_worker_engine_ops(srv->workers[0]);
  const Wt__V1__DeltaBase *delta_base =
      info != NULL &&
              info->backend_update_case ==
                  WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX &&
              info->ucx != NULL
          ? info->ucx->delta_base
          : NULL;
  if (srv->round.plan != NULL) {
    /* Every rank's update, then one receive of them all (multirank.c);
     * what would refuse the receive is refused before the rank counts. */
    bool last = false;
    if (delta_base != NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "UpdateWeights: rank %u: a shard plan's round takes no delta "
              "base",
              trainer_rank);
    if (eops == NULL || eops->receive == NULL)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "UpdateWeights: backend '%s' receives weights through "
              "PushWeights",
              srv->round.backend);
    WT_CHECK(
        wt_srv_plan_update_arrive(srv, trainer_rank, round_id, info, &last));
    if (!last) {
      st = wt_srv_plan_update_wait(srv, call, trainer_rank, round_id);
      goto out;
    }
    /* Every rank waits for this call: whatever fails now fails the round. */
    round = srv->round.round_id;
  }
  WT_CHECK(wt_srv_need_idle_locked(srv, "UpdateWeights"));
  /* A delta against another version is refused before the call is the
   * round's, naming both versions (docs/delta.md). */
  WT_CHECK(wt_srv_check_delta_base_locked(
      srv, "UpdateWeights", "update", delta_base,
      eops != NULL && (eops->caps & WT_ENGINE_RECEIVES_DELTA)));
  /* From here on the call is the round's: its failure fails the round. */
  round = srv->round.round_id;
  if (eops == NULL || eops->receive == NULL)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "UpdateWeights: backend '%s' receives weights through PushWeights",
            srv->round.backend);
  if (srv->round.plan != NULL) {
    WT_CHECK(wt_srv_plan_update_whole(srv, &r));
  } else {
    WT_CHECK(wt_srv_resolve_update(srv, info, &r));
  }
  r.u.delta = delta_base != NULL;
  srv->round.busy = "UpdateWeights";
  srv->round.round_updates++;
  srv->round.round_digest = 0;
  wt_worker_op proto = {
      .kind = WT_WORKER_OP_RECEIVE, .round_id = round, .update = &r.u};
  st = run_round_op(srv, ops, &proto, "UpdateWeights");
  if (srv->round.round_id == round) srv->round.busy = NULL;
  if (st == NULL) {
    *stats = ops[0].stats;
    /* The version has a digest when this was its one update and every
     * worker landed the same bytes in full (an engine that does not say
     * reports 0: the version then has none). */
    uint64_t d = ops[0].stats.digest;
    for (uint32_t i = 1; i < srv->nworkers; i++)
      if (ops[i].stats.digest != d) d = 0;
    if (srv->round.round_id == round && srv->round.round_updates == 1)
      srv->round.round_digest = d;
    if (srv->round.round_id == round && srv->round.plan != NULL) {
      wt_srv_plan_received(srv->round.plan, round);
      wt_srv_plan_settle_locked(srv); /* the ranks parked for it */
    }
  }
out:
  if (st != NULL && round != 0 && srv->round.round_id == round) {
    char why[1024];
    /* The trainer's call ended under the receive (it was cancelled, or
     * its process died): nobody will send the rest. */
    if (call != NULL && wt_rpc_call_cancelled(call))
      snprintf(why, sizeof(why),
               "UpdateWeights from %s: the trainer's call ended (cancelled, "
               "or the trainer is gone) while the workers received: %s",
               wt_rpc_call_peer(call), wt_status_message(st));
    else
      snprintf(why, sizeof(why), "UpdateWeights%s%s failed: %s",
               call ? " from " : "", call ? wt_rpc_call_peer(call) : "",
               wt_status_message(st));
    wt_srv_abort_round_locked(srv, WT_CAUSE_RECEIVE, why);
  }
  pthread_cond_broadcast(&srv->round.cv);
  wt_mutex_unlock(&srv->round.mu);
  wt_srv_resolved_clear(&r);
  free(ops);
  return st;
}

/* --- finish --------------------------------------------------------------- */

wt_status *wt_srv_finish(wt_server *srv, wt_rpc_call *call, uint64_t round_id,
                         uint32_t trainer_rank, const char *version) {
  wt_status *st = NULL;
  char *copy = NULL;
  wt_worker_op *ops = NULL;
  wt_srv_log_round(round_id);
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
  /* Versions are printed by readers' tools, to terminals: no control
   * byte (ESC, a newline) may enter. */
  for (size_t i = 0; i < vlen; i++)
    if ((unsigned char)version[i] < 0x20 || version[i] == 0x7f)
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "FinishWeightUpdate: weight_version has control "
                           "byte 0x%02x at offset %zu; name versions in "
                           "printable characters",
                           (unsigned)(unsigned char)version[i], i);
  if ((copy = strdup(version)) == NULL || (ops = ops_new(srv)) == NULL) {
    free(copy);
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "FinishWeightUpdate: out of memory");
  }
  wt_mutex_lock(&srv->round.mu);
  WT_CHECK(wt_srv_need_round_locked(srv, "FinishWeightUpdate", round_id));
  if (srv->round.plan != NULL) {
    /* Every rank finishes; all but the last wait for its commit. */
    bool last = false;
    wt_srv_plan_fail fail;
    wt_status *fin = wt_srv_plan_finish(srv, call, trainer_rank, round_id,
                                        version, &last, &fail);
    if (fail.why[0] != '\0')
      wt_srv_abort_round_locked(srv, fail.cause, fail.why);
    WT_CHECK(fin);
    if (!last) goto out;
    /* The other ranks wait for this finish: it commits or fails the round. */
    if (srv->round.busy != NULL) {
      st = wt_srv_need_idle_locked(srv, "FinishWeightUpdate");
      wt_srv_abort_round_locked(srv, WT_CAUSE_FINISH, wt_status_message(st));
      goto out;
    }
  }
  WT_CHECK(wt_srv_need_idle_locked(srv, "FinishWeightUpdate"));
  uint64_t round = srv->round.round_id;
  srv->round.busy = "FinishWeightUpdate";
  srv->round.engine_calls++;
  wt_worker_op prepare = {.kind = WT_WORKER_OP_PREPARE, .round_id = round};
  st = run_all_unlocked(srv, ops, &prepare);
  if (srv->round.round_id != round) {
    srv->round.engine_calls--;
    wt_status_free(st);
    st = wt_srv_aborted_error(srv, "FinishWeightUpdate", round);
    goto out;
  }
  if (st != NULL) {
    srv->round.engine_calls--;
    srv->round.busy = NULL;
    st = wt_status_prefix(st, "FinishWeightUpdate");
    /* Nothing of a round that cannot commit is kept. */
    wt_srv_abort_round_locked(srv, WT_CAUSE_FINISH, wt_status_message(st));
    goto out;
  }
  /* Every worker is ready to commit. A reader (ChecksumWeights) may hold a
   * store's read lock for seconds: wait for them without mu, so that every
   * other call is answered meanwhile, and an abort in that time still wins.
   * Once every write lock is held the round is committed on every worker,
   * and an abort is refused. */
  wt_mutex_unlock(&srv->round.mu);
  for (uint32_t i = 0; i < srv->nworkers; i++)
    wt_param_store_write_lock(wt_worker_store(srv->workers[i]));
  wt_mutex_lock(&srv->round.mu);
  if (srv->round.round_id != round) {
    for (uint32_t i = 0; i < srv->nworkers; i++)
      wt_param_store_write_unlock(wt_worker_store(srv->workers[i]));
    srv->round.engine_calls--;
    st = wt_srv_aborted_error(srv, "FinishWeightUpdate", round);
    goto out;
  }
  srv->round.committing = true;
  wt_worker_op commit = {.kind = WT_WORKER_OP_COMMIT, .round_id = round};
  st = wt_srv_submit_all(srv, ops, &commit);
  wt_mutex_unlock(&srv->round.mu);
  if (st == NULL) st = wt_srv_wait_all(srv, ops);
  for (uint32_t i = 0; i < srv->nworkers; i++)
    wt_param_store_write_unlock(wt_worker_store(srv->workers[i]));
  wt_mutex_lock(&srv->round.mu);
  srv->round.committing = false;
  srv->round.engine_calls--;
  if (st != NULL) {
    WT_LOGE("server", "round %" PRIu64 ": commit failed on a worker: %s", round,
            wt_status_message(st));
    goto out;
  }
  wt_srv_touch(srv);
  uint64_t seq = ++srv->round.sequence;
  srv->round.committed_digest =
      srv->round.round_updates == 1 ? srv->round.round_digest : 0;
  wt_version_entry *e = &srv->round.history[seq % WT_VERSION_HISTORY];
  free(e->version);
  e->version = copy;
  copy = NULL;
  e->sequence = seq;
  e->committed_unix_ms = wt_unix_ms();
  wt_srv_round_ended_locked(srv, true, WT_CAUSE_COUNT, version, seq);
  srv->round.committed_round = round;
  WT_LOGI("server",
          "round %" PRIu64 " committed version '%s' (sequence %" PRIu64 ")%s%s",
          round, version, seq, srv->base ? " of " : "",
          srv->base ? srv->config.model_name : "");
  srv->round.round_id = 0;
  srv->round.busy = NULL;
  wt_srv_plan_settle_locked(srv); /* the ranks parked for this commit */
  pthread_cond_broadcast(&srv->round.cv);
  wt_mutex_unlock(&srv->round.mu);
  wt_srv_notify_watchers(srv);
  free(ops);
  return NULL;
out:
  pthread_cond_broadcast(&srv->round.cv);
  wt_mutex_unlock(&srv->round.mu);
  free(copy);
  free(ops);
  return st;
}

/* --- what GetServerInfo shows of the round -------------------------------- */

static wt_status *dup_or_null(const char *s, char **out) {
  *out = NULL;
  if (s == NULL) return NULL;
  if ((*out = strdup(s)) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "GetServerInfo: out of memory");
  return NULL;
}

wt_status *wt_srv_round_info_get(wt_server *srv, const uint64_t *received_now,
                                 uint64_t *round_bytes,
                                 wt_srv_round_info *out) {
  wt_status *st = NULL;
  memset(out, 0, sizeof(*out));
  wt_mutex_lock(&srv->round.mu);
  /* The open round and the last ones (never their ids). */
  if (srv->round.round_id != 0) {
    out->open = true;
    out->round_started_unix_ms = srv->metrics.rounds.started_unix_ms;
    for (uint32_t i = 0; i < srv->nworkers; i++)
      round_bytes[i] = wt_srv_round_bytes_locked(srv, i, received_now[i]);
  }
  const wt_srv_round_record *recent[WT_RECENT_ROUNDS];
  out->nrecent = wt_srv_recent_rounds_locked(srv, recent);
  for (size_t k = 0; k < out->nrecent && st == NULL; k++) {
    out->recent[k] = *recent[k];
    st = dup_or_null(recent[k]->version, &out->recent[k].version);
  }
  out->state = wt_srv_state_locked(srv);
  if (st == NULL && srv->round.plan != NULL) {
    out->plan = true;
    st = dup_or_null(wt_srv_plan_digest(srv->round.plan), &out->plan_digest);
    wt_srv_plan_info(srv->round.plan, &out->plan_world_size, &out->plan_joined);
    wt_srv_plan_round_info(srv, &out->plan_ranks_in_round, &out->plan_parked);
  }
  if (st == NULL && srv->round.sequence)
    st = dup_or_null(
        srv->round.history[srv->round.sequence % WT_VERSION_HISTORY].version,
        &out->weight_version);
  wt_mutex_unlock(&srv->round.mu);
  if (st != NULL) wt_srv_round_info_clear(out);
  return st;
}

void wt_srv_round_info_clear(wt_srv_round_info *info) {
  for (size_t k = 0; k < info->nrecent; k++) free(info->recent[k].version);
  free(info->plan_digest);
  free(info->weight_version);
  memset(info, 0, sizeof(*info));
}
