/* The struct verbs_context around uhca's ibv_context, as verbs.h's inline extended verbs see
 * it: verbs_get_ctx finds it, sz covers every op, ibv_query_device_ex answers through the
 * query_device_ex op (phys_port_cnt_ex, orig_attr as ibv_query_device), the op's own
 * checks (input comp_mask, attr_size), and an op not offered reads as EOPNOTSUPP.
 * UHCA_DEVICES names one mock device. Prints one PASS or FAIL line per check; exits 1 on a
 * FAIL. Written for uhca's tests (ibverbs/tests/verbs_context.rs). */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void check(int ok, const char *what) {
	printf("%s %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		failed = 1;
}

int main(void) {
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) { fprintf(stderr, "no device\n"); return 2; }
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) { perror("open"); return 2; }

	struct verbs_context *v = verbs_get_ctx(ctx);
	check(v != NULL, "verbs_get_ctx finds the verbs_context (abi_compat is the extended marker)");
	if (!v) { printf("FAIL nothing more can be checked\n"); return 1; }
	check(&v->context == ctx, "the ibv_context is the last field of the verbs_context");
	check(v->sz == sizeof(struct verbs_context), "sz is sizeof(struct verbs_context)");
	check(verbs_get_ctx_op(ctx, query_device_ex) != NULL && verbs_get_ctx_op(ctx, create_qp_ex) != NULL &&
		      verbs_get_ctx_op(ctx, create_cq_ex) != NULL,
	      "the query_device_ex, create_qp_ex and create_cq_ex ops are offered");
	check(verbs_get_ctx_op(ctx, query_port) == NULL && v->priv == NULL, "the ops not offered are NULL");

	struct ibv_device_attr a;
	struct ibv_device_attr_ex x;
	memset(&x, 0xa5, sizeof(x));
	int rc = ibv_query_device(ctx, &a);
	int rcx = ibv_query_device_ex(ctx, NULL, &x);
	check(rc == 0 && rcx == 0, "ibv_query_device and ibv_query_device_ex succeed");
	check(memcmp(&a, &x.orig_attr, sizeof(a)) == 0, "orig_attr is what ibv_query_device gives");
	check(x.orig_attr.phys_port_cnt == 1 && x.phys_port_cnt_ex == 1, "phys_port_cnt_ex is 1, as phys_port_cnt");
	check(x.device_cap_flags_ex == a.device_cap_flags, "device_cap_flags_ex holds device_cap_flags");
	check(a.device_cap_flags == (IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT),
	      "device_cap_flags: RC RNR NAK generation and port-active events, by verbs.h's bits");
	check(x.comp_mask == 0 && x.max_dm_size == 0 && x.odp_caps.general_caps == 0 && x.tso_caps.max_tso == 0 &&
		      x.completion_timestamp_mask == 0 && x.hca_core_clock == 0 && x.xrc_odp_caps == 0,
	      "the capabilities not offered are zero");

	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	check(ibv_query_device_ex(ctx, &in, &x) == EINVAL, "an input comp_mask the library does not know is EINVAL");
	in.comp_mask = 0;
	check(ibv_query_device_ex(ctx, &in, &x) == 0 && x.phys_port_cnt_ex == 1, "an input comp_mask of 0 is accepted");
	/* Through the op itself, as a program built against an older verbs.h calls it. */
	check(v->query_device_ex(ctx, NULL, &x, sizeof(x.orig_attr) - 1) == EINVAL,
	      "an attr_size short of orig_attr is EINVAL");
	memset(&x, 0xa5, sizeof(x));
	rc = v->query_device_ex(ctx, NULL, &x, sizeof(x.orig_attr));
	const unsigned char *b = (const unsigned char *)&x;
	int untouched = 1;
	for (size_t i = sizeof(x.orig_attr); i < sizeof(x); i++)
		untouched &= b[i] == 0xa5;
	check(rc == 0 && memcmp(&a, &x.orig_attr, sizeof(a)) == 0 && untouched,
	      "attr_size = sizeof(orig_attr): orig_attr filled, nothing written past it");
	memset(&x, 0xa5, sizeof(x));
	size_t short_size = offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex);
	rc = v->query_device_ex(ctx, NULL, &x, short_size);
	untouched = 1;
	for (size_t i = short_size; i < sizeof(x); i++)
		untouched &= b[i] == 0xa5;
	check(rc == 0 && x.device_cap_flags_ex == a.device_cap_flags && x.max_dm_size == 0 && untouched,
	      "an attr_size ending before phys_port_cnt_ex: the fields within filled or zeroed, none past it");

	/* An extended verb the library does not offer: verbs.h says EOPNOTSUPP. */
	struct ibv_td_init_attr ta = { 0 };
	errno = 0;
	check(ibv_alloc_td(ctx, &ta) == NULL && errno == EOPNOTSUPP, "ibv_alloc_td is EOPNOTSUPP");
	/* The port query still falls back to the exported function. */
	struct ibv_port_attr pa;
	check(ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "ibv_query_port still answers");
	check(ibv_close_device(ctx) == 0, "ibv_close_device frees the verbs_context");
	ibv_free_device_list(list);
	return failed;
}
