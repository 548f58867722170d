/* test_gpu.c: the "gpu" suite, on a real CUDA device through the module
 * libwt_cuda.so (wt/cuda.h), not the emulation the other suites use
 * (support/fake_cuda.h). Where no device answers (no GPU, no driver, a
 * build without CUDA) every test prints "skipped: no CUDA device (<why>)"
 * and passes: run tests/gpu/run-device-checks.sh on a machine with one.
 *
 * What it checks: device and pinned memory written and read back through
 * the bounce buffer at sizes and offsets that cross its edges; a server on
 * cuda:0 whose store is device memory loads the synthetic model onto the
 * GPU, takes grpc rounds (shadow and inplace staging) whose bytes read back
 * from the GPU are the trainer's, reports the device, kind and bytes, and
 * refuses an engine that cannot write device memory; a device index past
 * the count fails naming it.
 *
 * WT_TEST_GPU_EMULATE=1 runs the suite on the emulated GPU instead (ctest's
 * "gpu_emulated"), so that its own logic is exercised on every machine; the
 * output then says so. */
#include <stdlib.h>
#include <string.h>

#include "support/fake_cuda.h"
#include "support/fixture.h"
#include "wt/cuda.h"
#include "wt/ipc.h"
#include "wt/memory.h"
#include "wt/pb.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"

/* The real table, or NULL after printing why the test does not run. */
static const wt_cuda_api *gpu_or_skip(const char *test) {
  const wt_cuda_api *api = NULL;
  wt_status *st = wt_cuda_api_get(&api);
  int count = 0;
  if (st == NULL) st = api->device_count(&count);
  if (st == NULL && count == 0)
    st = wt_status_new(WT_FAILED_PRECONDITION, "0 devices visible");
  if (st != NULL) {
    char why[600];
    snprintf(why, sizeof(why), "no CUDA device (%s)", wt_status_message(st));
    wt_test_skip(test, why);
    wt_status_free(st);
    return NULL;
  }
  return api;
}

static void pattern(unsigned char *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

/* One region of `kind` (device: on cuda:0): a pattern written at an odd offset
 * comes back byte for byte, and what is around it stays zero. */
static void round_trip(wt_mem_kind kind, size_t len, wt_mem_bounce *b) {
  wt_device dev = {.type = WT_DEVICE_CUDA, .index = 0};
  if (kind != WT_MEM_DEVICE) dev.type = WT_DEVICE_CPU; /* pinned: the host's */
  wt_mem_region r;
  WT_ASSERT_OK(wt_mem_alloc(kind, dev, len + 64, "gpu test", &r));
  unsigned char *src = malloc(len), *dst = malloc(len + 64);
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dst);
  pattern(src, len, (uint32_t)len);
  WT_ASSERT_OK(wt_mem_write(&r, 7, src, len, b));
  memset(dst, 0xee, len + 64);
  WT_ASSERT_OK(wt_mem_read(&r, 0, dst, len + 64, b));
  CU_ASSERT_EQUAL(memcmp(dst + 7, src, len), 0);
  for (size_t i = 0; i < 7; i++) CU_ASSERT_EQUAL(dst[i], 0);
  for (size_t i = 7 + len; i < len + 64; i++) CU_ASSERT_EQUAL(dst[i], 0);
  wt_mem_free(&r);
  free(src);
  free(dst);
}

static void test_device_memory(void) {
  const wt_cuda_api *api = gpu_or_skip("device memory");
  if (api == NULL) return;
  int count = 0;
  WT_ASSERT_OK(api->device_count(&count));
  char uuid[WT_CUDA_UUID_MAX];
  WT_ASSERT_OK(api->device_uuid(0, uuid));
  CU_ASSERT_EQUAL(strncmp(uuid, "GPU-", 4), 0);
  printf("\n  %d CUDA device(s); cuda:0 is %s (%s)\n", count, uuid, api->name);
  WT_ASSERT_OK(wt_cuda_check_device(0));
  char buf[64];
  snprintf(buf, sizeof(buf), "device 'cuda:%d' does not exist", count);
  const char *want = buf;
  WT_ASSERT_ERR(wt_cuda_check_device(count), WT_FAILED_PRECONDITION, want);
  /* Small, one bounce's worth, across two bounces, and large. */
  wt_mem_bounce b;
  WT_ASSERT_OK(wt_mem_bounce_init(&b, WT_MEM_BOUNCE_BYTES));
  size_t sizes[] = {1, 4099, (8u << 20) + 17, (64u << 20) + 5};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    round_trip(WT_MEM_DEVICE, sizes[i], &b);
    round_trip(WT_MEM_PINNED, sizes[i], &b);
  }
  /* Without a bounce buffer of the caller's, one is made for the call. */
  round_trip(WT_MEM_DEVICE, (3u << 20) + 1, NULL);
  wt_mem_bounce_free(&b);
  /* Nothing is left bound to another device on this thread. */
  int cur = -1;
  WT_ASSERT_OK(api->get_device(&cur));
  CU_ASSERT_EQUAL(cur, 0);
  /* The default stream synchronises (a trainer's source with no stream). */
  WT_ASSERT_OK(api->stream_synchronize(NULL));
}

static wtt_server S;

/* A server on cuda:0 holding device memory: the model is loaded onto the
 * GPU, rounds land there, and what reads back is what the trainer sent. */
static void test_server_on_gpu(void) {
  if (gpu_or_skip("a server on cuda:0") == NULL) return;
  wt_staging modes[2] = {WT_STAGING_SHADOW, WT_STAGING_INPLACE};
  for (int m = 0; m < 2; m++) {
    wt_server_options o = {.devices = "cuda:0", .staging = modes[m]};
    wtt_server_start(&S, "small", &o);
    CU_ASSERT_EQUAL(S.workers, 1);
    Wt__V1__ServerInfo *info = wtt_info(S.ch);
    CU_ASSERT_EQUAL_FATAL(info->n_workers, 1);
    CU_ASSERT_STRING_EQUAL(info->workers[0]->device, "cuda:0");
    CU_ASSERT_STRING_EQUAL(info->workers[0]->memory_kind, "device");
    uint64_t copies = m == 0 ? 2 : 1;
    CU_ASSERT(info->workers[0]->bytes_held >=
              copies * info->model->total_bytes);
    wt_pb_free(&info->base);
    wtt_assert_model_seed(&S, 0);
    WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
    wtt_commit_round(&S, "gpu-1", 5);
    wtt_assert_version(S.ch, "gpu-1", 1);
    wtt_assert_model_seed(&S, 5);
    /* An aborted round leaves the committed bytes (shadow) or says the
     * store needs a full round (inplace); either way a next round lands. */
    uint64_t id = 0;
    WT_ASSERT_OK(wtt_start(S.ch, &id));
    WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
    if (modes[m] == WT_STAGING_SHADOW) wtt_assert_model_seed(&S, 5);
    wtt_commit_round(&S, "gpu-2", 9);
    wtt_assert_model_seed(&S, 9);
    wtt_server_stop(&S);
  }
}

/* The bigger model, as a trainer sends it: a sync client and the grpc
 * trainer push llama-256m (about 256 MiB) into the GPU, twice; every byte
 * that reads back from it is the source's. */
static void test_large_round_on_gpu(void) {
  if (gpu_or_skip("a 256 MiB round into cuda:0") == NULL) return;
  wt_server_options o = {.devices = "cuda:0"};
  wtt_server_start(&S, "llama-256m", &o);
  const char *targets[1] = {S.target};
  wt_client_options co = {.timeout_ms = 30000, .data_timeout_ms = 120000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_synthetic("llama-256m", 21, &src));
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("grpc", NULL, 0, &info));
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, src, &t));
  wt_pb_free(&info->base);
  for (uint64_t round = 1; round <= 2; round++) {
    WT_ASSERT_OK(wt_source_synthetic_set_seed(src, 21 + round));
    int64_t t0 = wtt_now_ms();
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, round == 1 ? "big-1" : "big-2"));
    printf("\n  llama-256m round %llu: %lld ms, loopback grpc into cuda:0\n",
           (unsigned long long)round, (long long)(wtt_now_ms() - t0));
    wtt_assert_servers_hold(c, src, WT_HASH_XXH3_64);
  }
  wtt_assert_version(S.ch, "big-2", 2);
  wt_trainer_destroy(t);
  wt_source_destroy(src);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S);
}

/* A backend that cannot write device memory is refused at init, naming
 * the kind; the worker stays usable. */
static void test_engine_refuses_device(void) {
  if (gpu_or_skip("ucx refused on device memory") == NULL) return;
  wt_server_options o = {.devices = "cuda:0"};
  wtt_server_start(&S, "tiny", &o);
#ifdef WT_WITH_UCX
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "ucx";
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_FAILED_PRECONDITION,
                "backend 'ucx' cannot receive into 'device' memory");
#else
  wt_test_skip("ucx refused on device memory", "this build has no UCX");
#endif
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  wtt_commit_round(&S, "after-refusal", 2);
  wtt_assert_model_seed(&S, 2);
  wtt_server_stop(&S);
}

static bool emulated(void);

/* The trainer's tensors in one device allocation on cuda:0, filled with
 * synthetic `seed` (what wtt_assert_model_seed checks). */
typedef struct device_model {
  wt_mem_region r;
  wt_source_tensor t[16];
  size_t n;
} device_model;

static void device_model_fill(device_model *d, const wtt_server *s,
                              uint64_t seed) {
  wt_device dev = {.type = WT_DEVICE_CUDA, .index = 0};
  uint64_t total = 0;
  CU_ASSERT_FATAL(s->n <= 16);
  for (size_t k = 0; k < s->n; k++)
    total += (s->metas[k].nbytes + 255) & ~255ull;
  if (d->r.len == 0)
    WT_ASSERT_OK(wt_mem_alloc(WT_MEM_DEVICE, dev, total, "ipc trainer", &d->r));
  uint64_t off = 0;
  for (size_t k = 0; k < s->n; k++) {
    const wt_tensor_meta *m = &s->metas[k];
    unsigned char *host = malloc(m->nbytes ? m->nbytes : 1);
    wt_synthetic_fill(m, seed, 0, host, m->nbytes);
    WT_ASSERT_OK(wt_mem_write(&d->r, off, host, m->nbytes, NULL));
    free(host);
    d->t[k] = (wt_source_tensor){.name = m->name,
                                 .dtype = m->dtype,
                                 .ndim = m->ndim,
                                 .shape = m->shape,
                                 .data = (char *)d->r.base + off,
                                 .nbytes = m->nbytes,
                                 .kind = WT_MEM_DEVICE,
                                 .device = dev};
    off += (m->nbytes + 255) & ~255ull;
  }
  d->n = s->n;
}

/* An ipc round, trainer and worker in this process: only on the emulated
 * GPU, since CUDA opens only another process's export (the two-process
 * round is for tests/gpu/run-device-checks.sh). Each export is made once
 * and opened once across rounds; a trainer whose memory is gone fails the
 * round, the worker closes its exports, and the next round works. */
static void test_ipc_round(void) {
  if (!emulated()) {
    wt_test_skip("ipc round in one process",
                 "CUDA IPC opens only another process's memory; runs on the "
                 "emulated GPU (gpu_emulated)");
    return;
  }
  wt_server_options o = {.devices = "cuda:0"};
  wtt_server_start(&S, "tiny", &o);
  /* On a device worker with CUDA (here emulated), ipc is available. */
  Wt__V1__ServerInfo *si = wtt_info(S.ch);
  for (size_t i = 0; i < si->n_backend_info; i++)
    if (strcmp(si->backend_info[i]->name, "ipc") == 0)
      CU_ASSERT_TRUE(si->backend_info[i]->available);
  wt_pb_free(&si->base);
  const char *targets[1] = {S.target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 10000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("ipc", NULL, 0, &info));
  info->timeout_ms = 300; /* the data deadline */
  wt_trainer *t = NULL;
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  fake_cuda_stats before = fake_cuda_get_stats();
  device_model d = {0};
  for (uint64_t seed = 7; seed <= 9; seed++) {
    device_model_fill(&d, &S, seed);
    wt_source *src = NULL;
    WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, seed == 9 ? "ipc-3" : "ipc"));
    wtt_assert_model_seed(&S, seed);
    wt_source_destroy(src);
  }
  fake_cuda_stats after = fake_cuda_get_stats();
  /* One allocation: its handle asked of CUDA once a round, under one id;
   * the worker opened it once for all three rounds. */
  CU_ASSERT_EQUAL(after.ipc_exports - before.ipc_exports, 3);
  CU_ASSERT_EQUAL(after.ipc_opens - before.ipc_opens, 1);
  CU_ASSERT_EQUAL(after.ipc_open_now, 1);
  CU_ASSERT_EQUAL(after.copies_d2d - before.copies_d2d, 3 * S.n);
  wtt_assert_version(S.ch, "ipc-3", 3);

  /* Copies that do not finish (the trainer's process hung up its GPU):
   * the data deadline fails the round, the committed bytes stay; the
   * worker closes the trainer's exports once the copies ended, never under
   * one. */
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
  fake_cuda_hold_copies(1);
  WT_ASSERT_OK(wt_sync_client_start(c));
  int64_t t0 = wtt_now_ms();
  WT_ASSERT_ERR(wt_sync_client_update(c, t, src, NULL, NULL),
                WT_DEADLINE_EXCEEDED, "did not finish within 300 ms");
  CU_ASSERT(wtt_now_ms() - t0 < 3000);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now, 1); /* still copying */
  wtt_assert_model_seed(&S, 9);
  wtt_assert_version(S.ch, "ipc-3", 3);
  /* Once they ended, the next round closes the old mapping, reopens the
   * export and commits. */
  fake_cuda_hold_copies(0);
  device_model_fill(&d, &S, 10);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "ipc-4"));
  wtt_assert_model_seed(&S, 10);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_opens - before.ipc_opens, 2);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now, 1);

  /* The trainer's memory is gone: refused on the trainer's side, naming
   * the tensor; nothing of it committed. */
  wt_mem_free(&d.r);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_ERR(wt_sync_client_update(c, t, src, NULL, NULL),
                WT_INVALID_ARGUMENT,
                "tensor 'model.embed_tokens.weight' (cuda:0)");
  wt_source_destroy(src);
  wtt_assert_model_seed(&S, 10);
  /* A new allocation: a new export, and the round commits. */
  memset(&d, 0, sizeof(d));
  device_model_fill(&d, &S, 11);
  WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "ipc-after"));
  wtt_assert_model_seed(&S, 11);
  wt_source_destroy(src);

  /* A stranger's update (a forged handle on this worker's GPU) fails its
   * round naming the export; the server answers, the bytes are the
   * trainer's, and the trainer's next round commits. */
  {
    uint64_t id = 0;
    WT_ASSERT_OK(wtt_start(S.ch, &id));
    wtt_upd u;
    wtt_upd_init(&u, S.metas, NULL, S.n);
    unsigned char forged[WT_IPC_HANDLE_BYTES];
    memset(forged, 0x5a, sizeof(forged));
    char uuid[WT_CUDA_UUID_MAX];
    const wt_cuda_api *api = NULL;
    WT_ASSERT_OK(wt_cuda_api_get(&api));
    WT_ASSERT_OK(api->device_uuid(0, uuid));
    Wt__V1__IpcExport ex = WT__V1__IPC_EXPORT__INIT;
    ex.id = 999;
    ex.handle.data = forged;
    ex.handle.len = sizeof(forged);
    ex.gpu_uuid = uuid;
    ex.size_bytes = 1 << 20;
    Wt__V1__IpcExport *exs[1] = {&ex};
    Wt__V1__IpcPlace pl = WT__V1__IPC_PLACE__INIT;
    pl.export_id = 999;
    Wt__V1__IpcPlace *pls[1] = {&pl};
    Wt__V1__IpcTensor ts[16];
    Wt__V1__IpcTensor *tps[16];
    for (size_t k = 0; k < S.n; k++) {
      wt__v1__ipc_tensor__init(&ts[k]);
      ts[k].n_places = 1;
      ts[k].places = pls;
      tps[k] = &ts[k];
    }
    Wt__V1__IpcUpdateInfo ipc = WT__V1__IPC_UPDATE_INFO__INIT;
    ipc.n_exports = 1;
    ipc.exports = exs;
    ipc.n_tensors = S.n;
    ipc.tensors = tps;
    u.info.packed = false;
    u.info.backend_update_case =
        WT__V1__WEIGHT_TRANSFER_UPDATE_INFO__BACKEND_UPDATE_IPC;
    u.info.ipc = &ipc;
    WT_ASSERT_ERR(wtt_update(S.ch, &u.info, id), WT_FAILED_PRECONDITION,
                  "export 999 (GPU GPU-fa4e0000");
    wtt_assert_serving(S.ch, 1);
    wtt_assert_model_seed(&S, 11);
    WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, "after-stranger"));
    wtt_assert_model_seed(&S, 11);
    wt_source_destroy(src);
  }

  /* A host tensor is refused before anything moves, naming it. */
  wt_source *host = NULL;
  WT_ASSERT_OK(wt_source_synthetic("tiny", 3, &host));
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_ERR(wt_sync_client_update(c, t, host, NULL, NULL),
                WT_INVALID_ARGUMENT, "ipc");
  wt_source_destroy(host);
  wt_mem_free(&d.r);
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now, 0);
}

static bool emulated(void) {
  const char *e = getenv("WT_TEST_GPU_EMULATE");
  return e != NULL && strcmp(e, "1") == 0;
}

static int suite_init(void) {
  if (emulated()) {
    printf(
        "\n  gpu suite on the emulated GPU (WT_TEST_GPU_EMULATE=1), not "
        "on CUDA\n");
    fake_cuda_install(1);
  }
  return 0;
}

static int suite_clean(void) {
  if (emulated()) fake_cuda_uninstall();
  return 0;
}

void wt_test_suite_gpu(void);
void wt_test_suite_gpu(void) {
  CU_pSuite s = CU_add_suite("gpu", suite_init, suite_clean);
  CU_add_test(s, "device and pinned memory round trips", test_device_memory);
  CU_add_test(s, "a server on cuda:0 (shadow, inplace)", test_server_on_gpu);
  CU_add_test(s, "a 256 MiB round into cuda:0", test_large_round_on_gpu);
  CU_add_test(s, "an engine refused on device memory",
              test_engine_refuses_device);
  CU_add_test(s, "ipc rounds, trainer memory gone (emulated)", test_ipc_round);
}
