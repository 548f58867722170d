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

/* The one registry of the process: global by design (DESIGN.md), created
 * once, with every built-in backend registered here and nowhere else. */
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static wt_registry *registry;
static wt_status *registry_error;

static void registry_create(void) {
  wt_status *st = NULL;
  wt_registry *reg = NULL;
  WT_CHECK(wt_registry_new("trainer engine", WT_TRAINER_ABI_VERSION, &reg));
  WT_CHECK(wt_registry_register(reg, "grpc", &wt_grpc_trainer_ops));
  /* CUDA only through wt/cuda.h, loaded when an ipc init asks for it. */
  WT_CHECK(wt_registry_register(reg, "ipc", &wt_ipc_trainer_ops));
  /* NCCL only through wt/nccl.h, loaded when an nccl init asks for it. */
  WT_CHECK(wt_registry_register(reg, "nccl", &wt_nccl_trainer_ops));
#ifdef WT_WITH_UCX
  WT_CHECK(wt_registry_register(reg, "ucx", &wt_ucx_trainer_ops));
#endif
  /* nccl joins here, lazily from its module. */
  registry = reg;
  reg = NULL;
out:
  wt_registry_destroy(reg);
  registry_error = st;
}

wt_status *wt_trainer_registry(wt_registry **out) {
  pthread_once(&registry_once, registry_create);
  *out = registry;
  return registry_error != NULL ? wt_status_copy(registry_error) : NULL;
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

struct wt_trainer {
  const wt_trainer_ops *ops;
  void *self;
  wt_source *source;
  wt_sync_client *client; /* that re-inits it when a server asks; borrowed */
};

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
  WT_CHECK(wt_status_prefix(ops->trainer_init(args, &t->self),
                            "trainer engine '%s'", name));
  *out = t;
  t = NULL;
out:
  free(t);
  return st;
}

void wt_trainer_destroy(wt_trainer *t) {
  if (t == NULL) return;
  if (t->client != NULL) wt_sync_client_forget_trainer(t->client, t);
  if (t->self != NULL) t->ops->destroy(t->self);
  free(t);
}

void wt_trainer_attach(wt_trainer *t, wt_sync_client *c) {
  t->client = c;
}

void wt_trainer_forget_client(wt_trainer *t) {
  t->client = NULL;
}

wt_status *wt_trainer_reinit(wt_trainer *t, const wt_trainer_init_args *args) {
  if (t->self != NULL) t->ops->destroy(t->self);
  t->self = NULL;
  return wt_status_prefix(t->ops->trainer_init(args, &t->self),
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
