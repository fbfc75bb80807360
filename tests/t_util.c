/* t_util.c — dtype table, tensors, context messages. */
#include "test.h"
#include "util/tensor.h"

TEST(dtype_names_roundtrip)
{
    for (int t = 1; t < TPU_DTYPE_COUNT; t++) {
        if (t == TPU_TUPLE) continue;
        const char *n = tpu_dtype_name((tpu_dtype)t);
        CHECK_EQ_INT(tpu_dtype_from_name(n, strlen(n)), t);
    }
    CHECK_EQ_INT(tpu_dtype_from_name("f33", 3), TPU_INVALID);
    CHECK_EQ_INT(tpu_dtype_size(TPU_BF16), 2);
    CHECK_EQ_INT(tpu_dtype_size(TPU_S4), 1);
    CHECK_EQ_INT(tpu_dtype_size(TPU_C64), 8);
}

TEST(tensor_new_and_errors)
{
    tpu_ctx *ctx = tpu_ctx_new();
    tpu_tensor *t = NULL;
    int64_t dims[2] = {3, 5};
    REQUIRE_OK(ctx, tpu_tensor_new(ctx, TPU_F32, 2, dims, &t));
    CHECK_EQ_INT(tpu_tensor_count(t), 15);
    CHECK_EQ_INT(tpu_tensor_nbytes(t), 60);
    CHECK(((uintptr_t)tpu_tensor_data(t) & 63) == 0);
    char s[64];
    tpu_tensor_shape_str(t, s, sizeof s);
    CHECK_EQ_STR(s, "f32[3,5]");
    tpu_tensor_free(t);
    int64_t neg[1] = {-1};
    CHECK_EQ_INT(tpu_tensor_new(ctx, TPU_F32, 1, neg, &t), TPU_ERR_INVALID);
    CHECK(strstr(tpu_errmsg(ctx), "negative") != NULL);
    tpu_tensor_free(NULL);
    tpu_ctx_free(ctx);
}

TEST(integer_store_wraps_float_store_saturates)
{
    int8_t b[2];
    ten_store_i64(TPU_S8, b, 0, 300);
    CHECK_EQ_INT(b[0], 44);
    ten_store_f64(TPU_S8, b, 1, 300.0);
    CHECK_EQ_INT(b[1], 127);
    uint8_t u4[1];
    ten_store_i64(TPU_S4, u4, 0, -1);
    CHECK_EQ_INT(ten_load_i64(TPU_S4, u4, 0), -1);
}
