/* adapters.c: LoRA adapter sets held beside the model (docs/lora.md).
 *
 * Each set is a server of its own (wt_srv_slot_start): a store per worker
 * laid out by the spec of its first init, its own round state, versions,
 * watchers and export, so an adapter's rounds never touch the model's
 * round or reallocate its store. It has no RPC server: the model's server
 * takes every call and routes it by the adapter it names (wt_srv_route),
 * with the same tokens and admission. Sets are never removed while the
 * server runs, so a routed pointer stays valid for the call.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_state.h"
#include "wt/adapter_spec.h"
#include "wt/log.h"
#include "wt/param_store.h"
#include "wt/pb.h"
#include "wt/lock.h"

typedef struct wt_srv_adapter {
  Wt__V1__AdapterSpec *spec; /* owned: the first init's, with its name */
  wt_server *slot;
  uint64_t bytes; /* per worker */
  char *export_path;
} wt_srv_adapter;

/* Under mu. */
static wt_srv_adapter *find_locked(wt_server *srv, const char *name) {
  for (size_t i = 0; i < srv->adapters.n; i++)
    if (strcmp(srv->adapters.list[i]->spec->name, name) == 0)
      return srv->adapters.list[i];
  return NULL;
}

wt_status *wt_srv_route(wt_server *srv, const char *adapter, wt_server **out) {
  *out = srv;
  if (adapter == NULL || *adapter == '\0') return NULL;
  wt_status *st = wt_adapter_name_check(adapter, "adapter");
  if (st != NULL) return st;
  wt_mutex_lock(&srv->adapters.mu);
  wt_srv_adapter *a = find_locked(srv, adapter);
  if (a != NULL) *out = a->slot;
  size_t n = srv->adapters.n;
  wt_mutex_unlock(&srv->adapters.mu);
  if (a == NULL)
    return wt_status_new(WT_NOT_FOUND,
                         "adapter '%s': this server holds no such adapter set "
                         "(%zu held; an init with its spec makes one)",
                         adapter, n);
  return NULL;
}

static void adapter_free(wt_srv_adapter *a) {
  if (a == NULL) return;
  if (a->spec) wt_pb_free(&a->spec->base);
  free(a->export_path);
  free(a);
}

/* The model's prefix of a PEFT name: what get_peft_model_state_dict
 * writes before the module's own path. */
#define PEFT_PREFIX "base_model.model."

/* Each adapter tensor against the model this server holds, where the model
 * has the module's weight ("<module>.weight", PEFT's prefix dropped, of
 * shape [out, in]): lora_A must read its `in` inputs, lora_B write its
 * `out` outputs. A set for a model of other names (or none) is taken as
 * the spec says; vLLM's loader checks against its own modules too. */
static wt_status *check_against_model(wt_server *srv,
                                      const Wt__V1__AdapterSpec *spec,
                                      const wt_tensor_meta *metas, size_t n) {
  const wt_param_store *s = wt_worker_store(srv->workers[0]);
  char name[WT_ADAPTER_TENSOR_NAME_MAX + 16];
  const size_t suffix = strlen(".lora_A.weight");
  for (size_t i = 0; i < n; i++) {
    const char *t = metas[i].name;
    size_t len = strlen(t), skip = 0;
    if (strncmp(t, PEFT_PREFIX, strlen(PEFT_PREFIX)) == 0 &&
        len - suffix >= strlen(PEFT_PREFIX))
      skip = strlen(PEFT_PREFIX);
    snprintf(name, sizeof(name), "%.*s.weight", (int)(len - suffix - skip),
             t + skip);
    size_t k = 0;
    wt_status *st = wt_param_store_find(s, name, &k);
    if (st != NULL) {
      wt_status_free(st);
      continue;
    }
    const wt_tensor_meta *w = wt_param_store_meta(s, k);
    if (w->ndim != 2) continue;
    bool is_a = strcmp(t + len - suffix, ".lora_A.weight") == 0;
    int64_t want = is_a ? w->shape[1] : w->shape[0];
    int64_t got = metas[i].shape[is_a ? 1 : 0];
    if (got != want)
      return wt_status_new(
          WT_INVALID_ARGUMENT,
          "adapter '%s': tensor '%s' is [%lld, %lld], but the model's '%s' "
          "is [%lld, %lld]: a %s %s its %lld %s",
          spec->name, t, (long long)metas[i].shape[0],
          (long long)metas[i].shape[1], name, (long long)w->shape[0],
          (long long)w->shape[1], is_a ? "lora_A" : "lora_B",
          is_a ? "reads" : "writes", (long long)want,
          is_a ? "inputs" : "outputs");
  }
  return NULL;
}

/* Makes the set of `spec` (checked, its layout metas[0..n)): the limits
 * under mu, the set's server without it (its stores may take a while to
 * allocate; routes of other calls go on meanwhile), then the list under mu
 * again. Under create_mu, so one name is made once. */
static wt_status *create(wt_server *srv, const Wt__V1__AdapterSpec *spec,
                         const wt_tensor_meta *metas, size_t n,
                         wt_srv_adapter **out) {
  wt_status *st = NULL;
  const wt_server_options *lim = &srv->config.slot;
  wt_srv_adapter *a = NULL;
  /* What the set's stores hold per worker: twice its bytes when shadow
   * staging keeps a second copy. */
  uint64_t bytes = 0, copies = srv->config.staging == WT_STAGING_SHADOW ? 2 : 1;
  for (size_t i = 0; i < n; i++)
    if (__builtin_add_overflow(bytes, metas[i].nbytes, &bytes) ||
        __builtin_mul_overflow(bytes, copies, &(uint64_t){0}))
      WT_FAIL(WT_RESOURCE_EXHAUSTED,
              "adapter '%s': its tensors' bytes overflow 64 bits", spec->name);
  bytes *= copies;
  wt_mutex_lock(&srv->adapters.mu);
  size_t held = srv->adapters.n;
  uint64_t held_bytes = srv->adapters.bytes;
  /* Once stopping, the list stays where the shutdown read it. */
  bool stopping = srv->adapters.stopping;
  wt_srv_adapter **list =
      stopping ? NULL : realloc(srv->adapters.list, (held + 1) * sizeof(*list));
  if (list != NULL) srv->adapters.list = list;
  wt_mutex_unlock(&srv->adapters.mu);
  if (stopping)
    WT_FAIL(WT_UNAVAILABLE, "adapter '%s': the server is stopping", spec->name);
  if (list == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter: out of memory");
  if (held >= lim->max_adapters)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "adapter '%s': the server holds %zu adapter sets, its most "
            "(wt-server --max-adapters)",
            spec->name, held);
  if (bytes > lim->max_adapter_bytes - held_bytes)
    WT_FAIL(WT_RESOURCE_EXHAUSTED,
            "adapter '%s': %" PRIu64 " bytes per worker%s, with the %" PRIu64
            " its %zu other set(s) hold, is above wt-server "
            "--max-adapter-mib (%" PRIu64 " bytes)",
            spec->name, bytes,
            copies == 2 ? " (two copies: shadow staging)" : "", held_bytes,
            held, lim->max_adapter_bytes);
  if ((a = calloc(1, sizeof(*a))) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter: out of memory");
  WT_CHECK(wt_pb_copy(&spec->base, (ProtobufCMessage **)&a->spec));
  a->bytes = bytes;
  if (srv->ex.path != NULL) {
    size_t len = strlen(srv->ex.path) + strlen(spec->name) + 8;
    if ((a->export_path = malloc(len)) == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter: out of memory");
    snprintf(a->export_path, len, "%s.lora.%s", srv->ex.path, spec->name);
  }
  st = wt_srv_slot_start(srv, spec->name, metas, n, a->export_path, &a->slot);
  if (st != NULL) {
    st = wt_status_prefix(st, "adapter '%s'", spec->name);
    goto out;
  }
  /* Listed even when the server began to stop meanwhile (the stop, which
   * waits for this call, then frees it), but stopped at once then: no
   * init may wait on it. */
  wt_mutex_lock(&srv->adapters.mu);
  srv->adapters.list[srv->adapters.n++] = a;
  srv->adapters.bytes += bytes;
  stopping = srv->adapters.stopping;
  wt_mutex_unlock(&srv->adapters.mu);
  if (stopping) {
    wt_srv_slot_shutdown(a->slot);
    a = NULL; /* listed: the stop frees it */
    WT_FAIL(WT_UNAVAILABLE, "adapter '%s': the server is stopping", spec->name);
  }
  WT_LOGI("server",
          "adapter '%s': rank %u, alpha %g, %zu tensors, %" PRIu64
          " bytes per worker%s%s",
          spec->name, spec->rank, spec->alpha, n, bytes,
          a->export_path ? ", export " : "",
          a->export_path ? a->export_path : "");
  *out = a;
  a = NULL;
out:
  adapter_free(a);
  return st;
}

wt_status *wt_srv_adapter_open(wt_server *srv, const Wt__V1__AdapterSpec *spec,
                               wt_server **out) {
  wt_status *st = NULL;
  wt_tensor_meta *metas = NULL;
  size_t n = 0;
  *out = NULL;
  if (srv->base != NULL)
    return wt_status_new(WT_INTERNAL, "adapter: a set holds no sets");
  WT_CHECK(wt_adapter_spec_check(spec, &metas, &n));
  /* A set that exists: checked without waiting for another's making. */
  wt_mutex_lock(&srv->adapters.mu);
  wt_srv_adapter *a = find_locked(srv, spec->name);
  wt_mutex_unlock(&srv->adapters.mu);
  if (a == NULL) {
    wt_mutex_lock(&srv->adapters.create_mu);
    wt_mutex_lock(&srv->adapters.mu);
    a = find_locked(srv, spec->name); /* made meanwhile? */
    bool stopping = srv->adapters.stopping;
    wt_mutex_unlock(&srv->adapters.mu);
    if (stopping)
      st = wt_status_new(WT_UNAVAILABLE, "adapter '%s': the server is stopping",
                         spec->name);
    else if (a == NULL &&
             (st = check_against_model(srv, spec, metas, n)) == NULL)
      st = create(srv, spec, metas, n, &a);
    wt_mutex_unlock(&srv->adapters.create_mu);
    if (st != NULL) goto out;
  }
  WT_CHECK(wt_adapter_spec_same(a->spec, spec));
  *out = a->slot;
out:
  wt_tensor_meta_array_free(metas, n);
  return st;
}

void wt_srv_adapters_info_free(Wt__V1__AdapterInfo **info, size_t n) {
  for (size_t i = 0; info != NULL && i < n; i++) {
    if (info[i] == NULL) continue;
    free(info[i]->weight_version);
    free(info[i]);
  }
  free(info);
}

wt_status *wt_srv_adapters_info(wt_server *srv, Wt__V1__AdapterInfo ***out,
                                size_t *nout) {
  wt_status *st = NULL;
  *out = NULL;
  *nout = 0;
  wt_mutex_lock(&srv->adapters.mu);
  size_t n = srv->adapters.n;
  Wt__V1__AdapterInfo **info = calloc(n ? n : 1, sizeof(*info));
  if (info == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapters: out of memory");
  for (size_t i = 0; i < n; i++) {
    const wt_srv_adapter *a = srv->adapters.list[i];
    wt_server *slot = a->slot;
    Wt__V1__AdapterInfo *ai = calloc(1, sizeof(*ai));
    if (ai == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapters: out of memory");
    info[i] = ai;
    wt__v1__adapter_info__init(ai);
    /* Borrowed from the set, which outlives the reply (sets are never
     * removed while calls run); the version is copied under the set's
     * round lock. */
    ai->name = a->spec->name;
    ai->rank = a->spec->rank;
    ai->alpha = a->spec->alpha;
    ai->n_target_modules = a->spec->n_target_modules;
    ai->target_modules = a->spec->target_modules;
    ai->num_tensors = (uint32_t)a->spec->n_tensors;
    ai->total_bytes = a->bytes;
    ai->export_path = a->export_path ? a->export_path : (char *)"";
    wt_mutex_lock(&slot->round.mu);
    ai->sequence = slot->round.sequence;
    ai->weight_version = strdup(
        slot->round.sequence
            ? slot->round.history[slot->round.sequence % WT_VERSION_HISTORY]
                  .version
            : "");
    ai->state = (char *)wt_srv_state_locked(slot);
    wt_mutex_unlock(&slot->round.mu);
    if (ai->weight_version == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapters: out of memory");
  }
  *out = info;
  *nout = n;
  info = NULL;
out:
  wt_mutex_unlock(&srv->adapters.mu);
  wt_srv_adapters_info_free(info, n);
  return st;
}

void wt_srv_adapters_shutdown(wt_server *srv) {
  /* The sets listed now are shut down outside the list's lock (a set's
   * shutdown takes its own locks); one made later sees `stopping` and
   * shuts itself down. None is freed before wt_srv_adapters_stop. */
  wt_mutex_lock(&srv->adapters.mu);
  srv->adapters.stopping = true;
  size_t n = srv->adapters.n;
  wt_srv_adapter **list = srv->adapters.list;
  wt_mutex_unlock(&srv->adapters.mu);
  for (size_t i = 0; i < n; i++) wt_srv_slot_shutdown(list[i]->slot);
}

void wt_srv_adapters_stop(wt_server *srv) {
  wt_mutex_lock(&srv->adapters.mu);
  wt_srv_adapter **list = srv->adapters.list;
  size_t n = srv->adapters.n;
  srv->adapters.list = NULL;
  srv->adapters.n = 0;
  srv->adapters.bytes = 0;
  srv->adapters.stopping = true;
  wt_mutex_unlock(&srv->adapters.mu);
  for (size_t i = 0; i < n; i++) {
    wt_srv_slot_stop(list[i]->slot);
    adapter_free(list[i]);
  }
  free(list);
}
