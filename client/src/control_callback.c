/* control_callback.c: a control plane (wt/control.h) over a caller's
 * synchronous callback that speaks JSON (wt/bindings.h): a binding's own
 * object with vLLM's four methods, or a framework's RPC.
 *
 * Each call runs the callback on a thread of its own, so the orchestration
 * can start a method on every server before it waits for any. A call is
 * shared by that thread and the waiter (two references): the waiter may
 * give up (deadline, cancel) while the callback still runs, and the late
 * answer is then dropped with the thread's reference. The plane counts its
 * running threads; destroying it waits for them, so no callback runs after
 * its owner let go of it. */

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "wt/bindings.h"
#include "wt/clock.h"
#include "client_internal.h"
#include "wt/pb.h"
#include "wt/lock.h"

typedef struct cb_plane {
  char **targets;
  size_t n;
  uint32_t methods;
  uint32_t flags; /* WT_CONTROL_VLLM_DICTS */
  wt_control_callback fn;
  void *user;
  wt_mutex mu;
  pthread_cond_t idle;
  size_t running;
  uint64_t next_round; /* round ids of a plane without them */
} cb_plane;

struct wt_control_call {
  cb_plane *p;
  wt_mutex mu;
  pthread_cond_t cv;
  int refs;
  bool done, cancelled, replied;
  size_t k;
  wt_control_method m;
  char *request;
  int64_t deadline; /* wt_mono_ms */
  int code;
  char *response; /* JSON, or the error's message */
};

struct wt_control_reply {
  wt_control_call call; /* never used: the reply is the call */
};

static void call_unref(wt_control_call *c) {
  wt_mutex_lock(&c->mu);
  int left = --c->refs;
  wt_mutex_unlock(&c->mu);
  if (left > 0) return;
  wt_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->request);
  free(c->response);
  free(c);
}

static void reply(wt_control_call *c, int code, const char *text) {
  wt_mutex_lock(&c->mu);
  if (!c->replied) {
    c->replied = true;
    c->code = code;
    c->response = strdup(text ? text : (code == 0 ? "{}" : ""));
  }
  wt_mutex_unlock(&c->mu);
}

void wt_control_reply_ok(wt_control_reply *r, const char *response_json) {
  if (r != NULL)
    reply((wt_control_call *)r, 0,
          response_json && *response_json ? response_json : "{}");
}

void wt_control_reply_error(wt_control_reply *r, int code,
                            const char *message) {
  if (r != NULL)
    reply((wt_control_call *)r, code > 0 && code <= 16 ? code : WT_UNKNOWN,
          message ? message : "");
}

static void *call_main(void *arg) {
  wt_control_call *c = arg;
  cb_plane *p = c->p;
  p->fn(p->user, c->k, (int)c->m, c->request, (wt_control_reply *)c);
  wt_mutex_lock(&c->mu);
  if (!c->replied) {
    c->replied = true;
    c->code = WT_INTERNAL;
    c->response = strdup(
        "the control plane's callback returned without an "
        "answer");
  }
  c->done = true;
  pthread_cond_broadcast(&c->cv);
  wt_mutex_unlock(&c->mu);
  call_unref(c);
  wt_mutex_lock(&p->mu);
  if (--p->running == 0) pthread_cond_broadcast(&p->idle);
  wt_mutex_unlock(&p->mu);
  return NULL;
}

static size_t cb_server_count(void *self) {
  return ((cb_plane *)self)->n;
}

static const char *cb_target(void *self, size_t k) {
  cb_plane *p = self;
  return k < p->n ? p->targets[k] : "";
}

static wt_status *cb_call_start(void *self, size_t k, wt_control_method m,
                                const ProtobufCMessage *request,
                                int64_t deadline_ms, wt_control_call **out) {
  cb_plane *p = self;
  *out = NULL;
  if (k >= p->n || (p->methods & WT_CONTROL_BIT(m)) == 0)
    return wt_status_new(WT_UNIMPLEMENTED, "%s: the control plane has no %s",
                         k < p->n ? p->targets[k] : "?",
                         wt_control_method_name(m));
  wt_control_call *c = calloc(1, sizeof(*c));
  if (c == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  wt_status *st = (p->flags & WT_CONTROL_VLLM_DICTS)
                      ? wt_vllm_request_json(m, request, &c->request)
                      : wt_pb_to_json(request, &c->request);
  if (st != NULL) {
    free(c);
    return st;
  }
  c->p = p;
  c->k = k;
  c->m = m;
  c->refs = 2;
  c->deadline = wt_mono_ms() + deadline_ms;
  wt_mutex_init(&c->mu, WT_LOCK_CONTROL_CALLBACK, 0, "control_callback.mu");
  wt_cond_init_monotonic(&c->cv);
  wt_mutex_lock(&p->mu);
  p->running++;
  wt_mutex_unlock(&p->mu);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t th;
  int rc = pthread_create(&th, &attr, call_main, c);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    wt_mutex_lock(&p->mu);
    p->running--;
    wt_mutex_unlock(&p->mu);
    c->refs = 1;
    call_unref(c);
    return wt_status_from_errno(rc, "%s %s: starting its thread", p->targets[k],
                                wt_control_method_name(m));
  }
  *out = c;
  return NULL;
}

/* Whether the waiter may stop waiting, under c->mu. */
static bool over(const wt_control_call *c) {
  return c->done || c->cancelled || wt_mono_ms() >= c->deadline;
}

static bool cb_call_done(void *self, wt_control_call *c, int64_t wait_ms) {
  (void)self;
  int64_t until = wt_mono_ms() + (wait_ms > 0 ? wait_ms : 0);
  wt_mutex_lock(&c->mu);
  while (!over(c) && wt_mono_ms() < until) {
    int64_t t = until < c->deadline ? until : c->deadline;
    wt_cond_wait_until(&c->cv, &c->mu, t);
  }
  bool d = over(c);
  wt_mutex_unlock(&c->mu);
  return d;
}

static void cb_call_cancel(void *self, wt_control_call *c) {
  (void)self;
  wt_mutex_lock(&c->mu);
  c->cancelled = true;
  pthread_cond_broadcast(&c->cv);
  wt_mutex_unlock(&c->mu);
}

static wt_status *cb_call_wait(void *self, wt_control_call *c,
                               ProtobufCMessage **response) {
  cb_plane *p = self;
  if (response) *response = NULL;
  while (!cb_call_done(self, c, 1000)) {
  }
  const char *target = p->targets[c->k];
  const char *method = wt_control_method_name(c->m);
  wt_status *st = NULL;
  wt_mutex_lock(&c->mu);
  bool done = c->done;
  int code = c->code;
  char *text = done ? c->response : NULL;
  c->response = NULL;
  bool cancelled = c->cancelled;
  wt_mutex_unlock(&c->mu);
  if (!done) {
    st = cancelled
             ? wt_status_new(WT_CANCELLED, "%s %s: cancelled", target, method)
             : wt_status_new(WT_DEADLINE_EXCEEDED,
                             "%s %s: no answer from the control plane in "
                             "time",
                             target, method);
  } else if (text == NULL) {
    st = wt_status_new(WT_RESOURCE_EXHAUSTED, "%s %s: out of memory", target,
                       method);
  } else if (code != 0) {
    st = wt_status_new((wt_code)code, "%s %s: %s", target, method, text);
  } else {
    ProtobufCMessage *r = NULL;
    st = wt_pb_from_json(wt_control_response_type(c->m), text, "response", &r);
    if (st != NULL) {
      st = wt_status_prefix(st, "%s %s: the control plane's answer", target,
                            method);
    } else {
      if (c->m == WT_CONTROL_INIT) {
        /* A plane that raises on failure (vLLM's) answers nothing: no
         * reason given is ready. */
        Wt__V1__InitWeightTransferEngineResponse *i =
            (Wt__V1__InitWeightTransferEngineResponse *)r;
        if (!i->ready && (i->message == NULL || *i->message == '\0'))
          i->ready = true;
      }
      if (c->m == WT_CONTROL_START) {
        Wt__V1__StartWeightUpdateResponse *s =
            (Wt__V1__StartWeightUpdateResponse *)r;
        if (s->round_id == 0) {
          wt_mutex_lock(&p->mu);
          s->round_id = ++p->next_round;
          wt_mutex_unlock(&p->mu);
        }
      }
      if (response)
        *response = r;
      else
        wt_pb_free(r);
    }
  }
  free(text);
  call_unref(c);
  return st;
}

static void cb_destroy(void *self) {
  cb_plane *p = self;
  if (p == NULL) return;
  wt_mutex_lock(&p->mu);
  while (p->running > 0) wt_cond_wait(&p->idle, &p->mu);
  wt_mutex_unlock(&p->mu);
  for (size_t k = 0; k < p->n; k++) free(p->targets[k]);
  free(p->targets);
  wt_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->idle);
  free(p);
}

static const wt_control_ops cb_ops_template = {
    .name = "callback",
    .server_count = cb_server_count,
    .target = cb_target,
    .call_start = cb_call_start,
    .call_done = cb_call_done,
    .call_cancel = cb_call_cancel,
    .call_wait = cb_call_wait,
    .destroy = cb_destroy,
};

/* One table per set of methods: the table says which the plane has. */
static wt_control_ops cb_tables[1u << WT_CONTROL_METHODS];
static pthread_once_t cb_tables_once = PTHREAD_ONCE_INIT;

static void cb_tables_init(void) {
  for (uint32_t m = 0; m < (1u << WT_CONTROL_METHODS); m++) {
    cb_tables[m] = cb_ops_template;
    cb_tables[m].methods = m;
  }
}

wt_status *wt_control_callback_new(const char *const *targets, size_t n,
                                   uint32_t methods, uint32_t flags,
                                   wt_control_callback fn, void *user,
                                   wt_control_plane *out) {
  out->ops = NULL;
  out->self = NULL;
  if (fn == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "control plane: no callback");
  if (n == 0 || targets == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "control plane: no servers");
  methods &= (1u << WT_CONTROL_METHODS) - 1;
  if ((methods & WT_CONTROL_REQUIRED) != WT_CONTROL_REQUIRED)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "control plane: it must have init, start, update and "
                         "finish");
  pthread_once(&cb_tables_once, cb_tables_init);
  cb_plane *p = calloc(1, sizeof(*p));
  if (p == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  p->targets = calloc(n, sizeof(*p->targets));
  wt_mutex_init(&p->mu, WT_LOCK_CONTROL_CALLBACK_CALL, 0,
                "control_callback.call_mu");
  pthread_cond_init(&p->idle, NULL);
  p->n = n;
  p->fn = fn;
  p->user = user;
  p->methods = methods;
  p->flags = flags;
  for (size_t k = 0; p->targets && k < n; k++) {
    p->targets[k] = strdup(targets[k] ? targets[k] : "");
    if (p->targets[k] == NULL) {
      cb_destroy(p);
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (p->targets == NULL) {
    cb_destroy(p);
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  }
  out->ops = &cb_tables[methods];
  out->self = p;
  return NULL;
}
