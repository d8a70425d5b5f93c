/* Stubs for the symbols libmlx5's qp.c, cq.c and srq.c reference from the rest of rdma-core
 * (buf.c, mlx5.c, verbs.c, libibverbs) on paths the parity harnesses never take: buffer
 * allocation (the harnesses lay out their buffers themselves), mkey and clock look-ups, DEVX
 * queries, the ibv_wr_* extended-QP builders. Each one reports its name and aborts, so a
 * harness that strays onto such a path fails loudly instead of comparing garbage.
 *
 * Every stub is weak: a harness that needs one of these for real defines it and wins. */
#include <stdio.h>
#include <stdlib.h>

#include "mlx5.h"

#define UNREACHABLE(name)                                                            \
	do {                                                                         \
		fprintf(stderr, "parity stubs: libmlx5 called %s, which the parity " \
				"harness does not provide\n", name);                 \
		abort();                                                             \
	} while (0)

#define WEAK __attribute__((weak))

/* mlx5.c: MLX5_FREEZE_ON_ERROR_CQE is a debugging knob read from the environment; off. */
WEAK int mlx5_freeze_on_error_cqe;

WEAK int mlx5_alloc_prefered_buf(struct mlx5_context *mctx, struct mlx5_buf *buf, size_t size,
				 int page_size, enum mlx5_alloc_type alloc_type,
				 const char *component)
{
	UNREACHABLE("mlx5_alloc_prefered_buf");
}

WEAK int mlx5_free_actual_buf(struct mlx5_context *ctx, struct mlx5_buf *buf)
{
	UNREACHABLE("mlx5_free_actual_buf");
}

WEAK void mlx5_get_alloc_type(struct mlx5_context *context, struct ibv_pd *pd,
			      const char *component, enum mlx5_alloc_type *alloc_type,
			      enum mlx5_alloc_type default_alloc_type)
{
	UNREACHABLE("mlx5_get_alloc_type");
}

WEAK int mlx5_use_huge(const char *key)
{
	UNREACHABLE("mlx5_use_huge");
}

WEAK struct mlx5_mkey *mlx5_find_mkey(struct mlx5_context *ctx, uint32_t mkeyn)
{
	UNREACHABLE("mlx5_find_mkey");
}

WEAK int mlx5_get_cmd_status_err(int err, void *out)
{
	UNREACHABLE("mlx5_get_cmd_status_err");
}

WEAK int mlx5dv_get_clock_info(struct ibv_context *context,
			       struct mlx5dv_clock_info *clock_info)
{
	UNREACHABLE("mlx5dv_get_clock_info");
}

WEAK int mlx5dv_devx_qp_query(struct ibv_qp *qp, const void *in, size_t inlen, void *out,
			      size_t outlen)
{
	UNREACHABLE("mlx5dv_devx_qp_query");
}

WEAK struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	UNREACHABLE("ibv_qp_to_qp_ex");
}
