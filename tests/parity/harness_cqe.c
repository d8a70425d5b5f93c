/* harness_cqe: libmlx5's CQE decoding (providers/mlx5/cq.c, compiled unmodified) driven from
 * stdin, for uhca's parity test (tests/parity_cqe.rs).
 *
 * It lays out, in plain memory, what libmlx5's poll path reads: a struct mlx5_cq with 64-byte
 * CQEs (CQE version 1, as uhca's CQs and as libmlx5 uses on every ConnectX-4 and later), the
 * QPs and SRQs it finds through the context's user-index table (cq.c:417 get_req_context,
 * cq.c:433 get_resp_ctx_v1, mlx5.h:1321 mlx5_find_uidx), their wr_id arrays, and
 * the CQ's doorbell record. Then it runs the provider's own mlx5_poll_cq_v1 (cq.c:1397) and
 * prints every ibv_wc field.
 *
 * Protocol: one request a line on stdin; only `poll` and `consts` answer, on stdout.
 *   cq LOG                       a CQ of 2^LOG 64-byte CQEs (every CQE invalid, owner 1)
 *   srq SRQN                     an SRQ
 *   qp QPN UIDX SRQN|-           a QP with user index UIDX, receiving from SRQ SRQN or its RQ
 *   sq UIDX COUNTER WRID         the send WQE at 16-bit WQE counter COUNTER has wr_id WRID
 *   rq UIDX COUNTER WRID         the receive WQE at counter COUNTER
 *   srqwr SRQN INDEX WRID        the SRQ WQE at INDEX
 *   cqe HEX                      64 CQE bytes (128 hex digits, owner bit included) written
 *                                at the next producer slot
 *   poll NE                      mlx5_poll_cq_v1(cq, NE, wc): prints "n RET", RET lines
 *                                "wc wr_id status opcode vendor_err byte_len imm_data
 *                                qp_num src_qp wc_flags pkey_index slid sl dlid_path_bits"
 *                                (decimal; imm_data as be32toh of the union, which also holds
 *                                invalidated_rkey in host order), then "dbrec HEX" (the 4 bytes
 *                                of the consumer-index word of the doorbell record)
 *   consts                       the ibv_wc enum values this harness was compiled with
 * Before each poll every ibv_wc is filled with 0xa5 bytes, so a field libmlx5 does not write
 * reads back as 0xa5a5... and the test can tell "not written" from a value.
 *
 * The QP and SRQ arrays are 65536 long, so libmlx5's "counter & (wqe_cnt - 1)" is the
 * counter itself and the test need not mirror uhca's queue sizes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <endian.h>

#include "mlx5.h"

#define SLOTS 65536
#define MAX_OBJ 64

static struct mlx5_context *ctx;
static struct mlx5_cq cq;
static __be32 *dbrec;
static uint32_t cq_pi;

static struct mlx5_qp *qps[MAX_OBJ];
static int nqps;
static struct mlx5_srq *srqs[MAX_OBJ];
static int nsrqs;

static void die(const char *what, const char *line)
{
	fprintf(stderr, "harness_cqe: %s: %s\n", what, line);
	printf("error %s\n", what);
	fflush(stdout);
	exit(2);
}

static void *zalloc(size_t n)
{
	void *p = calloc(1, n);

	if (!p)
		die("out of memory", "");
	return p;
}

static struct mlx5_qp *qp_by_uidx(uint32_t uidx)
{
	for (int i = 0; i < nqps; i++)
		if (qps[i]->rsc.rsn == uidx)
			return qps[i];
	return NULL;
}

static struct mlx5_srq *srq_by_n(uint32_t srqn)
{
	for (int i = 0; i < nsrqs; i++)
		if (srqs[i]->srqn == srqn)
			return srqs[i];
	return NULL;
}

static void make_cq(int log)
{
	size_t n = (size_t)1 << log;

	cq.verbs_cq.cq.context = &ctx->ibv_ctx.context;
	cq.verbs_cq.cq.cqe = n - 1;
	cq.cqe_sz = 64;
	cq.buf_a.buf = aligned_alloc(4096, n * 64);
	if (!cq.buf_a.buf)
		die("out of memory", "");
	memset(cq.buf_a.buf, 0, n * 64);
	for (size_t i = 0; i < n; i++)
		((uint8_t *)cq.buf_a.buf)[i * 64 + 63] = MLX5_CQE_INVALID << 4 | 1;
	cq.buf_a.length = n * 64;
	cq.active_buf = &cq.buf_a;
	cq.active_cqes = n;
	dbrec = aligned_alloc(64, 64);
	memset(dbrec, 0, 64);
	cq.dbrec = dbrec;
	cq.cons_index = 0;
	cq_pi = 0;
}

static void make_srq(uint32_t srqn)
{
	struct mlx5_srq *s = zalloc(sizeof(*s));

	if (nsrqs == MAX_OBJ)
		die("too many SRQs", "");
	s->rsc.type = MLX5_RSC_TYPE_SRQ;
	s->rsc.rsn = srqn;
	s->srqn = srqn;
	s->vsrq.srq.context = &ctx->ibv_ctx.context;
	s->wrid = zalloc(SLOTS * sizeof(uint64_t));
	s->max = SLOTS;
	s->nwqes = SLOTS;
	s->free_wqe_bitmap = zalloc(SLOTS / 8);
	srqs[nsrqs++] = s;
}

static void make_qp(uint32_t qpn, uint32_t uidx, struct mlx5_srq *srq)
{
	struct mlx5_qp *q = zalloc(sizeof(*q));
	uint32_t tind = uidx >> MLX5_UIDX_TABLE_SHIFT;

	if (nqps == MAX_OBJ)
		die("too many QPs", "");
	q->rsc.type = MLX5_RSC_TYPE_QP;
	/* With CQE version 1 libmlx5 keys a QP by its user index (verbs.c:2738,
	 * create_qp: rsc.rsn = usr_idx), and the CQE's srqn_uidx carries it. */
	q->rsc.rsn = uidx;
	q->verbs_qp.qp.qp_num = qpn;
	q->verbs_qp.qp.context = &ctx->ibv_ctx.context;
	q->verbs_qp.qp.srq = srq ? &srq->vsrq.srq : NULL;
	q->sq.wrid = zalloc(SLOTS * sizeof(uint64_t));
	q->sq.wqe_head = zalloc(SLOTS * sizeof(unsigned));
	q->sq.wr_data = zalloc(SLOTS * sizeof(uint32_t));
	q->sq.wqe_cnt = SLOTS;
	q->rq.wrid = zalloc(SLOTS * sizeof(uint64_t));
	q->rq.wqe_cnt = SLOTS;
	if (!ctx->uidx_table[tind].refcnt)
		ctx->uidx_table[tind].table =
			zalloc((MLX5_UIDX_TABLE_MASK + 1) * sizeof(struct mlx5_resource *));
	ctx->uidx_table[tind].refcnt++;
	ctx->uidx_table[tind].table[uidx & MLX5_UIDX_TABLE_MASK] = &q->rsc;
	qps[nqps++] = q;
}

static void put_cqe(const char *hex, const char *line)
{
	uint8_t b[64];

	if (!cq.active_buf)
		die("cqe before cq", line);
	if (strlen(hex) != 128)
		die("a CQE is 128 hex digits", line);
	for (int i = 0; i < 64; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			die("bad hex", line);
		b[i] = v;
	}
	/* Body first, op_own last, as the device writes it. */
	uint8_t *slot = (uint8_t *)cq.buf_a.buf + (cq_pi & cq.verbs_cq.cq.cqe) * 64;
	memcpy(slot, b, 63);
	__atomic_store_n(&slot[63], b[63], __ATOMIC_RELEASE);
	cq_pi++;
}

static void poll(int ne)
{
	struct ibv_wc *wc = zalloc((ne ? ne : 1) * sizeof(*wc));

	memset(wc, 0xa5, (ne ? ne : 1) * sizeof(*wc));
	int n = mlx5_poll_cq_v1(&cq.verbs_cq.cq, ne, wc);

	printf("n %d\n", n);
	for (int i = 0; i < n; i++) {
		struct ibv_wc *w = &wc[i];

		printf("wc %llu %u %u %u %u %u %u %u %u %u %u %u %u\n",
		       (unsigned long long)w->wr_id, (unsigned)w->status, (unsigned)w->opcode,
		       w->vendor_err, w->byte_len, be32toh(w->imm_data), w->qp_num, w->src_qp,
		       w->wc_flags, w->pkey_index, w->slid, w->sl, w->dlid_path_bits);
	}
	const uint8_t *d = (const uint8_t *)&dbrec[MLX5_CQ_SET_CI];

	printf("dbrec %02x%02x%02x%02x\n", d[0], d[1], d[2], d[3]);
	fflush(stdout);
	free(wc);
}

int main(void)
{
	char line[512];

	ctx = zalloc(sizeof(*ctx));
	ctx->cqe_version = 1;
	while (fgets(line, sizeof(line), stdin)) {
		char cmd[16], a[160], b[32], c[32];
		unsigned long long v;
		int k = sscanf(line, "%15s %159s %31s %31s", cmd, a, b, c);

		if (k <= 0)
			continue;
		if (!strcmp(cmd, "cq") && k == 2) {
			make_cq(atoi(a));
		} else if (!strcmp(cmd, "srq") && k == 2) {
			make_srq(strtoul(a, NULL, 0));
		} else if (!strcmp(cmd, "qp") && k == 4) {
			struct mlx5_srq *s = NULL;

			if (strcmp(c, "-") && !(s = srq_by_n(strtoul(c, NULL, 0))))
				die("unknown SRQ", line);
			make_qp(strtoul(a, NULL, 0), strtoul(b, NULL, 0), s);
		} else if ((!strcmp(cmd, "sq") || !strcmp(cmd, "rq")) && k == 4) {
			struct mlx5_qp *q = qp_by_uidx(strtoul(a, NULL, 0));
			unsigned idx = strtoul(b, NULL, 0) & (SLOTS - 1);

			if (!q)
				die("unknown QP", line);
			v = strtoull(c, NULL, 0);
			if (cmd[0] == 's') {
				q->sq.wrid[idx] = v;
				q->sq.wqe_head[idx] = idx;
				q->sq.wr_data[idx] = 0;
			} else {
				q->rq.wrid[idx] = v;
			}
		} else if (!strcmp(cmd, "srqwr") && k == 4) {
			struct mlx5_srq *s = srq_by_n(strtoul(a, NULL, 0));

			if (!s)
				die("unknown SRQ", line);
			s->wrid[strtoul(b, NULL, 0) & (SLOTS - 1)] = strtoull(c, NULL, 0);
		} else if (!strcmp(cmd, "cqe") && k == 2) {
			put_cqe(a, line);
		} else if (!strcmp(cmd, "poll") && k == 2) {
			poll(atoi(a));
		} else if (!strcmp(cmd, "consts")) {
			printf("consts SUCCESS=%d LOC_LEN_ERR=%d LOC_QP_OP_ERR=%d LOC_PROT_ERR=%d "
			       "WR_FLUSH_ERR=%d MW_BIND_ERR=%d BAD_RESP_ERR=%d LOC_ACCESS_ERR=%d "
			       "REM_INV_REQ_ERR=%d REM_ACCESS_ERR=%d REM_OP_ERR=%d RETRY_EXC_ERR=%d "
			       "RNR_RETRY_EXC_ERR=%d REM_ABORT_ERR=%d GENERAL_ERR=%d "
			       "SEND=%d RDMA_WRITE=%d RDMA_READ=%d COMP_SWAP=%d FETCH_ADD=%d "
			       "RECV=%d RECV_RDMA_WITH_IMM=%d GRH=%d WITH_IMM=%d WITH_INV=%d\n",
			       IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR,
			       IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_MW_BIND_ERR,
			       IBV_WC_BAD_RESP_ERR, IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR,
			       IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR,
			       IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_REM_ABORT_ERR, IBV_WC_GENERAL_ERR,
			       IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP,
			       IBV_WC_FETCH_ADD, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_GRH,
			       IBV_WC_WITH_IMM, IBV_WC_WITH_INV);
			fflush(stdout);
		} else {
			die("bad request", line);
		}
	}
	return 0;
}
