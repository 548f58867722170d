/* test_init_info.c: the one rule between an init info and its backend, and
 * the ranks of a server's workers in the trainer's world
 * (common/src/transfer/init_info.c), as both sides apply them. */

#include <string.h>

#include "wt/init_info.h"
#include "wt_test.h"

static void test_backend(void) {
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  Wt__V1__GrpcInitInfo g = WT__V1__GRPC_INIT_INFO__INIT;
  const char *b = "x";
  WT_ASSERT_ERR(wt_init_info_backend(NULL, &b), WT_INVALID_ARGUMENT,
                "init_info is missing");
  CU_ASSERT_PTR_NULL(b);
  WT_ASSERT_ERR(wt_init_info_backend(&info, &b), WT_INVALID_ARGUMENT,
                "init_info.backend is empty");
  /* By name alone (a plugin's backend), by the oneof alone, by both. */
  info.backend = "memq";
  WT_ASSERT_OK(wt_init_info_backend(&info, &b));
  CU_ASSERT_STRING_EQUAL(b, "memq");
  info.backend = "";
  info.backend_init_case = WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_GRPC;
  info.grpc = &g;
  WT_ASSERT_OK(wt_init_info_backend(&info, &b));
  CU_ASSERT_STRING_EQUAL(b, "grpc");
  info.backend = "grpc";
  WT_ASSERT_OK(wt_init_info_backend(&info, &b));
  CU_ASSERT_STRING_EQUAL(b, "grpc");
  info.backend = "nccl";
  WT_ASSERT_ERR(wt_init_info_backend(&info, &b), WT_INVALID_ARGUMENT,
                "init_info.backend is 'nccl' but init_info carries grpc "
                "settings");
  CU_ASSERT_STRING_EQUAL(
      wt_init_info_case_backend(
          WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT_IPC),
      "ipc");
  CU_ASSERT_PTR_NULL(wt_init_info_case_backend(
      WT__V1__WEIGHT_TRANSFER_INIT_INFO__BACKEND_INIT__NOT_SET));
}

static void test_ranks(void) {
  Wt__V1__WeightTransferInitInfo info = WT__V1__WEIGHT_TRANSFER_INIT_INFO__INIT;
  /* Unsaid ranks pass (a trainer that does not count them). */
  WT_ASSERT_OK(wt_init_info_check_ranks(&info, 8));
  info.world_size = 5;
  info.rank_offset = 1;
  WT_ASSERT_OK(wt_init_info_check_ranks(&info, 4)); /* ranks 1..4 of 0..4 */
  WT_ASSERT_ERR(wt_init_info_check_ranks(&info, 5), WT_INVALID_ARGUMENT,
                "init_info.rank_offset 1 with 5 worker(s) needs ranks up to 5; "
                "init_info.world_size 5 has ranks 0 to 4");
  info.rank_offset = 0;
  WT_ASSERT_ERR(wt_init_info_check_ranks(&info, 1), WT_INVALID_ARGUMENT,
                "init_info.rank_offset is 0, the trainer's rank");
  /* Past 32 bits the sum does not wrap. */
  info.world_size = UINT32_MAX;
  info.rank_offset = UINT32_MAX - 1;
  WT_ASSERT_ERR(wt_init_info_check_ranks(&info, 3), WT_INVALID_ARGUMENT,
                "needs ranks up to 4294967296");
}

void wt_test_suite_init_info(void);
void wt_test_suite_init_info(void) {
  CU_pSuite s = CU_add_suite("init_info", NULL, NULL);
  CU_add_test(s, "the backend an init info names", test_backend);
  CU_add_test(s, "the ranks of a server's workers", test_ranks);
}
