/* fake_engine.c: worker engines for tests (see fake_engine.h). */

#include "fake_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "wt/synthetic.h"

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool release;
  int init_ms, start_ms, finish_ms, abort_ms;
  fake_engine_stats stats;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

struct wt_engine {
  wt_worker_ctx ctx;
  uint64_t seed;
  bool cancelled; /* under T.mu */
};

/* Records the op, checks its thread's device, and blocks `ms` (ignoring
 * cancel). */
static void op(wt_engine *e, int *counter, int ms) {
  bool cuda = e->ctx.device.type == WT_DEVICE_CUDA;
  bool bound = !cuda || fake_cuda_current() == e->ctx.device.index;
  pthread_mutex_lock(&T.mu);
  if (counter) (*counter)++;
  if (!bound) T.stats.wrong_device++;
  if (cuda && bound) T.stats.ops_on_device++;
  if (ms > 0) T.stats.busy++;
  pthread_mutex_unlock(&T.mu);
  if (ms <= 0) return;
  usleep((useconds_t)ms * 1000);
  pthread_mutex_lock(&T.mu);
  T.stats.busy--;
  T.stats.busy_done++;
  pthread_mutex_unlock(&T.mu);
}

static wt_status *fe_create(const Wt__V1__WeightTransferInitInfo *init,
                            const wt_worker_ctx *ctx, wt_engine **out) {
  wt_engine *e = calloc(1, sizeof(*e));
  if (e == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake engine");
  e->ctx = *ctx;
  e->seed = 1;
  for (size_t i = 0; init && i < init->n_options; i++)
    if (strcmp(init->options[i]->key, "seed") == 0)
      e->seed = strtoull(init->options[i]->value, NULL, 10);
  *out = e;
  return NULL;
}

static wt_status *fe_init_transfer(wt_engine *e, wt_engine_endpoint *ep) {
  op(e, &T.stats.inits, T.init_ms);
  snprintf(ep->address, sizeof(ep->address), "test-worker-%u", e->ctx.rank);
  ep->port = 1000 + e->ctx.rank;
  return NULL;
}

static wt_status *fe_start(wt_engine *e, uint64_t round_id) {
  op(e, &T.stats.starts, T.start_ms);
  pthread_mutex_lock(&T.mu);
  e->cancelled = false;
  pthread_mutex_unlock(&T.mu);
  return NULL;
}

static wt_status *fe_receive(wt_engine *e, const wt_update *u,
                             wt_receive_stats *stats) {
  op(e, NULL, 0);
  for (size_t k = 0; k < u->n; k++)
    wt_param_store_stage(e->ctx.store, u->index[k]);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += e->ctx.data_timeout_ms / 1000;
  ts.tv_nsec += (long)(e->ctx.data_timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&T.mu);
  T.stats.blocked++;
  T.stats.receives++;
  pthread_cond_broadcast(&T.cv);
  int rc = 0;
  while (!T.release && !e->cancelled && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&T.cv, &T.mu, &ts);
  T.stats.blocked--;
  bool released = T.release, cancelled = e->cancelled;
  pthread_cond_broadcast(&T.cv);
  pthread_mutex_unlock(&T.mu);
  if (cancelled)
    return wt_status_new(WT_CANCELLED, "fake engine (worker %u): cancelled",
                         e->ctx.rank);
  if (!released)
    return wt_status_new(WT_DEADLINE_EXCEEDED,
                         "fake engine (worker %u): no data within %u ms",
                         e->ctx.rank, e->ctx.data_timeout_ms);
  unsigned char *buf = NULL;
  for (size_t k = 0; k < u->n; k++) {
    const wt_tensor_meta *m = wt_param_store_meta(e->ctx.store, u->index[k]);
    unsigned char *grown = realloc(buf, m->nbytes ? m->nbytes : 1);
    if (grown == NULL) {
      free(buf);
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "fake engine");
    }
    buf = grown;
    wt_synthetic_fill(m, e->seed, 0, buf, m->nbytes);
    /* Through the store: device memory is not the CPU's to write. */
    wt_status *st = wt_param_store_stage_write(e->ctx.store, u->index[k], 0,
                                               buf, m->nbytes);
    if (st != NULL) {
      free(buf);
      return st;
    }
    wt_param_store_staged(e->ctx.store, u->index[k]);
    stats->tensors++;
    stats->bytes += m->nbytes;
  }
  free(buf);
  return NULL;
}

static wt_status *fe_finish(wt_engine *e) {
  op(e, &T.stats.finishes, T.finish_ms);
  return NULL;
}

static void fe_abort(wt_engine *e) {
  op(e, &T.stats.aborts, T.abort_ms);
}

static void fe_cancel(wt_engine *e) {
  pthread_mutex_lock(&T.mu);
  e->cancelled = true;
  pthread_cond_broadcast(&T.cv);
  pthread_mutex_unlock(&T.mu);
}

static void fe_destroy(wt_engine *e) {
  if (e == NULL) return;
  op(e, &T.stats.destroyed, 0);
  free(e);
}

#define FAKE_OPS(table, name_, kinds, caps_)                             \
  const wt_engine_ops table = {.header = {WT_ENGINE_ABI_VERSION, name_}, \
                               .memory_kinds = (kinds),                  \
                               .caps = (caps_),                          \
                               .create = fe_create,                      \
                               .init_transfer = fe_init_transfer,        \
                               .start_update = fe_start,                 \
                               .receive = fe_receive,                    \
                               .finish_update = fe_finish,               \
                               .abort_update = fe_abort,                 \
                               .cancel = fe_cancel,                      \
                               .destroy = fe_destroy}

FAKE_OPS(fake_engine_ops, "fake", WT_MEM_ALL_KINDS,
         WT_ENGINE_CROSS_HOST | WT_ENGINE_SURVIVES_ABORT);
FAKE_OPS(fake_fragile_engine_ops, "fake-fragile", WT_MEM_ALL_KINDS,
         WT_ENGINE_CROSS_HOST);
FAKE_OPS(fake_host_engine_ops, "fake-host", WT_MEM_HOST_KINDS,
         WT_ENGINE_CROSS_HOST | WT_ENGINE_SURVIVES_ABORT);

void fake_engine_reset(void) {
  pthread_mutex_lock(&T.mu);
  T.release = false;
  T.init_ms = T.start_ms = T.finish_ms = T.abort_ms = 0;
  memset(&T.stats, 0, sizeof(T.stats));
  pthread_mutex_unlock(&T.mu);
}

void fake_engine_set_delays(int init_ms, int start_ms, int finish_ms,
                            int abort_ms) {
  pthread_mutex_lock(&T.mu);
  T.init_ms = init_ms;
  T.start_ms = start_ms;
  T.finish_ms = finish_ms;
  T.abort_ms = abort_ms;
  pthread_mutex_unlock(&T.mu);
}

void fake_engine_release(bool release) {
  pthread_mutex_lock(&T.mu);
  T.release = release;
  pthread_cond_broadcast(&T.cv);
  pthread_mutex_unlock(&T.mu);
}

bool fake_engine_wait_blocked(int n, int64_t ms) {
  int64_t end = wt_mono_ms() + ms;
  pthread_mutex_lock(&T.mu);
  while (T.stats.blocked != n && wt_mono_ms() < end) {
    pthread_mutex_unlock(&T.mu);
    wtt_sleep_ms(2);
    pthread_mutex_lock(&T.mu);
  }
  bool ok = T.stats.blocked == n;
  pthread_mutex_unlock(&T.mu);
  return ok;
}

bool fake_engine_wait_busy(int n, int64_t ms) {
  int64_t end = wt_mono_ms() + ms;
  pthread_mutex_lock(&T.mu);
  while (T.stats.busy < n && wt_mono_ms() < end) {
    pthread_mutex_unlock(&T.mu);
    wtt_sleep_ms(1);
    pthread_mutex_lock(&T.mu);
  }
  bool ok = T.stats.busy >= n;
  pthread_mutex_unlock(&T.mu);
  return ok;
}

fake_engine_stats fake_engine_get_stats(void) {
  pthread_mutex_lock(&T.mu);
  fake_engine_stats s = T.stats;
  pthread_mutex_unlock(&T.mu);
  return s;
}

wt_registry *fake_engine_registry(void) {
  wt_registry *reg = NULL;
  WT_ASSERT_OK(wt_registry_new("worker engine", WT_ENGINE_ABI_VERSION, &reg));
  WT_ASSERT_OK(wt_engine_register_builtins(reg));
  WT_ASSERT_OK(wt_registry_register(reg, "fake", &fake_engine_ops));
  WT_ASSERT_OK(
      wt_registry_register(reg, "fake-fragile", &fake_fragile_engine_ops));
  WT_ASSERT_OK(wt_registry_register(reg, "fake-host", &fake_host_engine_ops));
  return reg;
}

wt_status *fake_engine_init(wt_rpc_channel *ch, const char *backend,
                            const char *seed, uint32_t timeout_ms,
                            Wt__V1__InitWeightTransferEngineResponse **resp) {
  Wt__V1__WeightTransferInitInfo__OptionsEntry opt =
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__OPTIONS_ENTRY__INIT;
  opt.key = "seed";
  opt.value = (char *)seed;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *opts[1] = {&opt};
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = (char *)backend;
  info.timeout_ms = timeout_ms;
  info.n_options = 1;
  info.options = opts;
  return wtt_init(ch, &info, resp);
}

wt_status *fake_update_start(wt_rpc_channel *ch, const wtt_upd *u,
                             uint64_t round_id, wt_rpc_pending **p) {
  Wt__V1__UpdateWeightsRequest req = WT__V1__UPDATE_WEIGHTS_REQUEST__INIT;
  req.update_info = (Wt__V1__WeightTransferUpdateInfo *)&u->info;
  req.round_id = round_id;
  return wt_rpc_unary_start(ch, WTT_SVC "UpdateWeights", &req.base,
                            &wt__v1__update_weights_response__descriptor,
                            WTT_DEADLINE_MS, p);
}
