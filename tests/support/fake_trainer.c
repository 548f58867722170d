/* fake_trainer.c: trainer engines for tests (see fake_trainer.h). */

#include "fake_trainer.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <time.h>

#include "fake_engine.h"

/* One state for every fake: each engine's `self` says which it is. */
typedef enum fake_kind { FAKE_ASYNC, FAKE_FRAGILE, FAKE_HALF_PARTS } fake_kind;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static fake_trainer_stats stats;
static fake_kind kinds[] = {FAKE_ASYNC, FAKE_FRAGILE, FAKE_HALF_PARTS};

static wt_status *fake_init(fake_kind k, void **self) {
  pthread_mutex_lock(&mu);
  stats.inits++;
  pthread_mutex_unlock(&mu);
  *self = &kinds[k];
  return NULL;
}

static wt_status *async_init(const wt_trainer_init_args *a, void **self) {
  (void)a;
  return fake_init(FAKE_ASYNC, self);
}

static wt_status *fragile_init(const wt_trainer_init_args *a, void **self) {
  (void)a;
  return fake_init(FAKE_FRAGILE, self);
}

static wt_status *half_parts_init(const wt_trainer_init_args *a, void **self) {
  (void)a;
  return fake_init(FAKE_HALF_PARTS, self);
}

static wt_status *fake_update_info(void *self, wt_source *src, size_t k,
                                   Wt__V1__WeightTransferUpdateInfo *info) {
  (void)self;
  (void)k;
  pthread_mutex_lock(&mu);
  stats.update_infos++;
  pthread_mutex_unlock(&mu);
  CU_ASSERT_EQUAL(info->n_names, wt_source_count(src));
  CU_ASSERT_TRUE(info->packed);
  return NULL;
}

static wt_status *fake_send(void *self, wt_source *src, wt_progress_fn fn,
                            void *user) {
  (void)src;
  (void)fn;
  (void)user;
  if (*(fake_kind *)self == FAKE_FRAGILE) {
    fake_engine_release(true);
    return NULL;
  }
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&mu);
  while (!stats.cancelled)
    if (pthread_cond_timedwait(&cv, &mu, &until) != 0) break;
  bool cancelled = stats.cancelled;
  pthread_mutex_unlock(&mu);
  return cancelled ? wt_status_new(WT_CANCELLED, "fake sender cancelled")
                   : wt_status_new(WT_DEADLINE_EXCEEDED, "never cancelled");
}

static void fake_cancel(void *self) {
  (void)self;
  pthread_mutex_lock(&mu);
  stats.cancelled = true;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static wt_status *half_parts(void *self, wt_source *src, size_t *n) {
  (void)self;
  (void)src;
  *n = 0;
  return NULL;
}

static void fake_destroy(void *self) {
  (void)self;
}

static const wt_trainer_ops async_ops = {
    .header = {WT_TRAINER_ABI_VERSION, "test-async"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .trainer_init = async_init,
    .update_info = fake_update_info,
    .send_weights = fake_send,
    .cancel = fake_cancel,
    .destroy = fake_destroy,
};

static const wt_trainer_ops fragile_ops = {
    .header = {WT_TRAINER_ABI_VERSION, "fake-fragile"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .trainer_init = fragile_init,
    .send_weights = fake_send,
    .destroy = fake_destroy,
};

static const wt_trainer_ops half_parts_ops = {
    .header = {WT_TRAINER_ABI_VERSION, "test-half-parts"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .trainer_init = half_parts_init,
    .parts = half_parts,
    .destroy = fake_destroy,
};

static void register_all(void) {
  const wt_trainer_ops *all[] = {&async_ops, &fragile_ops, &half_parts_ops};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
    wt_status *st = wt_trainer_register(all[i]->header.name, all[i]);
    CU_ASSERT_PTR_NULL(st);
    wt_status_free(st);
  }
}

void fake_trainer_register(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_all);
}

void fake_trainer_reset(void) {
  pthread_mutex_lock(&mu);
  stats = (fake_trainer_stats){0};
  pthread_mutex_unlock(&mu);
}

fake_trainer_stats fake_trainer_get_stats(void) {
  pthread_mutex_lock(&mu);
  fake_trainer_stats s = stats;
  pthread_mutex_unlock(&mu);
  return s;
}
