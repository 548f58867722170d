/* ucx_trainer.c: the `ucx` trainer engine (built with WT_WITH_UCX).
 *
 * Rendezvous: the client hands every server's init response to
 * init_response, which creates one endpoint per worker: by default with the
 * worker's packed worker address (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS), which
 * came over the control channel; with init_info.options["ucx_connect"] =
 * "sockaddr", through the worker's listener (the reported host:port), which
 * the worker then opens, and the first bytes are this init's hello. The
 * connection completes while both sides progress, i.e. during the first
 * round.
 *
 * Data path: the shared bucket plan over the source's metadata (buffer size:
 * init_info.ucx.packed_buffer_size_bytes, default 64 MiB, passed to every
 * worker in update_info.ucx so both sides plan alike). The plan is the
 * split one (update_info.ucx.split_tensors; options["ucx_split_tensors"],
 * default "on"): buckets of exactly the buffer size, a larger tensor cut
 * across them, so that no bucket, and no chain hop, takes longer than the
 * buffer's time; vLLM's plan when "off", or when the buffer is so small
 * that a round would need more than WT_PACK_SPLIT_MAX_BUCKETS. A bucket whose
 * tensors the source hands out as pointers lying back to back (a
 * checkpoint's mmap, a memory source) is sent straight from that memory:
 * zero copy on the trainer. Any other bucket is packed once into one of
 * packed_num_buffers (default 2) send buffers (a synthetic source writes its
 * bytes there directly). Fan-out (options["ucx_fanout"]): "auto", the
 * default, is the chain once the workers are on more than one host and
 * parallel while they share one (wt_ucxt_round_fanout); "parallel" sends each
 * bucket to every worker of every server at once (one
 * tagged send per worker from the same memory, tag wt_ucx_tag(round of that
 * server, bucket)); "sequential" serves one worker after the other, reading
 * the source once per worker; "chain" sends to the first worker only, which
 * forwards every bucket to the next as it lands, and so on (the route
 * message of ucx_shared.h tells each worker its successor). Readying the
 * next bucket overlaps the sends of the previous ones; when every buffer is in
 * flight the oldest is waited for, with the client's data deadline (or the init
 * info's timeout_ms); a worker's first bucket of a round with the connect
 * deadline (init_info.ucx.connect_timeout_ms; unset: 10 s, or timeout_ms if
 * larger), since it includes the connection's set-up and the worker's start. A
 * worker whose endpoint breaks (UCX's peer-failure handling) or whose send does
 * not complete in time ends send_weights with an error naming the server and
 * the worker. Its settings are the init info's options (ucx_connect,
 * ucx_peer_errors, ucx_fanout, ucx_split_tensors; the table `settings`); it
 * reads no environment (wt-push turns WT_UCX_* into options).
 *
 * Device sources (tensors in GPU memory, wt-push --device cuda:N): a round
 * is all host memory or all on one GPU. From a GPU, a bucket whose tensors
 * lie back to back is sent straight from them, and any other is packed
 * device to device (cudaMemcpyAsync on the trainer's stream) into send
 * buffers on that GPU, registered once with ucp_mem_map as CUDA memory;
 * UCX's CUDA transports then move it (cuda_ipc to a worker's GPU on the
 * same host, GPUDirect RDMA where a NIC has it): no host bounce. A UCX that
 * cannot move CUDA memory fails the round saying so (wt_ucx_need_cuda).
 *
 * Peer-failure handling (UCP_ERR_HANDLING_MODE_PEER, on by default) reports
 * a dead worker at once (and, through the listener connection, a dead
 * trainer to the workers), but UCX 1.13's shared-memory transports do not
 * support it and are then never selected ("no peer failure handler"), and
 * its sockaddr wireup picks network transports only. Shared memory on one
 * host therefore takes init_info.options "ucx_connect" = "address" and
 * "ucx_peer_errors" = "off"; dead peers are then found by the deadlines.
 */

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "wt/cuda.h"
#include "wt/log.h"
#include "wt/packing.h"
#include "wt/secure.h"
#include "wt/trainer.h"
#include "backends/ucx/ucx_shared.h"

#include "backends/ucx/ucx_trainer.h"

static void ucx_trainer_destroy(void *self) {
  ucx_trainer *t = self;
  if (t == NULL) return;
  for (size_t i = 0; i < t->npeers; i++)
    if (t->ucx) wt_ucxt_peer_close(t, t->peers[i]);
  for (uint32_t i = 0; t->bufs && i < t->num_buffers; i++) {
    for (size_t j = 0; t->bufs[i].reqs && j < t->npeers; j++)
      wt_ucx_request_drop(t->ucx, t->bufs[i].reqs[j], UCX_GRACE_MS);
    free(t->bufs[i].reqs);
    free(t->bufs[i].enc);
    wt_ucxt_sbuf_free(t, &t->bufs[i]);
  }
  free(t->bufs);
  if (t->stream != NULL) t->cuda->stream_destroy(t->stream);
  for (size_t j = 0; t->route_reqs && j < t->npeers; j++)
    wt_ucx_request_drop(t->ucx, t->route_reqs[j], UCX_GRACE_MS);
  free(t->route_reqs);
  free(t->route);
  for (size_t i = 0; i < t->npeers; i++) {
    free(t->peers[i]->worker_address);
    free(t->peers[i]);
  }
  free(t->peers);
  wt_ucx_destroy(t->ucx);
  wt_delta_state_clear(&t->d);
  free(t->delta_to);
  free(t->xor_buf);
  free(t->uinfo);
  free(t->ubase);
  free(t);
}

/* The trainer's own settings in the init info's options map, as a table:
 * each key, its values (the first is the default) and what each sets.
 * ucx_connect, which both halves read, is wt_ucx_init_settings_read's. */
typedef struct setting_choice {
  const char *name;
  int value;
} setting_choice;

typedef struct setting {
  const char *key;
  const setting_choice *choices; /* NULL-terminated; [0] the default */
  size_t offset;                 /* an int field of ucx_trainer */
} setting;

static const setting_choice on_off[] = {{"on", 1}, {"off", 0}, {NULL, 0}};
static const setting_choice fanout_choices[] = {
    {"auto", FANOUT_AUTO},
    {"parallel", FANOUT_PARALLEL},
    {"sequential", FANOUT_SEQUENTIAL},
    {"chain", FANOUT_CHAIN},
    {NULL, 0}};
static const setting settings[] = {
    {"ucx_peer_errors", on_off, offsetof(ucx_trainer, peer_errors)},
    {"ucx_fanout", fanout_choices, offsetof(ucx_trainer, fanout_option)},
    {"ucx_split_tensors", on_off, offsetof(ucx_trainer, split_option)},
};

/* Every setting's default, then the init info's options in order (a later
 * one wins); a value not in the table is INVALID_ARGUMENT naming the key,
 * the value and the choices. Other keys belong to others and pass. */
static wt_status *apply_settings(ucx_trainer *t,
                                 const Wt__V1__WeightTransferInitInfo *init) {
  const size_t n = sizeof(settings) / sizeof(settings[0]);
  for (size_t s = 0; s < n; s++)
    *(int *)((char *)t + settings[s].offset) = settings[s].choices[0].value;
  for (size_t i = 0; i < init->n_options; i++) {
    const char *key = init->options[i]->key;
    const char *val = init->options[i]->value ? init->options[i]->value : "";
    for (size_t s = 0; key != NULL && s < n; s++) {
      if (strcmp(key, settings[s].key) != 0) continue;
      const setting_choice *c = settings[s].choices;
      while (c->name != NULL && strcmp(c->name, val) != 0) c++;
      if (c->name != NULL) {
        *(int *)((char *)t + settings[s].offset) = c->value;
        break;
      }
      char list[160] = "";
      size_t used = 0;
      for (c = settings[s].choices; c->name != NULL; c++) {
        int w = snprintf(list + used, sizeof(list) - used, "%s'%s'%s",
                         c == settings[s].choices ? ""
                         : c[1].name == NULL      ? " or "
                                                  : ", ",
                         c->name, c == settings[s].choices ? " (default)" : "");
        if (w < 0 || (size_t)w >= sizeof(list) - used) break;
        used += (size_t)w;
      }
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "init_info.options[\"%s\"] is '%.64s'; it must be "
                           "%s",
                           key, val, list);
    }
  }
  return NULL;
}

static wt_status *ucx_trainer_init(const wt_trainer_init_args *args,
                                   void **self) {
  wt_status *st = NULL;
  ucx_trainer *t = calloc(1, sizeof(*t));
  if (t != NULL) t->device = -1;
  if (t == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  const Wt__V1__WeightTransferInitInfo *init = args->init_info;
  const Wt__V1__UcxInitInfo *x =
      init->backend_init_case ==
              WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX
          ? init->ucx
          : NULL;
  if (args->ctx == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "ucx trainer: no servers (no context)");
  t->ctx = args->ctx;
  t->timeout_ms = args->data_timeout_ms;
  wt_ucx_init_settings set;
  WT_CHECK(wt_ucx_init_settings_read(init, &set));
  t->buffer_bytes = set.buffer_bytes;
  t->num_buffers = set.num_buffers;
  t->by_sockaddr = set.by_sockaddr;
  t->connect_timeout_ms =
      wt_ucx_connect_timeout_ms(set.connect_timeout_ms, t->timeout_ms);
  t->held_index = SIZE_MAX;
  WT_CHECK(apply_settings(t, init));
  if (t->by_sockaddr && !t->peer_errors)
    /* The workers' listeners accept with peer-failure handling, and UCX
     * refuses a connection whose two ends disagree on it. */
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.options[\"ucx_peer_errors\"] is 'off' but "
            "\"ucx_connect\" is 'sockaddr': connections through the "
            "workers' listeners always handle peer failures; set "
            "\"ucx_connect\" to 'address' too");
  if (init->shard_plan != NULL) {
    t->ranked = true;
    t->rank = init->shard_plan->rank;
    if (t->fanout_option != FANOUT_AUTO && t->fanout_option != FANOUT_PARALLEL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "init_info.options[\"ucx_fanout\"]: a shard plan's ranks send "
              "at once, in parallel; leave it 'auto' or 'parallel'");
  }
  WT_CHECK(wt_ucx_init_secret(init, t->secret));
  wt_ucx_hello(t->secret, t->hello);
  WT_CHECK(wt_ucx_new(x ? x->transports : NULL, NULL, t->by_sockaddr,
                      "ucx trainer", &t->ucx));
  t->bufs = calloc(t->num_buffers, sizeof(*t->bufs));
  for (uint32_t i = 0; t->bufs != NULL && i < t->num_buffers; i++)
    t->bufs[i].device = -1;
  t->route = malloc(2 * WT_UCX_ROUTE_MAX); /* a route per group */
  size_t ns = t->ctx->nservers ? t->ctx->nservers : 1;
  t->uinfo = calloc(ns, sizeof(*t->uinfo));
  t->ubase = calloc(ns, sizeof(*t->ubase));
  t->delta_to = calloc(ns, sizeof(*t->delta_to));
  if (t->bufs == NULL || t->route == NULL || t->uinfo == NULL ||
      t->ubase == NULL || t->delta_to == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory");
  WT_CHECK(
      wt_delta_state_init(&t->d, x ? x->delta : NULL, "init_info.ucx.delta"));
  if (t->ranked && t->d.mode != WT_DELTA_OFF)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "init_info.ucx.delta: a shard plan's rounds send every box in "
            "full; leave delta off");
  if (t->d.mode != WT_DELTA_OFF &&
      (t->xor_buf = malloc(WT_UCX_DELTA_SEGMENT_BYTES)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "out of memory for delta buffers");
  *self = t;
  t = NULL;
out:
  ucx_trainer_destroy(t);
  return st;
}

/* The round's way (docs/delta.md), asked once per round (the first
 * server's update info): delta to the servers whose committed digest is
 * the base's, and whether the base is kept. Device sources send full
 * rounds: the encoder reads host memory. */
static wt_status *plan_delta(ucx_trainer *t, wt_source *source) {
  wt_status *st = NULL;
  const wt_trainer_ctx *ctx = t->ctx;
  t->try_delta = t->keep_base = false;
  memset(t->delta_to, 0, ctx->nservers * sizeof(*t->delta_to));
  if (t->d.mode == WT_DELTA_OFF) return NULL;
  size_t n = 0;
  const wt_tensor_meta *metas = wt_source_metas(source, &n);
  int device = -1;
  WT_CHECK(wt_ucxt_source_device(source, &device));
  if (device >= 0) {
    WT_LOGD("ucx",
            "trainer: a source on cuda:%d: a full round (delta "
            "rounds encode host memory)",
            device);
    t->d.base_digest = 0;
    goto out;
  }
  t->layout = wt_delta_layout_digest(metas, n);
  wt_delta_plan_round(&t->d,
                      t->d.base_digest != 0 && t->d.base_layout == t->layout &&
                          ctx->base_digests != NULL,
                      &t->try_delta, &t->keep_base);
  for (size_t k = 0; k < ctx->nservers; k++)
    t->delta_to[k] = t->try_delta && ctx->base_digests[k] == t->d.base_digest;
  WT_CHECK(wt_delta_state_reserve(&t->d, wt_source_total_bytes(source),
                                  "ucx trainer"));
out:
  return st;
}

static wt_status *ucx_update_info(void *self, wt_source *source, size_t k,
                                  Wt__V1__WeightTransferUpdateInfo *info) {
  ucx_trainer *t = self;
  if (k == 0) {
    wt_status *st = plan_delta(t, source);
    if (st != NULL) return st;
  }
  Wt__V1__UcxUpdateInfo *ui = &t->uinfo[k];
  wt__v1__ucx_update_info__init(ui);
  wt__v1__uint64_value__init(&t->ubuf);
  t->ubuf.value = t->buffer_bytes;
  ui->packed_buffer_size_bytes = &t->ubuf;
  /* Split unless asked not to, or so small a buffer would make more
   * buckets than a worker takes (then vLLM's plan: as many at most as
   * tensors). */
  uint64_t total = wt_source_total_bytes(source);
  t->split = t->split_option && wt_pack_split_buckets(total, t->buffer_bytes) <=
                                    WT_PACK_SPLIT_MAX_BUCKETS;
  if (t->split_option && !t->split && k == 0)
    WT_LOGD("ucx",
            "trainer: vLLM's bucket plan, not the split one: %" PRIu64
            "-byte buffers would cut the round's %" PRIu64
            " bytes into more than %u buckets",
            t->buffer_bytes, total, WT_PACK_SPLIT_MAX_BUCKETS);
  ui->split_tensors = t->split;
  ui->digest = t->keep_base || t->try_delta;
  if (t->delta_to[k]) {
    wt__v1__delta_base__init(&t->ubase[k]);
    t->ubase[k].sequence =
        t->ctx->base_sequences ? t->ctx->base_sequences[k] : 0;
    t->ubase[k].digest = t->d.base_digest;
    ui->delta_base = &t->ubase[k];
  }
  info->backend_update_case =
      WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_UCX;
  info->ucx = ui;
  return NULL;
}

static wt_status *ucx_delta_stats(const void *self, wt_delta_stats *out) {
  *out = ((const ucx_trainer *)self)->stats;
  return NULL;
}

static void ucx_trainer_cancel(void *self) {
  ucx_trainer *t = self;
  wt_ucx_cancel(t->ucx);
}

/* Readies bucket `bk` (the source's next tensors) for sending: *bytes
 * points at its bytes. When the source hands out pointers (a checkpoint's
 * mmap, a memory source) and the bucket's tensors lie back to back, that is
 * the source's own memory, valid until the source is destroyed: no copy.
 * Otherwise the bucket is packed into `dst`, the one copy of the path. */

/* Adds init_info.options[key] = value (malloc'd, for wt_pb_free). */
static wt_status *add_map_option(Wt__V1__WeightTransferInitInfo *info,
                                 const char *key, const char *value) {
  Wt__V1__WeightTransferInitInfo__OptionsEntry **grown =
      realloc(info->options, (info->n_options + 1) * sizeof(*grown));
  if (grown == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  info->options = grown;
  Wt__V1__WeightTransferInitInfo__OptionsEntry *e = malloc(sizeof(*e));
  if (e == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__weight_transfer_init_info__options_entry__init(e);
  e->key = strdup(key);
  e->value = strdup(value);
  info->options[info->n_options++] = e;
  if (e->key == NULL || e->value == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  return NULL;
}

/* Options: bucket_size, num_buffers, transports, connect_timeout_ms, and
 * connect / peer_errors / fanout / split_tensors (the init info's ucx_*
 * options, checked by trainer_init like any other). */
/* One option of wt_trainer_init_info's table: sets its field of the ucx
 * message, or its entry of the init info's options map. */
typedef wt_status *(*option_fn)(const wt_backend_option *o,
                                Wt__V1__WeightTransferInitInfo *info);

static wt_status *opt_bucket_size(const wt_backend_option *o,
                                  Wt__V1__WeightTransferInitInfo *info) {
  return wt_option_size_field(o, &info->ucx->packed_buffer_size_bytes);
}

static wt_status *opt_num_buffers(const wt_backend_option *o,
                                  Wt__V1__WeightTransferInitInfo *info) {
  return wt_option_u32_field(o, &info->ucx->packed_num_buffers);
}

static wt_status *opt_connect_timeout(const wt_backend_option *o,
                                      Wt__V1__WeightTransferInitInfo *info) {
  return wt_option_u32_field(o, &info->ucx->connect_timeout_ms);
}

static wt_status *opt_transports(const wt_backend_option *o,
                                 Wt__V1__WeightTransferInitInfo *info) {
  Wt__V1__UcxInitInfo *x = info->ucx;
  free(x->transports == (char *)protobuf_c_empty_string ? NULL : x->transports);
  if ((x->transports = strdup(o->value ? o->value : "")) == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  return NULL;
}

static wt_status *opt_delta(const wt_backend_option *o,
                            Wt__V1__WeightTransferInitInfo *info) {
  return wt_delta_option_set(o->value, &info->ucx->delta);
}

/* connect, peer_errors, fanout, split_tensors: options["ucx_<key>"]. */
static wt_status *opt_map(const wt_backend_option *o,
                          Wt__V1__WeightTransferInitInfo *info) {
  char key[32];
  snprintf(key, sizeof(key), "ucx_%s", o->key);
  return add_map_option(info, key, o->value ? o->value : "");
}

static const struct {
  const char *key;
  option_fn set;
} options[] = {
    {"bucket_size", opt_bucket_size},
    {"num_buffers", opt_num_buffers},
    {"transports", opt_transports},
    {"connect_timeout_ms", opt_connect_timeout},
    {"connect", opt_map},
    {"peer_errors", opt_map},
    {"fanout", opt_map},
    {"split_tensors", opt_map},
    {"delta", opt_delta},
};
#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static wt_status *ucx_init_info(const wt_backend_option *opts, size_t n,
                                Wt__V1__WeightTransferInitInfo *info) {
  wt_status *st = NULL;
  Wt__V1__UcxInitInfo *x = malloc(sizeof(*x));
  if (x == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  wt__v1__ucx_init_info__init(x);
  info->backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_UCX;
  info->ucx = x;
  /* This init's secret: keys every tag and the hello (ucx_shared.h). */
  x->auth_secret.data = malloc(WT_UCX_SECRET_BYTES);
  if (x->auth_secret.data == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "init info: out of memory");
  x->auth_secret.len = WT_UCX_SECRET_BYTES;
  WT_CHECK(wt_random_bytes(x->auth_secret.data, WT_UCX_SECRET_BYTES));
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < NOPTIONS && strcmp(opts[i].key, options[k].key) != 0) k++;
    if (k == NOPTIONS) {
      const char *known[NOPTIONS + 1];
      for (size_t j = 0; j < NOPTIONS; j++) known[j] = options[j].key;
      known[NOPTIONS] = NULL;
      WT_CHECK(wt_option_unknown("ucx", &opts[i], known));
    }
    WT_CHECK(options[k].set(&opts[i], info));
  }
out:
  return st;
}

const wt_trainer_ops wt_ucx_trainer_ops = {
    .header = {.abi_version = WT_TRAINER_ABI_VERSION, .name = "ucx"},
    .flags = WT_TRAINER_NEEDS_UPDATE_WEIGHTS,
    .memory_kinds = WT_MEM_HOST_KINDS | WT_MEM_BIT(WT_MEM_DEVICE),
    .init_info = ucx_init_info,
    .trainer_init = ucx_trainer_init,
    .update_info = ucx_update_info,
    .send_weights = wt_ucxt_send_weights,
    .cancel = ucx_trainer_cancel,
    .destroy = ucx_trainer_destroy,
    .init_response = wt_ucxt_init_response,
    .delta_stats = ucx_delta_stats,
};
