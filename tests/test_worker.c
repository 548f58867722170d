/* test_worker.c: workers as devices (server/worker.c): each worker's one
 * thread, bound to its device, runs every engine call; a worker per GPU of
 * --device holds device memory (here on emulated GPUs, support/fake_cuda.h),
 * reports its device, memory kind and bytes in GetServerInfo, takes a grpc
 * push and answers checksums equal to the host's; an engine that cannot
 * use the store's memory is refused at init, naming both; devices and
 * kinds this machine lacks fail at start, saying why. */
#include <stdlib.h>
#include <string.h>

#include "support/fake_cuda.h"
#include "support/fake_engine.h"
#include "support/fixture.h"
#include "wt/pb.h"
#include "wt/trainer.h"

static wtt_server S;

/* A server of `devices` on emulated GPUs, with the fake engines. */
static wt_registry *start_on_gpus(const char *devices, int ngpus,
                                  wt_staging staging) {
  fake_cuda_install(ngpus);
  fake_engine_reset();
  wt_registry *reg = fake_engine_registry();
  wt_server_options o = {
      .devices = devices, .staging = staging, .engine_registry = reg};
  wtt_server_start(&S, "small", &o);
  return reg;
}

static void stop_on_gpus(wt_registry *reg) {
  wtt_server_stop(&S);
  wt_registry_destroy(reg);
  fake_cuda_stats st = fake_cuda_get_stats();
  CU_ASSERT_EQUAL(st.binding_errors, 0);
  for (int d = 0; d < 8; d++) CU_ASSERT_EQUAL(st.device_bytes[d], 0);
  CU_ASSERT_EQUAL(st.host_bytes, 0);
  fake_cuda_uninstall();
}

static void test_gpu_workers_report(void) {
  wt_registry *reg = start_on_gpus("cuda:1,cuda:0", 2, WT_STAGING_SHADOW);
  CU_ASSERT_EQUAL(S.workers, 2);
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  CU_ASSERT_EQUAL_FATAL(info->n_workers, 2);
  CU_ASSERT_STRING_EQUAL(info->workers[0]->device, "cuda:1");
  CU_ASSERT_STRING_EQUAL(info->workers[1]->device, "cuda:0");
  uint64_t model = info->model->total_bytes;
  for (size_t i = 0; i < 2; i++) {
    CU_ASSERT_STRING_EQUAL(info->workers[i]->memory_kind, "device");
    /* Shadow staging: two copies, each tensor 64-byte aligned. */
    CU_ASSERT(info->workers[i]->bytes_held >= 2 * model);
    CU_ASSERT(info->workers[i]->bytes_held < 2 * model + 64 * 1024);
    CU_ASSERT_STRING_EQUAL(info->workers[i]->state, "uninitialized");
  }
  CU_ASSERT_STRING_EQUAL(info->state, "uninitialized");
  /* What each backend can do. */
  bool saw_grpc = false, saw_fragile = false;
  for (size_t i = 0; i < info->n_backend_info; i++) {
    const Wt__V1__BackendInfo *b = info->backend_info[i];
    if (strcmp(b->name, "grpc") == 0) {
      saw_grpc = true;
      CU_ASSERT(b->loaded && b->cross_host && b->survives_abort);
      CU_ASSERT_EQUAL(b->n_memory_kinds, 4);
    }
    if (strcmp(b->name, "fake-fragile") == 0) {
      saw_fragile = true;
      CU_ASSERT_FALSE(b->survives_abort);
    }
  }
  CU_ASSERT(saw_grpc && saw_fragile);
  wt_pb_free(&info->base);
  /* The loaded model is the synthetic one, read back from the GPUs. */
  wtt_assert_model_seed(&S, 0);
  stop_on_gpus(reg);
}

/* The grpc backend copies each chunk into device memory through the
 * store: a whole round lands on both GPUs, and the digests the GPUs' bytes
 * give (copied out through the bounce buffer) are the host's. */
static void test_grpc_push_into_gpus(void) {
  wt_staging modes[2] = {WT_STAGING_SHADOW, WT_STAGING_INPLACE};
  for (int m = 0; m < 2; m++) {
    wt_registry *reg = start_on_gpus("cuda:0,cuda:1", 2, modes[m]);
    WT_ASSERT_OK(wtt_init_grpc(S.ch, 64 << 10, S.workers));
    uint64_t id = 0;
    WT_ASSERT_OK(wtt_start(S.ch, &id));
    wtt_upd u;
    wtt_upd_init(&u, S.metas, NULL, S.n);
    uint64_t copies = fake_cuda_get_stats().copies_in;
    WT_ASSERT_OK(wtt_push_all(S.ch, &u, id, 1 << 20, 64 << 10, 3, NULL));
    CU_ASSERT(fake_cuda_get_stats().copies_in > copies);
    WT_ASSERT_OK(wtt_finish(S.ch, "on-gpus", id));
    wtt_assert_version(S.ch, "on-gpus", 1);
    wtt_assert_model_seed(&S, 3);
    stop_on_gpus(reg);
  }
}

/* Every engine call runs on its worker's thread, bound to its GPU once at
 * start: the fake engine checks the thread's device in each call. */
static void test_engine_calls_on_the_device_thread(void) {
  wt_registry *reg = start_on_gpus("cuda:0,cuda:1", 2, WT_STAGING_SHADOW);
  WT_ASSERT_OK(fake_engine_init(S.ch, "fake", "4", 5000, NULL));
  fake_engine_release(true);
  for (int round = 0; round < 2; round++) {
    uint64_t id = 0;
    WT_ASSERT_OK(wtt_start(S.ch, &id));
    wtt_upd u;
    wtt_upd_init(&u, S.metas, NULL, S.n);
    WT_ASSERT_OK(wtt_update(S.ch, &u.info, id));
    if (round == 0)
      WT_ASSERT_OK(wtt_finish(S.ch, "r0", id));
    else
      WT_ASSERT_OK(wtt_abort(S.ch, id, NULL));
  }
  wtt_assert_model_seed(&S, 4);
  fake_engine_stats st = fake_engine_get_stats();
  /* init, start x2, receive x2, finish, abort, on each of two workers. */
  CU_ASSERT(st.ops_on_device >= 14);
  CU_ASSERT_EQUAL(st.wrong_device, 0);
  stop_on_gpus(reg);
  CU_ASSERT_EQUAL(fake_engine_get_stats().destroyed, 2);
  CU_ASSERT_EQUAL(fake_engine_get_stats().wrong_device, 0);
}

/* An engine whose table does not take the store's memory is refused at
 * init, naming the backend, the kind and what it takes; the worker stays
 * usable with another backend. */
static void test_engine_refuses_memory_kind(void) {
  wt_registry *reg = start_on_gpus("cuda:0", 1, WT_STAGING_SHADOW);
  WT_ASSERT_ERR(fake_engine_init(S.ch, "fake-host", "1", 0, NULL),
                WT_FAILED_PRECONDITION,
                "worker 0 (cuda:0): backend 'fake-host' cannot receive into "
                "'device' memory (this worker's param store); it takes host, "
                "shared, pinned");
#ifdef WT_WITH_UCX
  /* ucx takes device memory where its UCX moves CUDA memory; this one
   * (Debian's 1.13, or 1.22 without a CUDA driver) cannot, and says so. */
  Wt__V1__WeightTransferInitInfo *info = NULL;
  WT_ASSERT_OK(wt_trainer_init_info("ucx", NULL, 0, &info));
  WT_ASSERT_ERR(wtt_init(S.ch, info, NULL), WT_FAILED_PRECONDITION,
                "worker 0 (cuda:0): backend 'ucx' init: ucx worker 0: the "
                "UCX in use");
  WT_ASSERT_ERR(wtt_init(S.ch, info, NULL), WT_FAILED_PRECONDITION,
                "cannot move CUDA device memory here (its memory types: ");
  wt_pb_free(&info->base);
#endif
  Wt__V1__ServerInfo *info2 = wtt_info(S.ch);
  CU_ASSERT_STRING_EQUAL(info2->workers[0]->state, "uninitialized");
  wt_pb_free(&info2->base);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 1));
  stop_on_gpus(reg);
}

/* Host workers in shared memory say so. */
static void test_shared_memory_workers(void) {
  wt_server_options o = {.workers = 2, .memory = WT_MEM_SHARED};
  wtt_server_start(&S, "tiny", &o);
  Wt__V1__ServerInfo *info = wtt_info(S.ch);
  for (size_t i = 0; i < 2; i++) {
    CU_ASSERT_STRING_EQUAL(info->workers[i]->device, "cpu");
    CU_ASSERT_STRING_EQUAL(info->workers[i]->memory_kind, "shared");
  }
  wt_pb_free(&info->base);
  WT_ASSERT_OK(wtt_init_grpc(S.ch, 0, 2));
  wtt_commit_round(&S, "shared-1", 6);
  wtt_assert_model_seed(&S, 6);
  wtt_server_stop(&S);
}

/* What this machine lacks fails at start, naming it and why. */
static void test_start_errors(void) {
  wt_server *srv = NULL;
  wt_server_options o = {.listen = "127.0.0.1:0", .model = "synthetic:tiny"};
  /* The real CUDA module (or its absence) here: no GPU answers. */
  o.devices = "cuda:0";
  wt_status *st = wt_server_start(&o, &srv);
  if (st == NULL) {
    wt_server_stop(srv);
    wt_test_skip("cuda:0 without a GPU", "a CUDA device answers here");
  } else {
    CU_ASSERT_EQUAL(wt_status_code(st), WT_FAILED_PRECONDITION);
    CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "device 'cuda:0'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(wt_status_message(st), "CUDA"));
    CU_ASSERT_PTR_NULL(srv);
    wt_status_free(st);
    o.devices = NULL;
    o.memory = WT_MEM_PINNED;
    WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_FAILED_PRECONDITION,
                  "memory kind 'pinned' on cpu is unavailable");
    o.memory = WT_MEM_HOST;
  }
  o.devices = "cuda:0,gpu1";
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "devices: device 'gpu1' is neither 'cpu' nor 'cuda:N'");
  fake_cuda_install(1);
  o.devices = "cuda:0,cuda:2";
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_FAILED_PRECONDITION,
                "device 'cuda:2' does not exist: 1 CUDA device(s) visible");
  o.devices = "cuda:0";
  o.workers = 3;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "workers (3) applies to cpu workers");
  o.workers = 0;
  o.memory = WT_MEM_SHARED;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "memory 'shared' applies to cpu workers; cuda:0 holds device "
                "memory");
  o.devices = NULL;
  o.memory = WT_MEM_DEVICE;
  WT_ASSERT_ERR(wt_server_start(&o, &srv), WT_INVALID_ARGUMENT,
                "device memory comes with cuda:N devices");
  CU_ASSERT_PTR_NULL(srv);
  fake_cuda_uninstall();
}

void wt_test_suite_worker(void);
void wt_test_suite_worker(void) {
  CU_pSuite s = CU_add_suite("worker", NULL, NULL);
  CU_add_test(s, "GPU workers report device, memory and bytes",
              test_gpu_workers_report);
  CU_add_test(s, "a grpc round into device memory (shadow, inplace)",
              test_grpc_push_into_gpus);
  CU_add_test(s, "engine calls run on the worker's device thread",
              test_engine_calls_on_the_device_thread);
  CU_add_test(s, "an engine that refuses the store's memory kind",
              test_engine_refuses_memory_kind);
  CU_add_test(s, "host workers in shared memory", test_shared_memory_workers);
  CU_add_test(s, "missing devices and kinds fail at start", test_start_errors);
}
