/* fanout.c: one call to every server through a control plane, and the
 * UpdateWeights calls of an update around the trainer's sends (see
 * client_internal.h). */

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/clock.h"
#include "wt/log.h"
#include "wt/pb.h"
#include "wt/lock.h"

wt_status *wt_fan_alloc(size_t n, wt_fan *f) {
  memset(f, 0, sizeof(*f));
  f->n = n;
  f->reqs = calloc(n, sizeof(*f->reqs));
  f->resps = calloc(n, sizeof(*f->resps));
  f->errs = calloc(n, sizeof(*f->errs));
  f->calls = calloc(n, sizeof(*f->calls));
  if (!f->reqs || !f->resps || !f->errs || !f->calls)
    return wt_status_new(WT_RESOURCE_EXHAUSTED,
                         "out of memory for a call to %zu servers", n);
  return NULL;
}

void wt_fan_free(wt_fan *f) {
  for (size_t k = 0; k < f->n; k++) {
    if (f->errs) wt_status_free(f->errs[k]);
    if (f->resps) wt_pb_free(f->resps[k]);
  }
  free(f->reqs);
  free(f->resps);
  free(f->errs);
  free(f->calls);
  memset(f, 0, sizeof(*f));
}

wt_status *wt_fan_start(const wt_control_plane *cp, wt_control_method m,
                        int64_t deadline_ms, wt_fan *f) {
  for (size_t k = 0; k < f->n; k++) {
    if (f->reqs[k] == NULL) continue;
    f->errs[k] = cp->ops->call_start(cp->self, k, m, f->reqs[k], deadline_ms,
                                     &f->calls[k]);
    if (f->errs[k] != NULL) {
      f->calls[k] = NULL;
      return wt_status_copy(f->errs[k]);
    }
  }
  return NULL;
}

wt_status *wt_fan_wait(const wt_control_plane *cp, bool cancel, wt_fan *f) {
  wt_status *first = NULL;
  for (size_t k = 0; k < f->n; k++)
    if (cancel && f->calls[k] != NULL)
      cp->ops->call_cancel(cp->self, f->calls[k]);
  for (size_t k = 0; k < f->n; k++) {
    if (f->calls[k] == NULL) continue;
    f->errs[k] = cp->ops->call_wait(cp->self, f->calls[k], &f->resps[k]);
    f->calls[k] = NULL;
  }
  for (size_t k = 0; k < f->n; k++) {
    if (f->errs[k] == NULL) continue;
    if (first == NULL)
      first = wt_status_copy(f->errs[k]);
    else
      WT_LOGE("client", "%s", wt_status_message(f->errs[k]));
  }
  return first;
}

wt_status *wt_fan_out(const wt_control_plane *cp, wt_control_method m,
                      int64_t deadline_ms, wt_fan *f) {
  wt_status *st = wt_fan_start(cp, m, deadline_ms, f);
  wt_status *wst = wt_fan_wait(cp, st != NULL, f);
  if (st == NULL) return wst;
  wt_status_free(wst);
  return st;
}

/* ---- the calls of an update ---------------------------------------------- */

/* Owns the pending calls while the trainer sends, waits for each as it
 * completes, and cancels the sender when a server fails first. */
typedef struct update_watch {
  const wt_control_plane *cp;
  const wt_fan_sender *s;
  wt_control_call **calls;
  wt_status **errs;
  size_t n;
  wt_mutex mu;
  bool cancel_calls;  /* set by the sender's side when send failed */
  long cancelled_for; /* server whose error cancelled the sender, or -1 */
  /* Once the sender is done, every server must answer by then (0: not
   * yet). */
  int64_t answer_by_ms;
} update_watch;

static void give_up_calls(update_watch *w, size_t *remaining) {
  const wt_control_plane *cp = w->cp;
  for (size_t k = 0; k < w->n; k++) {
    if (w->calls[k] == NULL) continue;
    cp->ops->call_cancel(cp->self, w->calls[k]);
    wt_status_free(cp->ops->call_wait(cp->self, w->calls[k], NULL));
    w->calls[k] = NULL;
    (*remaining)--;
    w->errs[k] = wt_status_new(
        WT_DEADLINE_EXCEEDED,
        "%s UpdateWeights: no answer within %" PRId64
        " ms (the data deadline) after the trainer sent its last byte; the "
        "server or the link to it is gone",
        cp->ops->target(cp->self, k), w->s->answer_within_ms);
    if (w->cancelled_for < 0) w->cancelled_for = (long)k;
  }
}

static void *watch_updates(void *arg) {
  update_watch *w = arg;
  const wt_control_plane *cp = w->cp;
  size_t remaining = 0;
  bool calls_cancelled = false;
  for (size_t k = 0; k < w->n; k++) remaining += w->calls[k] != NULL;
  while (remaining > 0) {
    wt_mutex_lock(&w->mu);
    bool cancel = w->cancel_calls;
    int64_t answer_by = w->answer_by_ms;
    wt_mutex_unlock(&w->mu);
    if (answer_by != 0 && !cancel && wt_mono_ms() > answer_by) {
      give_up_calls(w, &remaining);
      break;
    }
    if (cancel && !calls_cancelled) {
      for (size_t k = 0; k < w->n; k++)
        if (w->calls[k]) cp->ops->call_cancel(cp->self, w->calls[k]);
      calls_cancelled = true;
    }
    for (size_t k = 0; k < w->n; k++) {
      if (w->calls[k] == NULL || !cp->ops->call_done(cp->self, w->calls[k], 0))
        continue;
      w->errs[k] = cp->ops->call_wait(cp->self, w->calls[k], NULL);
      w->calls[k] = NULL;
      remaining--;
      if (w->errs[k] != NULL && w->cancelled_for < 0 && !cancel) {
        w->cancelled_for = (long)k;
        if (w->s->cancel) w->s->cancel(w->s->cancel_arg);
      }
    }
    if (remaining == 0) break;
    /* Block on the first call still running, for at most 5 ms: its end is
     * seen at once (so a round's last answer costs no poll interval), and
     * a cancel or the answer deadline within 5 ms. */
    for (size_t k = 0; k < w->n; k++)
      if (w->calls[k] != NULL) {
        (void)cp->ops->call_done(cp->self, w->calls[k], 5);
        break;
      }
  }
  return NULL;
}

/* The round's error from what the watcher and the sender saw. */
static wt_status *round_error(update_watch *w, wt_status *send_st) {
  if (w->cancelled_for >= 0 && send_st != NULL &&
      wt_status_code(send_st) != WT_CANCELLED) {
    /* Both failed on their own (a server that died takes its workers'
     * data connections with it): the server's error says which server,
     * the trainer's which worker. */
    const wt_status *srv_st = w->errs[w->cancelled_for];
    return wt_status_new(wt_status_code(srv_st), "%s; the trainer: %s",
                         wt_status_message(srv_st), wt_status_message(send_st));
  }
  /* The server's own error explains a trainer cancelled on its account
   * better than the trainer's CANCELLED does. */
  if (w->cancelled_for >= 0) return wt_status_copy(w->errs[w->cancelled_for]);
  if (send_st != NULL) return wt_status_copy(send_st);
  for (size_t k = 0; k < w->n; k++)
    if (w->errs[k]) return wt_status_copy(w->errs[k]);
  return NULL;
}

wt_status *wt_fan_around(const wt_control_plane *cp,
                         const ProtobufCMessage *const *reqs,
                         int64_t deadline_ms, const wt_fan_sender *s) {
  wt_status *st = NULL, *send_st = NULL;
  size_t n = cp->ops->server_count(cp->self);
  update_watch w = {.cp = cp, .s = s, .n = n, .cancelled_for = -1};
  bool mu_init = false, thread_started = false;
  pthread_t thread;
  w.calls = calloc(n, sizeof(*w.calls));
  w.errs = calloc(n, sizeof(*w.errs));
  if (!w.calls || !w.errs)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for an update");
  wt_mutex_init(&w.mu, WT_LOCK_FANOUT, 0, "fanout.mu");
  mu_init = true;
  for (size_t k = 0; k < n && st == NULL; k++) {
    st = cp->ops->call_start(cp->self, k, WT_CONTROL_UPDATE, reqs[k],
                             deadline_ms, &w.calls[k]);
    if (st != NULL) w.calls[k] = NULL;
  }
  int rc = pthread_create(&thread, NULL, watch_updates, &w);
  if (rc != 0) {
    /* Without the watcher nobody would wait for the calls: cancel them and
     * wait here. */
    for (size_t k = 0; k < n; k++)
      if (w.calls[k]) {
        cp->ops->call_cancel(cp->self, w.calls[k]);
        wt_status_free(cp->ops->call_wait(cp->self, w.calls[k], NULL));
        w.calls[k] = NULL;
      }
    if (st == NULL)
      st = wt_status_from_errno(rc, "cannot start the update's watcher");
    goto out;
  }
  thread_started = true;
  if (st != NULL) goto out;
  send_st = s->send != NULL ? s->send(s->arg) : NULL;
  if (send_st == NULL) {
    wt_mutex_lock(&w.mu);
    w.answer_by_ms = wt_mono_ms() + s->answer_within_ms + 1000;
    wt_mutex_unlock(&w.mu);
  }
out:
  if (thread_started) {
    if (send_st != NULL || st != NULL) {
      wt_mutex_lock(&w.mu);
      w.cancel_calls = true;
      wt_mutex_unlock(&w.mu);
    }
    pthread_join(thread, NULL);
  }
  if (st == NULL) st = round_error(&w, send_st);
  wt_status_free(send_st);
  for (size_t k = 0; w.errs && k < n; k++) wt_status_free(w.errs[k]);
  if (mu_init) wt_mutex_destroy(&w.mu);
  free(w.errs);
  free(w.calls);
  return st;
}
