/* multirank.c: many trainer ranks, one version (docs/multirank.md).
 *
 * An init with a shard plan (init_info.shard_plan) is joined by every
 * trainer rank: the first with a new digest creates the engines, the others
 * join it (each rank once). A round of the plan is joined by every rank
 * (StartWeightUpdate with plan_digest and trainer_rank), each rank sends
 * exactly its boxes of the plan (one PushWeights; the server takes one push
 * at a time, in rank order), and every rank finishes: the last finish
 * commits, for every rank at once, and only when every rank's boxes
 * landed, which the plan makes every byte of every tensor it names, once.
 * Whatever fails (a push, a rank's call cut by its death, a rank that does
 * not come within the data deadline) aborts the round for every rank.
 *
 * No rank's wait holds a thread or a place of the round class: a push
 * before its turn, a finish before the last, an update before the last
 * rank's are parked (wt_rpc_call_park) in the plan's waiter tables, and
 * resumed (a push whose turn came) or completed (the round committed,
 * received, or failed) by whoever ends the wait; the watchdog's look
 * (wt_srv_plan_watch_locked) fails the round when a parked call is cut or
 * the data deadline passes, naming the ranks. Turns go in rank order, on
 * every server alike: a trainer rank that sends to several servers in
 * lockstep then never waits on one server for a rank that another server
 * serves first (issue 45: two servers deadlocked, each serving a different
 * rank first).
 *
 * The plan never aborts a round itself: a check of it that fails the round
 * says why (wt_srv_plan_fail), and its caller aborts the round
 * (round_abort.c), which completes the parked calls
 * (wt_srv_plan_settle_locked).
 *
 * Everything here runs under the round's mu unless it says otherwise.
 */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_state.h"
#include "wt/dtype.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/shard_plan.h"

#define NO_RANK UINT32_MAX

typedef struct rank_boxes {
  size_t n;
  const Wt__V1__TensorBox **boxes; /* into the plan message, sorted by name */
  size_t *index;                   /* the store's index of each */
  wt_box *box;
  uint64_t *nbytes;
} rank_boxes;

struct wt_srv_plan {
  Wt__V1__ShardPlan *msg; /* a packed-and-unpacked copy, owned */
  uint32_t world;
  rank_boxes *ranks;
  bool *joined; /* joined the init */
  uint32_t njoined;
  /* The endpoints of the init, for the ranks that join it. */
  wt_engine_endpoint *endpoints;
  uint32_t nendpoints;
  /* The open round of the plan (round_id), and each rank's part in it. */
  uint64_t round_id;
  bool *in_round, *pushed, *finished;
  uint32_t nfinished;
  char *version; /* the first finisher's */
  /* A receiving backend's round: each rank's UpdateWeights info (copies),
   * until every rank's came and one receive took them all. */
  Wt__V1__WeightTransferUpdateInfo **arrived;
  bool *came;    /* its update came (the info may have moved to the receive) */
  bool *pushing; /* a push of the rank has its turn */
  uint32_t narrived;
  /* Parked calls, by rank (NULL: none), and how many in all. */
  wt_srv_plan_waiter *push_wait;
  wt_rpc_call **finish_wait, **update_wait;
  uint32_t nparked;
  uint32_t granted;        /* the rank whose push was resumed for its turn */
  uint64_t received_round; /* that receive landed every rank's boxes */
};

void wt_srv_plan_free(wt_srv_plan *p) {
  if (p == NULL) return;
  for (uint32_t r = 0; p->ranks && r < p->world; r++) {
    free(p->ranks[r].boxes);
    free(p->ranks[r].index);
    free(p->ranks[r].box);
    free(p->ranks[r].nbytes);
  }
  for (uint32_t i = 0; p->endpoints && i < p->nendpoints; i++)
    free(p->endpoints[i].worker_address);
  free(p->endpoints);
  free(p->ranks);
  free(p->joined);
  free(p->in_round);
  free(p->pushed);
  free(p->finished);
  free(p->version);
  for (uint32_t r = 0; p->arrived != NULL && r < p->world; r++)
    if (p->arrived[r] != NULL) wt_pb_free(&p->arrived[r]->base);
  free(p->arrived);
  free(p->came);
  free(p->pushing);
  if (p->nparked != 0)
    WT_LOGE("server", "a shard plan freed with %u parked calls", p->nparked);
  free(p->push_wait);
  free(p->finish_wait);
  free(p->update_wait);
  if (p->msg != NULL) wt_pb_free(&p->msg->base);
  free(p);
}

uint64_t wt_srv_plan_generation(const wt_srv_plan *p) {
  return p->msg->generation;
}

uint32_t wt_srv_plan_world(const wt_srv_plan *p) {
  return p->world;
}

const char *wt_srv_plan_digest(const wt_srv_plan *p) {
  return p->msg->digest;
}

void wt_srv_plan_info(const wt_srv_plan *p, uint32_t *world, uint32_t *joined) {
  *world = p->world;
  *joined = p->njoined;
}

void wt_srv_plan_round_info(const wt_server *srv, uint32_t *in_round,
                            uint32_t *parked) {
  const wt_srv_plan *p = srv->round.plan;
  *in_round = *parked = 0;
  if (p == NULL || p->round_id == 0 || srv->round.round_id != p->round_id)
    return;
  for (uint32_t r = 0; r < p->world; r++) *in_round += p->in_round[r];
  *parked = p->nparked;
}

/* A copy of `m`. */
static wt_status *copy_plan(const Wt__V1__ShardPlan *m,
                            Wt__V1__ShardPlan **out) {
  return wt_status_prefix(wt_pb_copy(&m->base, (ProtobufCMessage **)out),
                          "InitWeightTransferEngine");
}

wt_status *wt_srv_plan_new(wt_server *srv, const Wt__V1__ShardPlan *msg,
                           wt_srv_plan **out) {
  wt_status *st = NULL;
  wt_srv_plan *p = calloc(1, sizeof(*p));
  *out = NULL;
  if (p == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "InitWeightTransferEngine: out of memory");
  st = wt_shard_plan_check(msg);
  if (st != NULL) {
    st = wt_status_prefix(st, "InitWeightTransferEngine: init_info");
    goto out;
  }
  WT_CHECK(copy_plan(msg, &p->msg));
  p->world = msg->world_size;
  p->ranks = calloc(p->world, sizeof(*p->ranks));
  p->joined = calloc(p->world, sizeof(bool));
  p->in_round = calloc(p->world, sizeof(bool));
  p->pushed = calloc(p->world, sizeof(bool));
  p->finished = calloc(p->world, sizeof(bool));
  p->arrived = calloc(p->world, sizeof(*p->arrived));
  p->came = calloc(p->world, sizeof(bool));
  p->pushing = calloc(p->world, sizeof(bool));
  p->push_wait = calloc(p->world, sizeof(*p->push_wait));
  p->finish_wait = calloc(p->world, sizeof(*p->finish_wait));
  p->update_wait = calloc(p->world, sizeof(*p->update_wait));
  p->granted = NO_RANK;
  if (!p->ranks || !p->joined || !p->in_round || !p->pushed || !p->finished ||
      !p->arrived || !p->came || !p->pushing || !p->push_wait ||
      !p->finish_wait || !p->update_wait)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "InitWeightTransferEngine: out of memory");
  const wt_param_store *store = wt_worker_store(srv->workers[0]);
  uint64_t runs = 0;
  for (uint32_t r = 0; r < p->world; r++) {
    const Wt__V1__RankBoxes *rb = p->msg->ranks[r];
    rank_boxes *q = &p->ranks[r];
    size_t n = rb->n_boxes ? rb->n_boxes : 1;
    q->boxes = calloc(n, sizeof(*q->boxes));
    q->index = calloc(n, sizeof(*q->index));
    q->box = calloc(n, sizeof(*q->box));
    q->nbytes = calloc(n, sizeof(*q->nbytes));
    if (!q->boxes || !q->index || !q->box || !q->nbytes)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "InitWeightTransferEngine: out of memory");
    q->n = rb->n_boxes;
    for (size_t k = 0; k < rb->n_boxes; k++) {
      const Wt__V1__TensorBox *b = rb->boxes[k];
      size_t idx = 0;
      wt_status *e = wt_param_store_find(store, b->name, &idx);
      if (e != NULL) {
        st = wt_status_prefix(e,
                              "InitWeightTransferEngine: "
                              "init_info.shard_plan (rank %u)",
                              r);
        goto out;
      }
      const wt_tensor_meta *m = wt_param_store_meta(store, idx);
      wt_dtype dt;
      WT_CHECK(wt_dtype_from_name(b->dtype, &dt)); /* checked by the plan */
      if (dt != m->dtype || (int)b->n_shape != m->ndim ||
          !wt_dims_equal(b->shape, m->shape, b->n_shape)) {
        char a[128], c[128];
        WT_FAIL(WT_INVALID_ARGUMENT,
                "InitWeightTransferEngine: init_info.shard_plan: tensor '%s' "
                "is %s %s in the plan and %s %s in the model",
                b->name, wt_dtype_torch_name(dt),
                wt_shape_format(b->shape, (int)b->n_shape, a, sizeof(a)),
                wt_dtype_torch_name(m->dtype),
                wt_shape_format(m->shape, m->ndim, c, sizeof(c)));
      }
      q->boxes[k] = b;
      q->index[k] = idx;
      q->box[k] = (wt_box){(uint32_t)b->n_shape, b->shape, b->offsets, b->sizes,
                           wt_dtype_itemsize(dt)};
      q->nbytes[k] = wt_box_bytes(&q->box[k]);
      runs += wt_box_nruns(&q->box[k]);
    }
  }
  /* An engine may keep an entry per run for a round (ucx's iov). */
  if (runs > WT_PLAN_MAX_RUNS)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "InitWeightTransferEngine: init_info.shard_plan: its boxes land "
            "in %" PRIu64
            " separate runs of their tensors; at most %u (a box "
            "of whole rows is one run: shard on dimension 0)",
            runs, WT_PLAN_MAX_RUNS);
  *out = p;
  p = NULL;
out:
  wt_srv_plan_free(p);
  return st;
}

wt_status *wt_srv_plan_join_locked(wt_srv_plan *p, uint32_t rank,
                                   const char *peer) {
  if (p->joined[rank])
    return wt_status_new(WT_ALREADY_EXISTS,
                         "InitWeightTransferEngine: rank %u already joined "
                         "this init (plan digest %.16s...); two trainer "
                         "processes claim rank %u (the second from %s)",
                         rank, p->msg->digest, rank, peer ? peer : "?");
  p->joined[rank] = true;
  p->njoined++;
  return NULL;
}

wt_status *wt_srv_plan_keep_endpoints(wt_srv_plan *p,
                                      const wt_engine_endpoint *eps,
                                      uint32_t n) {
  p->endpoints = calloc(n ? n : 1, sizeof(*p->endpoints));
  if (p->endpoints == NULL) goto oom;
  p->nendpoints = n;
  for (uint32_t i = 0; i < n; i++) {
    p->endpoints[i] = eps[i];
    p->endpoints[i].worker_address = NULL;
    if (eps[i].worker_address_len) {
      p->endpoints[i].worker_address = malloc(eps[i].worker_address_len);
      if (p->endpoints[i].worker_address == NULL) goto oom;
      memcpy(p->endpoints[i].worker_address, eps[i].worker_address,
             eps[i].worker_address_len);
    }
  }
  return NULL;
oom:
  return wt_status_new(WT_RESOURCE_EXHAUSTED,
                       "InitWeightTransferEngine: out of memory");
}

wt_status *wt_srv_plan_endpoints(const wt_srv_plan *p, wt_engine_endpoint *out,
                                 uint32_t n) {
  for (uint32_t i = 0; i < n && i < p->nendpoints; i++) {
    out[i] = p->endpoints[i];
    out[i].worker_address = NULL;
    if (p->endpoints[i].worker_address_len) {
      out[i].worker_address = malloc(p->endpoints[i].worker_address_len);
      if (out[i].worker_address == NULL)
        return wt_status_new(WT_RESOURCE_EXHAUSTED,
                             "InitWeightTransferEngine: out of memory");
      memcpy(out[i].worker_address, p->endpoints[i].worker_address,
             p->endpoints[i].worker_address_len);
    }
  }
  return NULL;
}

/* --- rounds ---------------------------------------------------------------
 */

wt_status *wt_srv_plan_check_start(const wt_srv_plan *p, uint32_t rank,
                                   const char *digest) {
  if (digest == NULL || *digest == '\0')
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "StartWeightUpdate: this server's init has a shard "
                         "plan of %u trainer ranks (digest %.16s...); every "
                         "rank's StartWeightUpdate names plan_digest and "
                         "trainer_rank (docs/multirank.md)",
                         p->world, p->msg->digest);
  if (strcmp(digest, p->msg->digest) != 0)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "StartWeightUpdate: plan_digest %.16s... (rank %u) "
                         "is not this server's plan (%.16s..., from its last "
                         "InitWeightTransferEngine); the ranks' layouts "
                         "changed or another init replaced it: init again",
                         digest, rank, p->msg->digest);
  if (rank >= p->world)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "StartWeightUpdate: trainer_rank %u; the plan has "
                         "ranks 0..%u",
                         rank, p->world - 1);
  if (!p->joined[rank])
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "StartWeightUpdate: rank %u has not joined this "
                         "init (plan digest %.16s...); its "
                         "InitWeightTransferEngine comes first",
                         rank, p->msg->digest);
  return NULL;
}

void wt_srv_plan_round_begin(wt_srv_plan *p, uint64_t round_id) {
  p->round_id = round_id;
  memset(p->in_round, 0, p->world * sizeof(bool));
  memset(p->pushed, 0, p->world * sizeof(bool));
  memset(p->finished, 0, p->world * sizeof(bool));
  p->nfinished = 0;
  free(p->version);
  p->version = NULL;
  for (uint32_t r = 0; r < p->world; r++)
    if (p->arrived[r] != NULL) {
      wt_pb_free(&p->arrived[r]->base);
      p->arrived[r] = NULL;
    }
  p->narrived = 0;
  memset(p->came, 0, p->world * sizeof(bool));
  memset(p->pushing, 0, p->world * sizeof(bool));
  p->granted = NO_RANK;
}

wt_status *wt_srv_plan_round_join(wt_srv_plan *p, uint64_t round_id,
                                  uint32_t rank) {
  if (p->round_id != round_id) wt_srv_plan_round_begin(p, round_id);
  if (p->in_round[rank])
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "StartWeightUpdate: rank %u already joined the round "
                         "in progress (state: updating); two trainer "
                         "processes claim rank %u, or it started twice",
                         rank, rank);
  p->in_round[rank] = true;
  return NULL;
}

/* The ranks of `flags` that are false, as "1, 3" into buf. */
static const char *missing(const wt_srv_plan *p, const bool *flags, char *buf,
                           size_t n) {
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t r = 0; r < p->world && at + 16 < n; r++)
    if (!flags[r])
      at += (size_t)snprintf(buf + at, n - at, "%s%u", at ? ", " : "", r);
  return buf;
}

/* --- parked waits ---------------------------------------------------------
 */

static bool round_open(const wt_server *srv, const wt_srv_plan *p) {
  return p->round_id != 0 && srv->round.round_id == p->round_id;
}

/* The ranks after which the round now waits, and what they did not do. */
static const char *awaited(const wt_srv_plan *p, const char **verb,
                           wt_srv_cause *cause, char *buf, size_t n) {
  bool any_finish = false, any_update = false;
  for (uint32_t r = 0; r < p->world; r++) {
    any_finish |= p->finish_wait[r] != NULL;
    any_update |= p->update_wait[r] != NULL;
  }
  if (any_update) {
    *verb = "sent no update";
    *cause = WT_CAUSE_RECEIVE;
    return missing(p, p->came, buf, n);
  }
  bool absent = false, unpushed = false;
  for (uint32_t r = 0; r < p->world; r++) {
    absent |= !p->in_round[r];
    unpushed |= !p->pushed[r];
  }
  if (absent) {
    *verb = "did not start this round";
    *cause = WT_CAUSE_TIMEOUT;
    return missing(p, p->in_round, buf, n);
  }
  if (unpushed || !any_finish) {
    *verb = "did not send its boxes";
    *cause = WT_CAUSE_RECEIVE;
    return missing(p, p->pushed, buf, n);
  }
  *verb = "did not finish";
  *cause = WT_CAUSE_TIMEOUT;
  return missing(p, p->finished, buf, n);
}

void wt_srv_plan_settle_locked(wt_server *srv) {
  wt_srv_plan *p = srv->round.plan;
  if (p == NULL || p->nparked == 0) return;
  bool open = round_open(srv, p);
  bool received = p->received_round == p->round_id;
  for (uint32_t r = 0; r < p->world; r++) {
    if (p->update_wait[r] != NULL && (!open || received)) {
      wt_rpc_call *c = p->update_wait[r];
      p->update_wait[r] = NULL;
      p->nparked--;
      wt_rpc_call_complete(
          c, open ? NULL
                  : wt_srv_aborted_error(srv, "UpdateWeights", p->round_id));
    }
    if (open) continue;
    if (p->finish_wait[r] != NULL) {
      wt_rpc_call *c = p->finish_wait[r];
      p->finish_wait[r] = NULL;
      p->nparked--;
      wt_status *st = NULL;
      if (srv->round.committed_round == p->round_id) {
        Wt__V1__FinishWeightUpdateResponse resp =
            WT__V1__FINISH_WEIGHT_UPDATE_RESPONSE__INIT;
        resp.weight_version = p->version;
        st = wt_rpc_call_respond(c, &resp.base);
      } else {
        st = wt_srv_aborted_error(srv, "FinishWeightUpdate", p->round_id);
      }
      wt_rpc_call_complete(c, st);
    }
    if (p->push_wait[r].call != NULL) {
      wt_srv_plan_waiter w = p->push_wait[r];
      p->push_wait[r] = (wt_srv_plan_waiter){0};
      p->nparked--;
      wt_rpc_call_complete(
          w.call, wt_srv_aborted_error(srv, "PushWeights", p->round_id));
      if (w.free_arg) w.free_arg(w.arg);
    }
  }
}

/* The rank whose push goes next: the lowest that has not pushed. */
static uint32_t next_turn(const wt_srv_plan *p) {
  for (uint32_t r = 0; r < p->world; r++)
    if (!p->pushed[r]) return r;
  return NO_RANK;
}

void wt_srv_plan_kick_locked(wt_server *srv) {
  wt_srv_plan *p = srv->round.plan;
  if (p == NULL || !round_open(srv, p) || srv->round.busy != NULL ||
      p->granted != NO_RANK)
    return;
  uint32_t r = next_turn(p);
  if (r == NO_RANK || p->push_wait[r].call == NULL || p->pushing[r]) return;
  wt_srv_plan_waiter w = p->push_wait[r];
  p->push_wait[r] = (wt_srv_plan_waiter){0};
  p->nparked--;
  p->granted = r;
  wt_srv_touch(srv);
  wt_rpc_call_resume(w.call, w.resume, w.arg);
}

/* The round fails for `why`, counted under `cause`: the caller aborts it. */
static void fail_round(wt_srv_plan_fail *fail, wt_srv_cause cause,
                       const char *why) {
  fail->cause = cause;
  snprintf(fail->why, sizeof(fail->why), "%s", why);
}

/* Fails the round: rank `rank`'s parked `what` call ended. */
static void cut(wt_srv_plan_fail *fail, const char *what, uint32_t rank,
                wt_rpc_call *call, wt_srv_cause cause) {
  char why[512];
  snprintf(why, sizeof(why),
           "%s from %s (rank %u): the trainer's call ended (cancelled, or "
           "the trainer is gone) while it waited for the other ranks",
           what, wt_rpc_call_peer(call), rank);
  fail_round(fail, cause, why);
}

bool wt_srv_plan_watch_locked(wt_server *srv, wt_srv_plan_fail *fail) {
  wt_srv_plan *p = srv->round.plan;
  fail->why[0] = '\0';
  if (p == NULL || p->nparked == 0) return false;
  if (!round_open(srv, p)) {
    wt_srv_plan_settle_locked(srv);
    return false;
  }
  wt_srv_plan_kick_locked(srv);
  for (uint32_t r = 0; r < p->world; r++) {
    if (p->push_wait[r].call && wt_rpc_call_cancelled(p->push_wait[r].call)) {
      cut(fail, "PushWeights", r, p->push_wait[r].call, WT_CAUSE_RECEIVE);
      return true;
    }
    if (p->finish_wait[r] && wt_rpc_call_cancelled(p->finish_wait[r])) {
      cut(fail, "FinishWeightUpdate", r, p->finish_wait[r], WT_CAUSE_TIMEOUT);
      return true;
    }
    if (p->update_wait[r] && wt_rpc_call_cancelled(p->update_wait[r])) {
      cut(fail, "UpdateWeights", r, p->update_wait[r], WT_CAUSE_RECEIVE);
      return true;
    }
  }
  /* The data deadline runs from the round's last progress (a chunk, a
   * rank's call), so ranks that take turns are not cut short. A receive
   * that runs (busy) bounds itself. */
  if (srv->round.busy != NULL) return p->nparked != 0;
  int64_t idle = wt_mono_ms() - atomic_load(&srv->round.last_activity_ms);
  if (idle >= (int64_t)srv->round.data_timeout_ms) {
    char why[768], list[256];
    const char *verb;
    wt_srv_cause cause;
    const char *ranks = awaited(p, &verb, &cause, list, sizeof(list));
    snprintf(why, sizeof(why),
             "rank(s) %s %s within the data deadline (%u ms) while %u "
             "rank(s) waited",
             ranks, verb, srv->round.data_timeout_ms, p->nparked);
    fail_round(fail, cause, why);
    return false; /* the abort completes every parked call */
  }
  return p->nparked != 0;
}

/* `call`'s trainer_rank against the open round `round` of the plan: in
 * range, and joined. */
static wt_status *rank_in_round(const wt_srv_plan *p, const char *call,
                                uint32_t rank, uint64_t round) {
  if (rank >= p->world)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: trainer_rank %u; the plan has ranks 0..%u", call,
                         rank, p->world - 1);
  if (p->round_id != round || !p->in_round[rank])
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "%s: rank %u has not joined this round; its "
                         "StartWeightUpdate comes first",
                         call, rank);
  return NULL;
}

wt_status *wt_srv_plan_push_turn(wt_server *srv, wt_rpc_call *call,
                                 uint32_t rank, uint64_t round,
                                 const Wt__V1__WeightTransferUpdateInfo *info,
                                 const wt_srv_plan_waiter *resume,
                                 wt_srv_plan_fail *fail) {
  wt_srv_plan *p = srv->round.plan;
  fail->why[0] = '\0';
  wt_status *st = rank_in_round(p, "PushWeights", rank, round);
  if (st != NULL) return st;
  if (p->granted == rank) { /* resumed for its turn */
    p->granted = NO_RANK;
    p->pushing[rank] = true;
    return NULL;
  }
  if (p->pushed[rank] || p->pushing[rank] || p->push_wait[rank].call)
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "PushWeights: rank %u already sent its boxes in "
                         "this round (one push per rank)",
                         rank);
  /* Its header is checked before it waits: a rank that sends what is not
   * its own hears at once, and the round fails for every rank. */
  wt_srv_resolved chk;
  st = wt_srv_plan_resolve(srv, rank, info, false, &chk);
  wt_srv_resolved_clear(&chk);
  if (st != NULL) {
    char why[1024];
    snprintf(why, sizeof(why), "PushWeights from %s (rank %u) failed: %s",
             call ? wt_rpc_call_peer(call) : "?", rank, wt_status_message(st));
    fail_round(fail, WT_CAUSE_RECEIVE, why);
    return wt_status_prefix(st, "PushWeights");
  }
  if (srv->round.busy == NULL && p->granted == NO_RANK &&
      next_turn(p) == rank) {
    p->pushing[rank] = true;
    return NULL;
  }
  if (resume == NULL || call == NULL)
    return wt_status_new(WT_INTERNAL,
                         "PushWeights: rank %u: its turn has not come and "
                         "the call cannot wait",
                         rank);
  /* Its turn comes when the ranks before it pushed: parked till then. */
  p->push_wait[rank] = *resume;
  p->push_wait[rank].call = call;
  p->nparked++;
  wt_srv_touch(srv);
  pthread_cond_broadcast(&srv->round.cv); /* the watchdog watches it */
  return wt_rpc_call_park(call);
}

/* The boxes of *out, n of them, point at copies out owns: the plan's own
 * arrays may go (a new init frees it) while the workers read them. */
static wt_status *own_dims(wt_srv_resolved *out, size_t n) {
  out->dims = wt_boxes_own(out->boxes, n);
  if (out->dims != NULL) return NULL;
  wt_srv_resolved_clear(out);
  return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory for %zu boxes", n);
}

wt_status *wt_srv_plan_resolve(const wt_server *srv, uint32_t rank,
                               const Wt__V1__WeightTransferUpdateInfo *info,
                               bool in_order, wt_srv_resolved *out) {
  const wt_srv_plan *p = srv->round.plan;
  const rank_boxes *q = &p->ranks[rank];
  memset(out, 0, sizeof(*out));
  if (info == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "update_info is missing");
  if (info->n_dtype_names != info->n_names || info->n_shapes != info->n_names)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info lists %zu names, %zu "
                         "dtype_names and %zu shapes",
                         info->n_names, info->n_dtype_names, info->n_shapes);
  if (info->n_packed_tensor_sizes != 0 &&
      info->n_packed_tensor_sizes != info->n_names)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "update_info lists %zu names and %zu "
                         "packed_tensor_sizes",
                         info->n_names, info->n_packed_tensor_sizes);
  if (info->n_names != q->n)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "rank %u sends %zu tensors; its boxes "
                         "of the plan are %zu",
                         rank, info->n_names, q->n);
  size_t n = q->n ? q->n : 1;
  out->index = calloc(n, sizeof(size_t));
  out->nbytes = calloc(n, sizeof(uint64_t));
  out->boxes = calloc(n, sizeof(wt_box));
  bool *seen = calloc(n, sizeof(bool));
  wt_status *st = NULL;
  if (!out->index || !out->nbytes || !out->boxes || !seen)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t k = 0; k < info->n_names; k++) {
    const char *name = info->names[k];
    /* The rank's boxes are sorted by name. */
    size_t lo = 0, hi = q->n;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      int c = strcmp(q->boxes[mid]->name, name);
      if (c == 0) {
        lo = mid;
        break;
      }
      if (c < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo >= q->n || strcmp(q->boxes[lo]->name, name) != 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "rank %u sends '%s', which is none of its boxes "
              "of the plan",
              rank, name);
    if (in_order && lo != k)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "rank %u sends '%s' as its tensor %zu; the plan "
              "has it at %zu (a receiving backend takes a rank's boxes in the "
              "plan's order, sorted by name)",
              rank, name, k, lo);
    if (seen[lo])
      WT_FAIL(WT_INVALID_ARGUMENT, "rank %u sends '%s' twice", rank, name);
    seen[lo] = true;
    const Wt__V1__TensorBox *b = q->boxes[lo];
    wt_dtype dt;
    WT_CHECK(wt_status_prefix(wt_dtype_from_name(info->dtype_names[k], &dt),
                              "'%s'", name));
    const Wt__V1__Shape *sh = info->shapes[k];
    wt_dtype want;
    WT_CHECK(wt_dtype_from_name(b->dtype, &want));
    if (dt != want || sh == NULL || sh->n_dims != b->n_sizes ||
        !wt_dims_equal(sh->dims, b->sizes, b->n_sizes)) {
      char a[128], c[160];
      WT_FAIL(WT_INVALID_ARGUMENT,
              "rank %u sends '%s' as %s %s; its box %s of the "
              "plan is %s %s",
              rank, name, wt_dtype_torch_name(dt),
              sh ? wt_shape_format(sh->dims, (int)sh->n_dims, a, sizeof(a))
                 : "(no shape)",
              wt_box_format(b, c, sizeof(c)), wt_dtype_torch_name(want),
              wt_shape_format(b->sizes, (int)b->n_sizes, a, sizeof(a)));
    }
    if (info->n_packed_tensor_sizes != 0 &&
        info->packed_tensor_sizes[k] != q->nbytes[lo])
      WT_FAIL(WT_INVALID_ARGUMENT,
              "rank %u: '%s': packed_tensor_sizes[%zu] is %" PRIu64
              " bytes; its box has %" PRIu64,
              rank, name, k, info->packed_tensor_sizes[k], q->nbytes[lo]);
    out->index[k] = q->index[lo];
    out->nbytes[k] = q->nbytes[lo];
    out->boxes[k] = q->box[lo];
    out->u.total_bytes += q->nbytes[lo];
  }
  wt_srv_resolved_done(out, info->n_names, info);
  st = own_dims(out, info->n_names);
out:
  free(seen);
  if (st != NULL) wt_srv_resolved_clear(out);
  return st;
}

void wt_srv_plan_pushed(wt_srv_plan *p, uint64_t round, uint32_t rank) {
  if (p->round_id != round || rank >= p->world) return;
  p->pushed[rank] = true;
  p->pushing[rank] = false;
}

wt_status *wt_srv_plan_finish(wt_server *srv, wt_rpc_call *call, uint32_t rank,
                              uint64_t round, const char *version, bool *last,
                              wt_srv_plan_fail *fail) {
  wt_srv_plan *p = srv->round.plan;
  char why[768];
  fail->why[0] = '\0';
  *last = false;
  wt_status *st = rank_in_round(p, "FinishWeightUpdate", rank, round);
  if (st != NULL) return st;
  if (p->finished[rank])
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "FinishWeightUpdate: rank %u already finished this "
                         "round",
                         rank);
  if (!p->pushed[rank]) {
    snprintf(why, sizeof(why),
             "FinishWeightUpdate: rank %u finished without having sent its "
             "boxes",
             rank);
    fail_round(fail, WT_CAUSE_FINISH, why);
    return wt_status_new(WT_FAILED_PRECONDITION, "%s", why);
  }
  if (p->version != NULL && strcmp(p->version, version) != 0) {
    snprintf(why, sizeof(why),
             "FinishWeightUpdate: rank %u finishes as version '%.200s', an "
             "earlier rank as '%.200s'; every rank commits the same version",
             rank, version, p->version);
    fail_round(fail, WT_CAUSE_FINISH, why);
    return wt_status_new(WT_INVALID_ARGUMENT, "%s", why);
  }
  if (p->version == NULL && (p->version = strdup(version)) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "FinishWeightUpdate: out of memory");
  p->finished[rank] = true;
  wt_srv_touch(srv);
  p->nfinished++;
  pthread_cond_broadcast(&srv->round.cv);
  if (p->nfinished == p->world) {
    *last = true;
    return NULL;
  }
  /* Every rank but the last waits for the last one's commit, parked. */
  p->finish_wait[rank] = call;
  p->nparked++;
  return wt_rpc_call_park(call);
}

/* --- a receiving backend's round (UpdateWeights) ------------------------- */

wt_status *wt_srv_plan_update_arrive(
    wt_server *srv, uint32_t rank, uint64_t round,
    const Wt__V1__WeightTransferUpdateInfo *info, bool *last) {
  wt_srv_plan *p = srv->round.plan;
  *last = false;
  wt_status *st = rank_in_round(p, "UpdateWeights", rank, round);
  if (st != NULL) return st;
  if (p->came[rank] || p->pushed[rank])
    return wt_status_new(WT_FAILED_PRECONDITION,
                         "UpdateWeights: rank %u already sent its update in "
                         "this round (one per rank)",
                         rank);
  wt_srv_resolved r;
  st = wt_status_prefix(wt_srv_plan_resolve(srv, rank, info, true, &r),
                        "UpdateWeights");
  wt_srv_resolved_clear(&r);
  if (st != NULL) return st;
  st = wt_pb_copy(&info->base, (ProtobufCMessage **)&p->arrived[rank]);
  if (st != NULL) return wt_status_prefix(st, "UpdateWeights");
  p->came[rank] = true;
  p->narrived++;
  wt_srv_touch(srv);
  pthread_cond_broadcast(&srv->round.cv);
  *last = p->narrived == p->world;
  return NULL;
}

wt_status *wt_srv_plan_update_whole(wt_server *srv, wt_srv_resolved *out) {
  wt_srv_plan *p = srv->round.plan;
  size_t n = 0;
  memset(out, 0, sizeof(*out));
  for (uint32_t r = 0; r < p->world; r++) n += p->ranks[r].n;
  out->index = calloc(n ? n : 1, sizeof(size_t));
  out->nbytes = calloc(n ? n : 1, sizeof(uint64_t));
  out->boxes = calloc(n ? n : 1, sizeof(wt_box));
  out->rank_first = calloc(p->world + 1, sizeof(size_t));
  out->rank_info = calloc(p->world, sizeof(*out->rank_info));
  if (!out->index || !out->nbytes || !out->boxes || !out->rank_first ||
      !out->rank_info) {
    wt_srv_resolved_clear(out);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "UpdateWeights: out of memory");
  }
  size_t at = 0;
  for (uint32_t r = 0; r < p->world; r++) {
    const rank_boxes *q = &p->ranks[r];
    out->rank_first[r] = at;
    /* The receive owns them: the plan may go (a new init) while it runs. */
    out->rank_info[r] = p->arrived[r];
    p->arrived[r] = NULL;
    out->nranks = r + 1;
    for (size_t k = 0; k < q->n; k++, at++) {
      out->index[at] = q->index[k];
      out->nbytes[at] = q->nbytes[k];
      out->boxes[at] = q->box[k];
      out->u.total_bytes += q->nbytes[k];
    }
  }
  out->rank_first[p->world] = at;
  out->u.n = n;
  out->u.index = out->index;
  out->u.nbytes = out->nbytes;
  out->u.boxes = out->boxes;
  out->u.packed = true;
  out->u.info = out->rank_info[0];
  out->u.nranks = p->world;
  out->u.rank_first = out->rank_first;
  out->u.rank_info =
      (const Wt__V1__WeightTransferUpdateInfo *const *)out->rank_info;
  return own_dims(out, n);
}

void wt_srv_plan_received(wt_srv_plan *p, uint64_t round) {
  if (p->round_id != round) return;
  p->received_round = round;
  for (uint32_t r = 0; r < p->world; r++) p->pushed[r] = true;
}

wt_status *wt_srv_plan_update_wait(wt_server *srv, wt_rpc_call *call,
                                   uint32_t rank, uint64_t round) {
  wt_srv_plan *p = srv->round.plan;
  (void)round;
  /* Parked until one receive took every rank's update and landed it. */
  p->update_wait[rank] = call;
  p->nparked++;
  pthread_cond_broadcast(&srv->round.cv);
  return wt_rpc_call_park(call);
}
