/* trainer_registry.c: the trainer-engine registry (the trainer factory) and
 * the wt_trainer handle (see wt/trainer.h). */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "wt/parse.h"
#include "wt/pb.h"
#include "wt/trainer.h"
#include "wt/lock.h"

/* The one registry of the process: global by design (DESIGN.md). */
static wt_registry_once registry = WT_REGISTRY_ONCE_INIT(
    "trainer engine", WT_TRAINER_ABI_VERSION, wt_trainer_register_builtins);

static void build(void) {
  wt_registry_once_build(&registry);
}

wt_status *wt_trainer_registry(wt_registry **out) {
  return wt_registry_once_get(&registry, build, out);
}

wt_status *wt_trainer_register(const char *name, const wt_trainer_ops *ops) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  WT_CHECK(wt_trainer_registry(&reg));
  WT_CHECK(wt_registry_register(reg, name, ops));
out:
  return st;
}

wt_status *wt_trainer_register_lazy(const char *name, const char *shared_object,
                                    const char *symbol) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  WT_CHECK(wt_trainer_registry(&reg));
  WT_CHECK(wt_registry_register_lazy(reg, name, shared_object, symbol));
out:
  return st;
}

wt_status *wt_trainer_lookup(const char *name, const wt_trainer_ops **ops) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  const void *found = NULL;
  *ops = NULL;
  WT_CHECK(wt_trainer_registry(&reg));
  WT_CHECK(wt_registry_lookup(reg, name, &found));
  *ops = found;
out:
  return st;
}

wt_status *wt_trainer_names(char **out) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  *out = NULL;
  WT_CHECK(wt_trainer_registry(&reg));
  WT_CHECK(wt_registry_names_joined(reg, out));
out:
  return st;
}

struct wt_trainer_link {
  wt_mutex mu;
  int refs;
  wt_trainer *t; /* NULL once the trainer was destroyed */
};

struct wt_trainer {
  const wt_trainer_ops *ops;
  void *self;
  wt_source *source;
  wt_trainer_link *link; /* the client's weak hold, if one took it */
};

wt_trainer_link *wt_trainer_link_get(wt_trainer *t) {
  if (t->link == NULL) {
    wt_trainer_link *l = calloc(1, sizeof(*l));
    if (l == NULL) {
      free(l);
      return NULL;
    }
    wt_mutex_init(&l->mu, WT_LOCK_TRAINER_REGISTRY, 0, "trainer_link.mu");
    l->refs = 1; /* the trainer's */
    l->t = t;
    t->link = l;
  }
  wt_mutex_lock(&t->link->mu);
  t->link->refs++;
  wt_mutex_unlock(&t->link->mu);
  return t->link;
}

wt_trainer *wt_trainer_link_trainer(wt_trainer_link *l) {
  wt_mutex_lock(&l->mu);
  wt_trainer *t = l->t;
  wt_mutex_unlock(&l->mu);
  return t;
}

void wt_trainer_link_put(wt_trainer_link *l) {
  if (l == NULL) return;
  wt_mutex_lock(&l->mu);
  int left = --l->refs;
  wt_mutex_unlock(&l->mu);
  if (left > 0) return;
  wt_mutex_destroy(&l->mu);
  free(l);
}

int64_t wt_trainer_data_deadline_ms(const Wt__V1__WeightTransferInitInfo *init,
                                    const wt_trainer_ctx *ctx) {
  if (init != NULL && init->timeout_ms != 0) return (int64_t)init->timeout_ms;
  return ctx != NULL && ctx->data_timeout_ms > 0
             ? ctx->data_timeout_ms
             : WT_CLIENT_DEFAULT_DATA_TIMEOUT_MS;
}

/* args with its data deadline resolved (wt_trainer_init_args). */
static wt_trainer_init_args resolved(const wt_trainer_init_args *args) {
  wt_trainer_init_args a = *args;
  if (a.data_timeout_ms <= 0)
    a.data_timeout_ms = wt_trainer_data_deadline_ms(a.init_info, a.ctx);
  return a;
}

wt_status *wt_trainer_create(const char *name, const wt_trainer_init_args *args,
                             wt_trainer **out) {
  wt_status *st = NULL;
  const wt_trainer_ops *ops = NULL;
  wt_trainer *t = NULL;
  *out = NULL;
  WT_CHECK(wt_trainer_lookup(name, &ops));
  if (ops->trainer_init == NULL || ops->destroy == NULL ||
      (ops->send_weights == NULL && ops->parts == NULL))
    WT_FAIL(WT_FAILED_PRECONDITION,
            "trainer engine '%s': table lacks trainer_init, destroy, or both "
            "send_weights and parts",
            name);
  if (ops->parts != NULL && (ops->prepare_part == NULL ||
                             ops->part_info == NULL || ops->part_done == NULL ||
                             !(ops->flags & WT_TRAINER_NEEDS_UPDATE_WEIGHTS)))
    WT_FAIL(WT_FAILED_PRECONDITION,
            "trainer engine '%s': a table with parts needs prepare_part, "
            "part_info, part_done and WT_TRAINER_NEEDS_UPDATE_WEIGHTS",
            name);
  t = calloc(1, sizeof(*t));
  if (t == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "trainer engine '%s': out of memory", name);
  t->ops = ops;
  t->source = args->source;
  wt_trainer_init_args a = resolved(args);
  WT_CHECK(wt_status_prefix(ops->trainer_init(&a, &t->self),
                            "trainer engine '%s'", name));
  *out = t;
  t = NULL;
out:
  free(t);
  return st;
}

void wt_trainer_destroy(wt_trainer *t) {
  if (t == NULL) return;
  if (t->link != NULL) {
    wt_mutex_lock(&t->link->mu);
    t->link->t = NULL;
    wt_mutex_unlock(&t->link->mu);
    wt_trainer_link_put(t->link);
  }
  if (t->self != NULL) t->ops->destroy(t->self);
  free(t);
}

wt_status *wt_trainer_reinit(wt_trainer *t, const wt_trainer_init_args *args) {
  if (t->self != NULL) t->ops->destroy(t->self);
  t->self = NULL;
  wt_trainer_init_args a = resolved(args);
  return wt_status_prefix(t->ops->trainer_init(&a, &t->self),
                          "trainer engine '%s'", t->ops->header.name);
}

wt_status *wt_trainer_init_info(const char *name, const wt_backend_option *opts,
                                size_t n,
                                Wt__V1__WeightTransferInitInfo **out) {
  wt_status *st = NULL;
  const wt_trainer_ops *ops = NULL;
  Wt__V1__WeightTransferInitInfo *info = NULL;
  *out = NULL;
  WT_CHECK(wt_trainer_lookup(name, &ops));
  info = malloc(sizeof(*info));
  if (info == NULL || (wt__v1__weight_transfer_init_info__init(info),
                       (info->backend = strdup(name)) == NULL))
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  if (ops->init_info != NULL) {
    WT_CHECK(ops->init_info(opts, n, info));
  } else if (n > 0) {
    static const char *const none[] = {NULL};
    WT_CHECK(wt_option_unknown(name, &opts[0], none));
  }
  *out = info;
  info = NULL;
out:
  if (info != NULL) wt_pb_free(&info->base);
  return st;
}

const wt_trainer_ops *wt_trainer_get_ops(const wt_trainer *t) {
  return t->ops;
}

void *wt_trainer_self(const wt_trainer *t) {
  return t->self;
}

const char *wt_trainer_backend(const wt_trainer *t) {
  return t->ops->header.name;
}

wt_source *wt_trainer_source(const wt_trainer *t) {
  return t->source;
}

bool wt_trainer_needs_update_weights(const wt_trainer *t) {
  return (t->ops->flags & WT_TRAINER_NEEDS_UPDATE_WEIGHTS) != 0;
}

wt_status *wt_trainer_delta_stats(const wt_trainer *t, wt_delta_stats *out) {
  const wt_trainer_ops *ops = t ? t->ops : NULL;
  if (ops != NULL && ops->delta_stats != NULL && t->self != NULL)
    return ops->delta_stats(t->self, out);
  return wt_status_new(WT_FAILED_PRECONDITION,
                       "delta stats: backend '%s' sends no delta rounds "
                       "(grpc and ucx do)",
                       ops ? ops->header.name : "(none)");
}

wt_status *wt_grpc_trainer_delta_stats(const wt_trainer *t,
                                       wt_grpc_delta_stats *out) {
  return wt_trainer_delta_stats(t, out);
}
