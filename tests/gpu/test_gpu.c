/* test_gpu.c: the "gpu" suite, on a real CUDA device through the module
 * libwt_cuda.so (wt/cuda.h), not the emulation the other suites use
 * (support/fake_cuda.h). Where no device answers (no GPU, no driver, a
 * build without CUDA) the suite prints "skipped: no CUDA device (<why>)"
 * and `wt_tests --suite gpu` exits 77, which ctest reports as a skip: run
 * tests/gpu/run-device-checks.sh on a machine with one.
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
#include <time.h>

#include "support/fake_cuda.h"
#include "support/fixture.h"
#include "wt/cuda.h"
#include "backends/ipc/ipc_shared.h"
#include "wt/memory.h"
#include "backends/nccl/nccl_shared.h"
#include "wt/pb.h"
#include "wt/source.h"
#include "wt/synthetic.h"
#include "wt/trainer.h"

/* The real table in *api, or why no device can be used. */
static wt_status *gpu_api(const wt_cuda_api **api) {
  wt_status *st = wt_cuda_api_get(api);
  int count = 0;
  if (st == NULL) st = (*api)->device_count(&count);
  if (st == NULL && count == 0)
    st = wt_status_new(WT_FAILED_PRECONDITION, "0 devices visible");
  return st;
}

/* The real table, or NULL after printing why the test does not run. */
static const wt_cuda_api *gpu_or_skip(const char *test) {
  const wt_cuda_api *api = NULL;
  wt_status *st = gpu_api(&api);
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
    int64_t t0 = wt_mono_ms();
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, NULL, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, round == 1 ? "big-1" : "big-2"));
    printf("\n  llama-256m round %llu: %lld ms, loopback grpc into cuda:0\n",
           (unsigned long long)round, (long long)(wt_mono_ms() - t0));
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
static bool emulated(void);
typedef wtt_device_model device_model;

static void device_model_fill(device_model *d, const wtt_server *s,
                              uint64_t seed) {
  wtt_device_model_fill(d, s, seed, 256);
}

/* ucx into a device store: where the UCX in use moves CUDA memory (UCX
 * 1.22 with a CUDA driver), a round from the trainer's device memory lands
 * in the worker's, byte for byte; where it cannot (Debian's 1.13, no
 * driver, the emulated GPU) the init is refused naming UCX, and the server
 * still serves another backend. */
static void test_ucx_device(void) {
  if (gpu_or_skip("ucx into a device store") == NULL) return;
  wt_server_options o = {.devices = "cuda:0"};
  wtt_server_start(&S, "tiny", &o);
#ifdef WT_WITH_UCX
  const char *targets[1] = {S.target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 10000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 1, &co, &c));
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("ucx", NULL, 0, &info));
  wt_trainer *t = NULL;
  wt_status *st = wt_sync_client_init_transfer(c, info, NULL, &t);
  wt_pb_free(&info->base);
  if (st != NULL) {
    printf("\n  ucx into cuda:0 refused here: %s\n", wt_status_message(st));
    WT_ASSERT_ERR(st, WT_FAILED_PRECONDITION,
                  "cannot move CUDA device memory here");
    /* GetServerInfo says so before anyone tries. */
    Wt__V1__ServerInfo *si = wtt_info(S.ch);
    bool listed = false;
    for (size_t i = 0; i < si->n_backend_info; i++) {
      const Wt__V1__BackendInfo *b = si->backend_info[i];
      if (strcmp(b->name, "ucx") != 0) continue;
      listed = true;
      CU_ASSERT_FALSE(b->available);
      CU_ASSERT_PTR_NOT_NULL(
          strstr(b->unavailable_reason, "cannot move CUDA device memory"));
    }
    CU_ASSERT_TRUE(listed);
    wt_pb_free(&si->base);
  } else if (emulated()) {
    CU_FAIL("a UCX with CUDA memory cannot move the emulated GPU's memory");
  } else {
    static device_model dm;
    device_model *d = &dm;
    for (uint64_t seed = 31; seed <= 32; seed++) {
      device_model_fill(d, &S, seed);
      wt_source *src = NULL;
      WT_ASSERT_OK(wt_source_memory(d->t, d->n, &src));
      WT_ASSERT_OK(wt_sync_client_start(c));
      WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
      WT_ASSERT_OK(wt_sync_client_finish(c, "ucx-device"));
      wtt_assert_model_seed(&S, seed);
      wt_source_destroy(src);
    }
    wt_mem_free(&d->r);
    printf("\n  ucx from cuda:0 into cuda:0: 2 rounds verified\n");
  }
  wt_trainer_destroy(t);
  wt_sync_client_destroy(c);
#else
  wt_test_skip("ucx into a device store", "this build has no UCX");
#endif
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  wtt_commit_round(&S, "after-ucx", 2);
  wtt_assert_model_seed(&S, 2);
  wtt_server_stop(&S);
}

static bool emulated(void);

/* A round whose copies never finish (fake_cuda_hold_copies, left set):
 * the 300 ms data deadline fails it within seconds. */
static void held_round(wt_sync_client *c, wt_trainer *t, wt_source *src) {
  fake_cuda_hold_copies(1);
  WT_ASSERT_OK(wt_sync_client_start(c));
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_sync_client_update(c, t, src, NULL, NULL),
                WT_DEADLINE_EXCEEDED, "did not finish within 300 ms");
  CU_ASSERT(wt_mono_ms() - t0 < 3000);
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
  held_round(c, t, src);
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

/* An ipc init info with the packed ring: buffers of `bucket` bytes. */
static Wt__V1__WeightTransferInitInfo *packed_info(const char *bucket,
                                                   const char *nbuf) {
  wt_backend_option opts[3] = {
      {"packed", "1"}, {"bucket_size", bucket}, {"num_buffers", nbuf}};
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("ipc", opts, 3, &info));
  info->timeout_ms = 300; /* the data deadline */
  return info;
}

/* Packed ipc rounds to two servers: the ring is made and exported once, on
 * the trainer's GPU; each bucket of the shared plan is packed into a slot
 * and copied out by every worker; a tensor that does not fit a slot comes
 * from its own memory; the bytes that land are the trainer's. */
static void test_ipc_packed(void) {
  if (!emulated()) {
    wt_test_skip("ipc packed rounds in one process",
                 "CUDA IPC opens only another process's memory; runs on the "
                 "emulated GPU (gpu_emulated)");
    return;
  }
  static wtt_server S2;
  wt_server_options o = {.devices = "cuda:0"};
  wtt_server_start(&S, "tiny", &o);
  wtt_server_start(&S2, "tiny", &o);
  const char *targets[2] = {S.target, S2.target};
  wt_client_options co = {.timeout_ms = 10000, .data_timeout_ms = 10000};
  wt_sync_client *c = NULL;
  WT_ASSERT_OK(wt_sync_client_new(targets, 2, &co, &c));
  fake_cuda_stats s0 = fake_cuda_get_stats();

  /* Bad ring settings are refused before anything is allocated. */
  wt_trainer *t = NULL;
  Wt__V1__WeightTransferInitInfo *info = packed_info("1K", "1");
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, info, NULL, &t),
                WT_INVALID_ARGUMENT, "packed_num_buffers is 1; between 2");
  wt_pb_free(&info->base);
  info = packed_info("0", "2");
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, info, NULL, &t),
                WT_INVALID_ARGUMENT, "packed_buffer_size_bytes is 0");
  wt_pb_free(&info->base);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().device_bytes[0], s0.device_bytes[0]);

  /* "tiny" is 2048, 64, 512, 1280, 64, 64, 2048 bytes: with 1 KiB buffers
   * the plan is {2048} {64 512 1280} {64 64 2048}; the tensor that closes
   * each bucket past 1 KiB is copied from its own memory. */
  WT_ASSERT_OK(wt_cuda_bind(0));
  info = packed_info("1K", "2");
  WT_ASSERT_OK(wt_sync_client_init_transfer(c, info, NULL, &t));
  wt_pb_free(&info->base);
  fake_cuda_stats s1 = fake_cuda_get_stats();
  CU_ASSERT_EQUAL(s1.device_bytes[0] - s0.device_bytes[0], 2 * 1024);
  CU_ASSERT_EQUAL(s1.ipc_exports - s0.ipc_exports, 2);
  /* Each server's worker opened both slots at init. */
  CU_ASSERT_EQUAL(s1.ipc_opens - s0.ipc_opens, 4);
  device_model d = {0};
  for (uint64_t seed = 21; seed <= 23; seed++) {
    device_model_fill(&d, &S, seed);
    wt_source *src = NULL;
    WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, "packed"));
    wtt_assert_model_seed(&S, seed);
    wtt_assert_model_seed(&S2, seed);
    wt_source_destroy(src);
  }
  /* What a bucket costs beyond its bytes (an UpdateWeights per bucket and
   * server over loopback, the pack and copies emulated): printed, for the
   * note on the packed mode's control overhead. */
  {
    wt_source *src = NULL;
    WT_ASSERT_OK(wt_source_memory(d.t, d.n, &src));
    enum { R = 20 };
    double us = 0;
    for (int r = 0; r < R; r++) {
      WT_ASSERT_OK(wt_sync_client_start(c));
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
      clock_gettime(CLOCK_MONOTONIC, &b);
      us += (double)(b.tv_sec - a.tv_sec) * 1e6 +
            (double)(b.tv_nsec - a.tv_nsec) / 1e3;
      WT_ASSERT_OK(wt_sync_client_finish(c, "packed"));
    }
    printf(
        "\n  packed update, 3 buckets to 2 servers (emulated GPU, "
        "loopback): %.0f us a round, %.0f us a bucket (the mean of %d "
        "rounds)\n",
        us / R, us / R / 3, R);
    wt_source_destroy(src);
  }
  fake_cuda_stats s2 = fake_cuda_get_stats();
  /* Per round: 4 tensors packed by the trainer, 7 copied out by each of
   * the two workers; the model's allocation exported once (then confirmed
   * once a round) and opened once by each worker; the ring stays. */
  CU_ASSERT_EQUAL(s2.copies_d2d - s1.copies_d2d, 23 * (4 + 2 * 7));
  CU_ASSERT_EQUAL(s2.ipc_exports - s1.ipc_exports, 23);
  CU_ASSERT_EQUAL(s2.ipc_opens - s1.ipc_opens, 2);
  CU_ASSERT_EQUAL(s2.ipc_open_now - s0.ipc_open_now, 6);
  CU_ASSERT_EQUAL(s2.device_bytes[0] - s1.device_bytes[0], d.r.len);
  wtt_assert_version(S.ch, "packed", 23);

  /* The trainer moved its tensors to a new allocation: the next round
   * exports it; the round after closes the old mapping on every worker
   * (a mapping kept would keep the trainer's freed memory alive). */
  device_model d2 = {0};
  device_model_fill(&d2, &S, 24);
  wt_mem_free(&d.r);
  for (int r = 0; r < 2; r++) {
    wt_source *src = NULL;
    WT_ASSERT_OK(wt_source_memory(d2.t, d2.n, &src));
    WT_ASSERT_OK(wt_sync_client_start(c));
    WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
    WT_ASSERT_OK(wt_sync_client_finish(c, "moved"));
    wt_source_destroy(src);
  }
  wtt_assert_model_seed(&S, 24);
  wtt_assert_model_seed(&S2, 24);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now - s0.ipc_open_now, 6);

  /* Copies that do not finish: the trainer's packing, or a worker's copy,
   * meets the 300 ms deadline; the round fails, the bytes stay, and the
   * next round commits. */
  wt_source *src = NULL;
  WT_ASSERT_OK(wt_source_memory(d2.t, d2.n, &src));
  held_round(c, t, src);
  fake_cuda_hold_copies(0);
  wtt_assert_model_seed(&S, 24);
  wtt_assert_version(S2.ch, "moved", 25);
  device_model_fill(&d2, &S, 25);
  WT_ASSERT_OK(wt_sync_client_start(c));
  WT_ASSERT_OK(wt_sync_client_update(c, t, src, NULL, NULL));
  WT_ASSERT_OK(wt_sync_client_finish(c, "after-hold"));
  wtt_assert_model_seed(&S, 25);
  wtt_assert_model_seed(&S2, 25);
  wt_source_destroy(src);

  /* A ring on a GPU the workers do not have: the init fails on every
   * server naming their GPU and the ring's. */
  wt_trainer_destroy(t);
  t = NULL;
  WT_ASSERT_OK(wt_cuda_bind(1));
  info = packed_info("1K", "2");
  WT_ASSERT_ERR(wt_sync_client_init_transfer(c, info, NULL, &t),
                WT_INVALID_ARGUMENT, "has no buffer on this worker's GPU");
  wt_pb_free(&info->base);
  WT_ASSERT_OK(wt_cuda_bind(0));
  wtt_assert_serving(S.ch, 1);
  wtt_assert_model_seed(&S, 25);

  /* Every ring and model buffer of the trainer's is freed. */
  wt_trainer_destroy(t);
  wt_mem_free(&d2.r);
  fake_cuda_stats s9 = fake_cuda_get_stats();
  CU_ASSERT_EQUAL(s9.device_bytes[0], s0.device_bytes[0]);
  CU_ASSERT_EQUAL(s9.device_bytes[1], s0.device_bytes[1]);
  wt_sync_client_destroy(c);
  wtt_server_stop(&S2);
  wtt_server_stop(&S);
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now, 0);
}

/* A packed init from a stranger: every malformed ring is refused by name
 * before a handle is opened, a flood before it is looked at, a forged
 * handle when it is opened; the server still answers and serves. */
static void test_ipc_ring_strangers(void) {
  if (!emulated()) {
    wt_test_skip("ipc ring strangers", "runs on the emulated GPU");
    return;
  }
  wt_server_options o = {.devices = "cuda:0"};
  wtt_server_start(&S, "tiny", &o);
  char uuid[WT_CUDA_UUID_MAX];
  const wt_cuda_api *api = NULL;
  WT_ASSERT_OK(wt_cuda_api_get(&api));
  WT_ASSERT_OK(api->device_uuid(0, uuid));
  unsigned char forged[WT_IPC_HANDLE_BYTES];
  memset(forged, 0x33, sizeof(forged));
  enum { N = 3 };
  Wt__V1__IpcExport ex[N], *exs[N];
  for (int i = 0; i < N; i++) {
    wt__v1__ipc_export__init(&ex[i]);
    ex[i].id = 10 + (uint64_t)i;
    ex[i].handle.data = forged;
    ex[i].handle.len = sizeof(forged);
    ex[i].gpu_uuid = uuid;
    ex[i].size_bytes = 1 << 20;
    exs[i] = &ex[i];
  }
  Wt__V1__UInt64Value size = WT__V1__UINT64_VALUE__INIT;
  size.value = 1 << 20;
  Wt__V1__IpcInitInfo x = WT__V1__IPC_INIT_INFO__INIT;
  x.packed = true;
  x.packed_buffer_size_bytes = &size;
  x.ring = exs;
  x.n_ring = 2;
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  info.backend = "ipc";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC;
  info.ipc = &x;
  /* Forged handles on this GPU: the open fails, naming the slot. */
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_FAILED_PRECONDITION,
                "init_info.ipc.ring: export 10 (GPU GPU-fa4e0000");
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now, 0);
  ex[1].handle.len = 3;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "init_info.ipc.ring[1] (id 11): handle is 3 bytes");
  ex[1].handle.len = sizeof(forged);
  ex[1].id = 10;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "init_info.ipc.ring[1]: id 10 is also ring[0]'s");
  ex[1].id = 11;
  ex[0].size_bytes = 4096;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "init_info.ipc.ring[0] (id 10) is 4096 bytes; "
                "packed_buffer_size_bytes is 1048576");
  ex[0].size_bytes = 1 << 20;
  x.n_ring = 3; /* three slots on this GPU for two buffers */
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "more than packed_num_buffers (2) buffers on GPU");
  x.n_ring = 1;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "init_info.ipc.ring has 1 buffers on GPU");
  ex[0].gpu_uuid = "GPU-elsewhere";
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "has no buffer on this worker's GPU GPU-fa4e0000-0000-0000-"
                "0000-000000000000 (the trainer's ring is on GPU-elsewhere)");
  ex[0].gpu_uuid = uuid;
  /* A flood is refused by its count, before any entry is looked at. */
  static Wt__V1__IpcExport *flood[1000];
  for (int i = 0; i < 1000; i++) flood[i] = &ex[2];
  x.ring = flood;
  x.n_ring = 1000;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "init_info.ipc.ring has 1000 buffers for 2 slots");
  x.ring = exs;
  x.n_ring = 2;
  Wt__V1__UInt32Value nbuf = WT__V1__UINT32_VALUE__INIT;
  nbuf.value = 1000;
  x.packed_num_buffers = &nbuf;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "packed_num_buffers is 1000; between 2 and 16");
  x.packed_num_buffers = NULL;
  x.packed = false;
  WT_ASSERT_ERR(wtt_init(S.ch, &info, NULL), WT_INVALID_ARGUMENT,
                "init_info.ipc.ring is set but packed is not");
  CU_ASSERT_EQUAL(fake_cuda_get_stats().ipc_open_now, 0);
  wtt_assert_serving(S.ch, 1);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  wtt_commit_round(&S, "after-strangers", 2);
  wtt_assert_model_seed(&S, 2);
  wtt_server_stop(&S);
}

/* NCCL on the real device (the module, through wt/nccl_seam.h): a one-rank
 * communicator's init, warm-up and a broadcast; then a two-rank init whose
 * second rank never comes, aborted at its 2 s deadline, naming the wait.
 * Prints the NCCL that ran. */
static void test_nccl_real(void) {
  const wt_cuda_api *cuda = gpu_or_skip("nccl on cuda:0");
  if (cuda == NULL) return;
  if (emulated()) {
    wt_test_skip("nccl on cuda:0", "the real NCCL needs the real GPU");
    return;
  }
  const wt_nccl_api *nccl = NULL;
  wt_status *st = wt_nccl_api_get(&nccl);
  if (st != NULL) {
    char why[600];
    snprintf(why, sizeof(why), "no NCCL (%s)", wt_status_message(st));
    wt_test_skip("nccl on cuda:0", why);
    wt_status_free(st);
    return;
  }
  printf("\n  %s (ncclGetVersion %d)\n", nccl->name, nccl->version_code());
  WT_ASSERT_OK(wt_cuda_bind(0));
  unsigned char id[WT_NCCL_UNIQUE_ID_BYTES];
  WT_ASSERT_OK(nccl->get_unique_id(id));
  void *comm = NULL, *stream = NULL;
  WT_ASSERT_OK(cuda->stream_create(0, &stream));
  WT_ASSERT_OK(nccl->comm_init(1, id, 0, &comm));
  WT_ASSERT_OK(wt_nccl_wait(nccl, cuda, &comm, NULL, wt_mono_ms() + 30000, NULL,
                            "one rank: init"));
  wt_device dev = {.type = WT_DEVICE_CUDA, .index = 0};
  wt_mem_region one, buf;
  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_DEVICE, dev, sizeof(float), "one", &one));
  WT_ASSERT_OK(wt_mem_alloc(WT_MEM_DEVICE, dev, 1 << 20, "buf", &buf));
  WT_ASSERT_OK(nccl->all_reduce_f32(one.base, one.base, 1, comm, stream));
  WT_ASSERT_OK(wt_nccl_wait(nccl, cuda, &comm, stream, wt_mono_ms() + 30000,
                            NULL, "one rank: warm-up"));
  unsigned char *src = malloc(1 << 20), *got = malloc(1 << 20);
  pattern(src, 1 << 20, 77);
  WT_ASSERT_OK(wt_mem_write(&buf, 0, src, 1 << 20, NULL));
  WT_ASSERT_OK(nccl->broadcast(buf.base, buf.base, 1 << 20, 0, comm, stream));
  WT_ASSERT_OK(wt_nccl_wait(nccl, cuda, &comm, stream, wt_mono_ms() + 30000,
                            NULL, "one rank: broadcast"));
  WT_ASSERT_OK(wt_mem_read(&buf, 0, got, 1 << 20, NULL));
  CU_ASSERT_EQUAL(memcmp(src, got, 1 << 20), 0);
  nccl->comm_destroy(comm);
  free(src);
  free(got);
  /* Rank 0 of 2, whose rank 1 never comes. */
  WT_ASSERT_OK(nccl->get_unique_id(id));
  WT_ASSERT_OK(nccl->comm_init(2, id, 0, &comm));
  int64_t t0 = wt_mono_ms();
  WT_ASSERT_ERR(wt_nccl_wait(nccl, cuda, &comm, NULL, wt_mono_ms() + 2000, NULL,
                             "rank 0 of 2: init"),
                WT_DEADLINE_EXCEEDED,
                "communicator aborted: rank 0 of 2: init: no progress within "
                "2000 ms");
  int64_t took = wt_mono_ms() - t0;
  printf(
      "  a two-rank init without its second rank: aborted after %lld ms "
      "(deadline 2000 ms)\n",
      (long long)took);
  CU_ASSERT(took < 5000);
  CU_ASSERT_PTR_NULL(comm);
  wt_mem_free(&one);
  wt_mem_free(&buf);
  cuda->stream_destroy(stream);
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
    fake_cuda_install(2);
  }
  return 0;
}

static int suite_clean(void) {
  if (emulated()) fake_cuda_uninstall();
  return 0;
}

void wt_test_suite_gpu(void);
void wt_test_suite_gpu(void) {
  /* Without a device (and not emulated) no test has anything to run: the
   * suite says it skipped (wt_tests --suite gpu exits 77, a skip to ctest)
   * rather than passing with no assertion. */
  if (!emulated()) {
    const wt_cuda_api *api = NULL;
    wt_status *st = gpu_api(&api);
    if (st != NULL) {
      char why[800];
      snprintf(why, sizeof(why),
               "no CUDA device (%s); tests/gpu/run-device-checks.sh runs the "
               "suite on a machine with one, ctest's gpu_emulated on the "
               "emulated GPU",
               wt_status_message(st));
      wt_status_free(st);
      wt_test_suite_skipped(why);
      return;
    }
  }
  CU_pSuite s = CU_add_suite("gpu", suite_init, suite_clean);
  CU_add_test(s, "device and pinned memory round trips", test_device_memory);
  CU_add_test(s, "a server on cuda:0 (shadow, inplace)", test_server_on_gpu);
  CU_add_test(s, "a 256 MiB round into cuda:0", test_large_round_on_gpu);
  CU_add_test(s, "ucx into a device store, or refused naming UCX",
              test_ucx_device);
  CU_add_test(s, "ipc rounds, trainer memory gone (emulated)", test_ipc_round);
  CU_add_test(s, "ipc packed ring rounds (emulated)", test_ipc_packed);
  CU_add_test(s, "ipc packed init from a stranger (emulated)",
              test_ipc_ring_strangers);
  CU_add_test(s, "nccl: one rank, and a rank that never comes", test_nccl_real);
}
