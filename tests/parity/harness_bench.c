/* harness_bench: libmlx5's datapath timed on plain memory, the libmlx5 side of uhca's driver
 * benchmark (driver/benches/datapath.rs runs it through driver/benches/common/libmlx5.rs).
 *
 * The provider's objects are laid out in plain memory as harness_wqe.c and harness_cqe.c lay
 * them out (a struct mlx5_context, mlx5_qp with its RQ and SQ in one buffer, mlx5_bf, mlx5_cq),
 * and the user's entry points are called on them: ibv_post_send, ibv_post_recv and
 * ibv_poll_cq, which are libibverbs' inline wrappers (verbs.h) calling the context's ops, here
 * libmlx5's mlx5_post_send, mlx5_post_recv and mlx5_poll_cq_v1 / mlx5_poll_cq (qp.c, cq.c,
 * compiled unmodified). The doorbell register and the doorbell records are ordinary memory.
 *
 * Configuration, libmlx5's defaults unless said otherwise:
 *  - Doorbell: the context has shut_up_bf set (what MLX5_SHUT_UP_BF=1 does), so every call
 *    that posts rings the 8-byte doorbell (qp.c post_send_db), one per call: doorbells are
 *    batched by the number of requests a call passes. Each QP has a BlueFlame register of its
 *    own (bf->need_lock 0, as libmlx5 gives a QP a dedicated register: verbs.c
 *    bf->need_lock = qp_shared && !mlx5_single_threaded).
 *  - Locks: libmlx5's default is NOT single-threaded: unless MLX5_SINGLE_THREADED=1 is in the
 *    environment (mlx5.c single_threaded_app), mlx5_single_threaded is 0 and the QP's SQ and RQ
 *    locks (verbs.c create_qp, mlx5_spinlock_init_pd) and the CQ's lock (verbs.c create_cq)
 *    are pthread spinlocks taken on every call. This harness reads MLX5_SINGLE_THREADED the
 *    same way, so both configurations can be timed; the first line printed says which.
 *  - CQE version: libmlx5 asks the kernel for CQE version 1 (mlx5.c, req.max_cqe_version) and
 *    every ConnectX-4 and later grants it, so its ibv_poll_cq is mlx5_poll_cq_v1, which finds
 *    the QP of a CQE by the user index in srqn_uidx. A context without user indexes (CQE
 *    version 0) polls with mlx5_poll_cq, finding the QP by QPN. Both are timed (poll_*_v1,
 *    poll_*_v0).
 *  - No CQ stall (MLX5_STALL_CQ_POLL unset: libmlx5 enables it only on Sandy Bridge CPUs).
 *  - Queues never overflow: between chunks of work the "device" retires everything posted
 *    (sq.tail / rq.tail catch up with head, outside the timed region), so the provider's
 *    overflow check takes its fast path as on a queue that completions keep from filling.
 *
 * Cases (ns and instructions are per request, per CQE, or per call for the empty poll):
 *   send_sge_1         SEND, 1 SGE of 64 bytes, 1 request per call (a doorbell per request)
 *   send_sge_32        SEND, 1 SGE of 64 bytes, 32 requests per call (a doorbell per 32)
 *   send_inline64_32   SEND, 64 bytes inline, 32 per call
 *   write_sge_32       RDMA WRITE, 1 SGE of 64 bytes, 32 per call
 *   recv_sge_32        ibv_post_recv, 1 SGE, 32 per call
 *   poll_16_v1         ibv_poll_cq for 16 requester CQEs of signalled SENDs (mlx5_poll_cq_v1)
 *   poll_empty_v1      ibv_poll_cq on an empty CQ (mlx5_poll_cq_v1), per call
 *   poll_16_v0         as poll_16_v1 with CQE version 0 (mlx5_poll_cq)
 *   poll_empty_v0      as poll_empty_v1 with CQE version 0
 *   srq_recv_sge_32    ibv_post_srq_recv (mlx5_post_srq_recv), 1 SGE, 32 per call; between
 *                      chunks the posted WQEs are given back with mlx5_free_srq_wqe, as the
 *                      poll of their CQEs does
 *   poll_recv_16_{rq,srq}_{send,send_imm,write_imm}
 *                      ibv_poll_cq for 16 responder CQEs (RESP_SEND, RESP_SEND_IMM,
 *                      RESP_WR_IMM) of receives posted on an RQ or on an SRQ (mlx5_poll_cq_v1)
 *   fast_send_sge_32, fast_send_inline64_32, fast_write_sge_32
 *                      libmlx5's fastest post: ibv_wr_start, 32 x (ibv_wr_send or
 *                      ibv_wr_rdma_write, ibv_wr_set_sge or ibv_wr_set_inline_data),
 *                      ibv_wr_complete on the ibv_qp_ex mlx5_qp_fill_wr_pfns fills
 *   fast_poll_16_v1, fast_poll_recv_16_*
 *                      libmlx5's fastest poll: ibv_start_poll, 15 ibv_next_poll,
 *                      ibv_end_poll on the ibv_cq_ex mlx5_cq_fill_pfns fills, reading wr_id,
 *                      status, opcode (and byte_len, imm_data of a receive)
 * Every SEND and WRITE is signalled. For the poll cases every CQE names a SEND that was
 * posted with mlx5_post_send (outside the timed region) and is still outstanding, so the
 * provider takes its normal path: the QP found (and cached for the rest of the call), wr_id
 * read at the CQE's wqe_counter, the SQ's tail moved.
 *
 * Usage:
 *   harness_bench [N]        every case, N operations a run (default 10000000, rounded up to
 *                            whole chunks), 5 runs with the cases interleaved; prints
 *                            "case NAME ns NS_PER_OP ops OPS" per case, NS_PER_OP the median
 *                            of the 5 runs, OPS the operations of one run
 *   harness_bench CASE N     one case, one run of N operations (rounded up likewise), after a
 *                            warm-up chunk that is neither timed nor inside bench_timed;
 *                            prints the same line.
 *                            For instruction counts:
 *                              valgrind --tool=callgrind --collect-atstart=no \
 *                                --toggle-collect=bench_timed harness_bench CASE N
 *                            counts exactly the instructions executed inside bench_timed,
 *                            which holds the timed loop and nothing else; divide by OPS.
 *   harness_bench list       the case names, one a line
 *
 * Timing: the work is done in chunks (a chunk fits the ring: 512 posts, 1024 receives, one
 * 4096-CQE lap of the CQ, 4096 empty polls); each chunk is timed with
 * clock_gettime(CLOCK_MONOTONIC) around one call of bench_timed, and between chunks, outside
 * the clock, the counters are rewound (the "device" retires what was posted) or, for polls,
 * the next lap of SENDs is posted and its CQEs written with the lap's owner bit. ns/op is the
 * sum of the chunks' times over the operations.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlx5.h"
#include "wqe.h"

#define RUNS 5
#define BF_BUF_SIZE 256
#define MSG 64
#define BATCH 32
#define POLL_BATCH 16
/* Send queue of the posting cases: 1024 WQEBBs (64 KiB), at most 512 requests outstanding
 * (a 64-byte inline SEND takes two WQEBBs). */
#define LOG_SQ 10
#define SQ_MAX_POST 512
/* Receive queue: 1024 WQEs of one 16-byte scatter entry. */
#define LOG_RQ 10
#define LOG_RQ_STRIDE 4
/* The CQ: 4096 64-byte CQEs; the QP it completes has 4096 WQEBBs, one per SEND. */
#define LOG_CQ 12
#define CQ_QPN 0x1234
#define CQ_UIDX 7

/* One context per CQE version: the version decides which poll function the context's ops
 * hold (mlx5.c: mlx5_ctx_common_ops' poll_cq is mlx5_poll_cq, the v1 ops' mlx5_poll_cq_v1). */
static struct mlx5_device dev;
static struct mlx5_context ctx_v1, ctx_v0;
/* A protection domain that is not a parent domain (mlx5_spinlock_init_pd looks for one). */
static struct mlx5_parent_domain pdom;

struct qp_ctx {
	struct mlx5_qp qp;
	struct mlx5_bf bf;
	uint8_t bf_reg[2 * BF_BUF_SIZE] __attribute__((aligned(64)));
	__be32 dbrec[2];
};

/* The QP of the posting cases, the QPs the CQs complete (one per CQE version), the CQs. */
static struct qp_ctx post_qp, cq_qp[2];
/* The CQs: 0 and 1 (CQE version 1 and 0) are filled a lap at a time; 2 and 3 (version 1 and
 * 0) stay empty. */
static struct mlx5_cq cq[6];
static __be32 cq_dbrec[6][2] __attribute__((aligned(64)));
static uint8_t cq_uar[4096] __attribute__((aligned(64)));
static uint32_t cq_lap[6];

static uint8_t payload[BATCH][MSG] __attribute__((aligned(64)));
static struct ibv_sge sge[BATCH];
static struct ibv_sge inl_sge[BATCH];
static struct ibv_send_wr send_wr[BATCH], write_wr[BATCH], inline_wr[BATCH];
static struct ibv_recv_wr recv_wr[BATCH];
static struct ibv_send_wr lap_wr[BATCH];
static struct ibv_wc wc[POLL_BATCH];
/* Keeps the compiler from dropping what a call returns. */
static volatile long sink;

static void *zalloc_aligned(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n)) {
		fprintf(stderr, "harness_bench: out of memory\n");
		exit(2);
	}
	memset(p, 0, n);
	return p;
}

static void make_context(struct mlx5_context *c, int cqe_version)
{
	c->ibv_ctx.context.device = &dev.verbs_dev.device;
	c->ibv_ctx.context.ops.post_send = mlx5_post_send;
	c->ibv_ctx.context.ops.post_recv = mlx5_post_recv;
	c->ibv_ctx.context.ops.poll_cq = cqe_version ? mlx5_poll_cq_v1 : mlx5_poll_cq;
	c->cqe_version = cqe_version;
	c->num_ports = 1;
	c->cached_link_layer[0] = IBV_LINK_LAYER_INFINIBAND;
	/* MLX5_SHUT_UP_BF=1: never copy WQEs to the BlueFlame buffer; the 8-byte doorbell. */
	c->shut_up_bf = 1;
	c->cq_uar_reg = cq_uar;
	c->stall_enable = 0;
	c->dbg_fp = stderr;
}

/* An RC QP in RTS (harness_wqe.c's do_qp, with libmlx5's locks): RQ first, SQ after it in one
 * buffer, as libmlx5 lays them out. */
static void make_qp(struct qp_ctx *q, struct mlx5_context *c, uint32_t qpn, uint32_t rsn,
		    int log_sq, unsigned sq_max_post, struct mlx5_cq *send_cq, int log_rq)
{
	struct mlx5_qp *qp = &q->qp;
	size_t rq_bytes = (size_t)1 << (log_rq + LOG_RQ_STRIDE);
	size_t sq_bytes = (size_t)MLX5_SEND_WQE_BB << log_sq;

	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->ibv_qp->context = &c->ibv_ctx.context;
	qp->ibv_qp->qp_num = qpn;
	qp->ibv_qp->state = IBV_QPS_RTS;
	qp->ibv_qp->qp_type = IBV_QPT_RC;
	qp->ibv_qp->send_cq = &send_cq->verbs_cq.cq;
	qp->ibv_qp->recv_cq = &send_cq->verbs_cq.cq;
	qp->ibv_qp->pd = &pdom.mpd.ibv_pd;
	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = rsn;
	qp->buf.buf = zalloc_aligned(rq_bytes + sq_bytes);
	qp->buf.length = rq_bytes + sq_bytes;
	q->bf.reg = q->bf_reg;
	q->bf.buf_size = BF_BUF_SIZE;
	q->bf.uuarn = 1;
	q->bf.qp_dedicated = 1;
	q->bf.need_lock = q->bf.qp_shared && !mlx5_single_threaded;
	mlx5_spinlock_init(&q->bf.lock, q->bf.need_lock);
	qp->bf = &q->bf;
	qp->db = q->dbrec;
	qp->max_inline_data = 128;
	qp->atomics_enabled = 1;
	qp->sq_signal_bits = 0;
	if (mlx5_spinlock_init_pd(&qp->sq.lock, qp->ibv_qp->pd) ||
	    mlx5_spinlock_init_pd(&qp->rq.lock, qp->ibv_qp->pd)) {
		fprintf(stderr, "harness_bench: spinlock init failed\n");
		exit(2);
	}
	qp->rq.offset = 0;
	qp->rq.wqe_cnt = 1u << log_rq;
	qp->rq.max_post = 1u << log_rq;
	qp->rq.wqe_shift = LOG_RQ_STRIDE;
	qp->rq.max_gs = 1;
	qp->rq.qp_state_max_gs = 1;
	qp->rq.wrid = calloc(qp->rq.wqe_cnt, sizeof(uint64_t));
	qp->sq.offset = rq_bytes;
	qp->sq.wqe_cnt = 1u << log_sq;
	qp->sq.max_post = sq_max_post;
	qp->sq.wqe_shift = MLX5_SEND_WQE_SHIFT;
	qp->sq.max_gs = 1;
	qp->sq.qp_state_max_gs = 1;
	qp->sq_start = qp->buf.buf + qp->sq.offset;
	qp->sq.qend = qp->sq_start + sq_bytes;
	qp->sq.wrid = calloc(qp->sq.wqe_cnt, sizeof(uint64_t));
	qp->sq.wqe_head = calloc(qp->sq.wqe_cnt, sizeof(unsigned));
	qp->sq.wr_data = calloc(qp->sq.wqe_cnt, sizeof(uint32_t));
	if (!qp->rq.wrid || !qp->sq.wrid || !qp->sq.wqe_head || !qp->sq.wr_data) {
		fprintf(stderr, "harness_bench: out of memory\n");
		exit(2);
	}
	if (c->cqe_version) {
		/* CQE version 1: the QP is found by its user index (cq.c get_req_context). */
		uint32_t tind = rsn >> MLX5_UIDX_TABLE_SHIFT;

		if (!c->uidx_table[tind].refcnt)
			c->uidx_table[tind].table =
				calloc(MLX5_UIDX_TABLE_MASK + 1, sizeof(struct mlx5_resource *));
		c->uidx_table[tind].refcnt++;
		c->uidx_table[tind].table[rsn & MLX5_UIDX_TABLE_MASK] = &qp->rsc;
	} else if (mlx5_store_qp(c, qpn, qp)) {
		/* CQE version 0: by QPN, through the context's QP table. */
		fprintf(stderr, "harness_bench: mlx5_store_qp failed\n");
		exit(2);
	}
}

/* A CQ of 64-byte CQEs, all invalid and owned by hardware, as the provider creates it. */
static void make_cq(struct mlx5_cq *c, struct mlx5_context *mctx, __be32 *dbrec, uint32_t cqn)
{
	size_t n = (size_t)1 << LOG_CQ;

	c->buf_a.buf = zalloc_aligned(n * 64);
	for (size_t i = 0; i < n; i++)
		((struct mlx5_cqe64 *)((uint8_t *)c->buf_a.buf + i * 64))->op_own =
			MLX5_CQE_INVALID << 4 | MLX5_CQE_OWNER_MASK;
	c->buf_a.length = n * 64;
	c->active_buf = &c->buf_a;
	c->active_cqes = n;
	c->cqe_sz = 64;
	c->cqn = cqn;
	c->verbs_cq.cq.context = &mctx->ibv_ctx.context;
	c->verbs_cq.cq.cqe = n - 1;
	c->dbrec = dbrec;
	c->stall_enable = 0;
	if (mlx5_spinlock_init(&c->lock, !mlx5_single_threaded)) {
		fprintf(stderr, "harness_bench: spinlock init failed\n");
		exit(2);
	}
}

static void make_wrs(void)
{
	for (int i = 0; i < BATCH; i++) {
		memset(payload[i], 0xa5, MSG);
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)payload[i], .length = MSG,
					   .lkey = 0x4242 };
		inl_sge[i] = sge[i];
		send_wr[i] = (struct ibv_send_wr){ .wr_id = i, .sg_list = &sge[i], .num_sge = 1,
						   .opcode = IBV_WR_SEND,
						   .send_flags = IBV_SEND_SIGNALED };
		write_wr[i] = send_wr[i];
		write_wr[i].opcode = IBV_WR_RDMA_WRITE;
		write_wr[i].wr.rdma.remote_addr = 0x7f0000001000ull + (uint64_t)i * MSG;
		write_wr[i].wr.rdma.rkey = 0x5151;
		inline_wr[i] = send_wr[i];
		inline_wr[i].sg_list = &inl_sge[i];
		inline_wr[i].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		lap_wr[i] = send_wr[i];
		recv_wr[i] = (struct ibv_recv_wr){ .wr_id = i, .sg_list = &sge[i], .num_sge = 1 };
		if (i > 0) {
			send_wr[i - 1].next = &send_wr[i];
			write_wr[i - 1].next = &write_wr[i];
			inline_wr[i - 1].next = &inline_wr[i];
			lap_wr[i - 1].next = &lap_wr[i];
			recv_wr[i - 1].next = &recv_wr[i];
		}
	}
}

static void fail_post(const char *what, int err)
{
	fprintf(stderr, "harness_bench: %s failed: %d\n", what, err);
	exit(2);
}

/* --- the cases ------------------------------------------------------------------------ */

struct bench_case {
	const char *name;
	/* Operations per chunk (a multiple of the operations per call). */
	unsigned chunk;
	/* Outside the clock: makes the state ready for one chunk. */
	void (*prepare)(const struct bench_case *c);
	/* The timed work: `ops` operations. */
	void (*body)(const struct bench_case *c, unsigned ops);
	/* For the poll cases: which CQ (index into cq[]). */
	int which;
	/* For the receive poll cases: the CQE opcode the lap's CQEs carry (MLX5_CQE_RESP_*). */
	int op;
};

/* The "device" retired everything posted: the provider's overflow check sees an empty
 * queue again. */
static void prepare_sq(const struct bench_case *c)
{
	post_qp.qp.sq.tail = post_qp.qp.sq.head;
}

static void prepare_rq(const struct bench_case *c)
{
	post_qp.qp.rq.tail = post_qp.qp.rq.head;
}

/* One lap of the CQ: 4096 signalled SENDs posted on the CQ's QP with mlx5_post_send, then
 * one requester CQE per SEND written into the ring as the device writes it (body first,
 * op_own with the lap's owner bit last), naming the SEND by its WQE counter. */
static void prepare_cq(const struct bench_case *c)
{
	struct mlx5_cq *q = &cq[c->which];
	struct mlx5_qp *qp = &cq_qp[c->which].qp;
	unsigned n = 1u << LOG_CQ;
	unsigned first = qp->sq.cur_post;
	uint8_t owner = cq_lap[c->which] & 1;
	struct ibv_send_wr *bad;

	qp->sq.tail = qp->sq.head;
	for (unsigned i = 0; i < n; i += BATCH) {
		int err = ibv_post_send(qp->ibv_qp, lap_wr, &bad);

		if (err)
			fail_post("posting a lap of SENDs", err);
	}
	for (unsigned i = 0; i < n; i++) {
		struct mlx5_cqe64 *cqe = (void *)((uint8_t *)q->buf_a.buf + (size_t)i * 64);

		memset(cqe, 0, 63);
		cqe->sop_drop_qpn = htobe32((uint32_t)MLX5_OPCODE_SEND << 24 | CQ_QPN);
		cqe->srqn_uidx = htobe32(CQ_UIDX);
		cqe->wqe_counter = htobe16((uint16_t)(first + i));
		cqe->byte_cnt = htobe32(MSG);
		udma_to_device_barrier();
		cqe->op_own = MLX5_CQE_REQ << 4 | owner;
	}
	cq_lap[c->which]++;
}

static void prepare_none(const struct bench_case *c)
{
}

static void post_1(const struct bench_case *c, unsigned ops)
{
	struct ibv_send_wr *bad;

	for (unsigned i = 0; i < ops; i++) {
		int err = ibv_post_send(post_qp.qp.ibv_qp, send_wr + BATCH - 1, &bad);

		if (__builtin_expect(err, 0))
			fail_post("ibv_post_send", err);
	}
}

static void post_32(struct ibv_send_wr *list, unsigned ops)
{
	struct ibv_send_wr *bad;

	for (unsigned i = 0; i < ops; i += BATCH) {
		int err = ibv_post_send(post_qp.qp.ibv_qp, list, &bad);

		if (__builtin_expect(err, 0))
			fail_post("ibv_post_send", err);
	}
}

static void send_32(const struct bench_case *c, unsigned ops)
{
	post_32(send_wr, ops);
}

static void inline_32(const struct bench_case *c, unsigned ops)
{
	post_32(inline_wr, ops);
}

static void write_32(const struct bench_case *c, unsigned ops)
{
	post_32(write_wr, ops);
}

static void recv_32(const struct bench_case *c, unsigned ops)
{
	struct ibv_recv_wr *bad;

	for (unsigned i = 0; i < ops; i += BATCH) {
		int err = ibv_post_recv(post_qp.qp.ibv_qp, recv_wr, &bad);

		if (__builtin_expect(err, 0))
			fail_post("ibv_post_recv", err);
	}
}

static void poll_16(const struct bench_case *c, unsigned ops)
{
	struct ibv_cq *q = &cq[c->which].verbs_cq.cq;
	long sum = 0;

	for (unsigned got = 0; got < ops;) {
		int n = ibv_poll_cq(q, POLL_BATCH, wc);

		if (__builtin_expect(n != POLL_BATCH || wc[n - 1].status != IBV_WC_SUCCESS, 0)) {
			fprintf(stderr, "harness_bench: polled %d CQEs, expected %d\n", n,
				POLL_BATCH);
			exit(2);
		}
		sum += wc[n - 1].wr_id;
		got += n;
	}
	sink = sum;
}

static void poll_empty(const struct bench_case *c, unsigned ops)
{
	struct ibv_cq *q = &cq[c->which].verbs_cq.cq;

	for (unsigned i = 0; i < ops; i++) {
		int n = ibv_poll_cq(q, POLL_BATCH, wc);

		if (__builtin_expect(n != 0, 0)) {
			fprintf(stderr, "harness_bench: the empty CQ gave %d CQEs\n", n);
			exit(2);
		}
	}
}

/* --- the receive side ------------------------------------------------------------------ */

/* CQ 4 completes the receives of recv_qp[0] (its own RQ of 8192 WQEs, so a lap of 4096 is
 * posted without the overflow check failing), CQ 5 those of recv_qp[1], which receives from
 * srq[0] (8192 WQEs). srq[1] (1024 WQEs) is the SRQ the srq_recv_sge_32 case posts to. */
#define RECV_QPN_RQ 0x1235
#define RECV_UIDX_RQ 8
#define RECV_QPN_SRQ 0x1236
#define RECV_UIDX_SRQ 9
#define LOG_RQ_POLL 13
#define LOG_SRQ_POLL 13
#define LOG_SRQ_POST 10
#define SRQ_WQE_SHIFT 5
#define IMM_DATA 0x12345678u
static struct qp_ctx recv_qp[2];
static struct mlx5_srq srq[2];
static __be32 srq_dbrec[2][2] __attribute__((aligned(64)));
/* The SRQ WQE index of each receive a lap posted, in order. */
static uint16_t lap_index[1u << LOG_CQ];
/* srq_recv_sge_32: where the last chunk's posts began, and the counter then. */
static int srq_post_head;
static uint16_t srq_post_counter;

static struct mlx5_wqe_srq_next_seg *srq_wqe(struct mlx5_srq *s, int n)
{
	return (void *)((uint8_t *)s->buf.buf + ((size_t)n << s->wqe_shift));
}

/* An SRQ as mlx5_create_srq / mlx5_alloc_srq_buf lay it out: WQEs of a next segment and one
 * data segment (32 bytes), linked in order (set_srq_buf_ll), head 0, tail the last WQE, no
 * wait queue (as when the device's largest SRQ is under twice the request), the free-WQE
 * bitmap empty. */
static void make_srq(struct mlx5_srq *s, int log, uint32_t srqn, __be32 *db)
{
	int n = 1 << log;

	s->rsc.type = MLX5_RSC_TYPE_SRQ;
	s->rsc.rsn = srqn;
	s->srqn = srqn;
	s->vsrq.srq.context = &ctx_v1.ibv_ctx.context;
	s->vsrq.srq.pd = &pdom.mpd.ibv_pd;
	s->max_gs = 1;
	s->wqe_shift = SRQ_WQE_SHIFT;
	s->buf.buf = zalloc_aligned((size_t)n << SRQ_WQE_SHIFT);
	s->buf.length = (size_t)n << SRQ_WQE_SHIFT;
	s->max = n;
	s->head = 0;
	s->tail = n - 1;
	s->nwqes = n;
	s->waitq_head = -1;
	s->waitq_tail = -1;
	for (int i = 0; i < n - 1; i++)
		srq_wqe(s, i)->next_wqe_index = htobe16(i + 1);
	s->wrid = calloc(n, sizeof(uint64_t));
	s->free_wqe_bitmap = calloc((n + 8 * sizeof(long) - 1) / (8 * sizeof(long)), sizeof(long));
	if (!s->wrid || !s->free_wqe_bitmap) {
		fprintf(stderr, "harness_bench: out of memory\n");
		exit(2);
	}
	s->db = db;
	if (mlx5_spinlock_init_pd(&s->lock, &pdom.mpd.ibv_pd)) {
		fprintf(stderr, "harness_bench: spinlock init failed\n");
		exit(2);
	}
}

static void make_recv_side(void)
{
	ctx_v1.ibv_ctx.context.ops.post_srq_recv = mlx5_post_srq_recv;
	make_cq(&cq[4], &ctx_v1, cq_dbrec[4], 0x25);
	make_cq(&cq[5], &ctx_v1, cq_dbrec[5], 0x26);
	make_srq(&srq[0], LOG_SRQ_POLL, 0x31, srq_dbrec[0]);
	make_srq(&srq[1], LOG_SRQ_POST, 0x32, srq_dbrec[1]);
	make_qp(&recv_qp[0], &ctx_v1, RECV_QPN_RQ, RECV_UIDX_RQ, LOG_SQ, SQ_MAX_POST, &cq[4],
		LOG_RQ_POLL);
	make_qp(&recv_qp[1], &ctx_v1, RECV_QPN_SRQ, RECV_UIDX_SRQ, LOG_SQ, SQ_MAX_POST, &cq[5],
		LOG_RQ);
	recv_qp[1].qp.verbs_qp.qp.srq = &srq[0].vsrq.srq;
}

/* One lap of receive completions: 4096 receives posted (ibv_post_recv on the RQ, or
 * ibv_post_srq_recv on the SRQ, 32 per call), then one responder CQE per receive written as
 * the device writes it for an RC QP on InfiniBand (body first, op_own last): opcode
 * c->op (RESP_SEND, RESP_SEND_IMM or RESP_WR_IMM), the QPN in sop_drop_qpn, the QP's user
 * index in srqn_uidx (CQE version 1), the WQE's index in wqe_counter, 64 bytes in byte_cnt,
 * the immediate in imm_inval_pkey (0, the P_Key index, for a plain SEND), the sender's LID in
 * slid, no GRH. */
static void prepare_recv_cq(const struct bench_case *c)
{
	struct mlx5_cq *q = &cq[c->which];
	int on_srq = c->which == 5;
	struct mlx5_qp *qp = &recv_qp[on_srq].qp;
	unsigned n = 1u << LOG_CQ;
	uint8_t owner = cq_lap[c->which] & 1;
	struct ibv_recv_wr *bad;
	int err;

	if (on_srq) {
		struct mlx5_srq *s = &srq[0];
		int at = s->head;

		for (unsigned i = 0; i < n; i += BATCH)
			if ((err = ibv_post_srq_recv(&s->vsrq.srq, recv_wr, &bad)))
				fail_post("posting a lap of SRQ receives", err);
		/* The WQEs the head went through: their links are stable while they are posted. */
		for (unsigned i = 0; i < n; i++) {
			lap_index[i] = at;
			at = be16toh(srq_wqe(s, at)->next_wqe_index);
		}
	} else {
		unsigned first = qp->rq.head;

		for (unsigned i = 0; i < n; i += BATCH)
			if ((err = ibv_post_recv(qp->ibv_qp, recv_wr, &bad)))
				fail_post("posting a lap of receives", err);
		for (unsigned i = 0; i < n; i++)
			lap_index[i] = (uint16_t)(first + i);
	}
	for (unsigned i = 0; i < n; i++) {
		struct mlx5_cqe64 *cqe = (void *)((uint8_t *)q->buf_a.buf + (size_t)i * 64);

		memset(cqe, 0, 63);
		cqe->slid = htobe16(1);
		cqe->srqn_uidx = htobe32(on_srq ? RECV_UIDX_SRQ : RECV_UIDX_RQ);
		cqe->imm_inval_pkey = c->op == MLX5_CQE_RESP_SEND ? 0 : htobe32(IMM_DATA);
		cqe->byte_cnt = htobe32(MSG);
		cqe->sop_drop_qpn = htobe32(on_srq ? RECV_QPN_SRQ : RECV_QPN_RQ);
		cqe->wqe_counter = htobe16(lap_index[i]);
		udma_to_device_barrier();
		cqe->op_own = c->op << 4 | owner;
	}
	cq_lap[c->which]++;
}

/* The "device" consumed what the last chunk posted to srq[1] and the CQ gave the WQEs back
 * (mlx5_free_srq_wqe, as the poll of their CQEs does). */
static void prepare_srq_post(const struct bench_case *c)
{
	struct mlx5_srq *s = &srq[1];
	uint16_t posted = s->counter - srq_post_counter;
	int at = srq_post_head;

	for (unsigned i = 0; i < posted; i++) {
		int next = be16toh(srq_wqe(s, at)->next_wqe_index);

		mlx5_free_srq_wqe(s, at);
		at = next;
	}
	srq_post_head = s->head;
	srq_post_counter = s->counter;
}

static void srq_recv_32(const struct bench_case *c, unsigned ops)
{
	struct ibv_recv_wr *bad;

	for (unsigned i = 0; i < ops; i += BATCH) {
		int err = ibv_post_srq_recv(&srq[1].vsrq.srq, recv_wr, &bad);

		if (__builtin_expect(err, 0))
			fail_post("ibv_post_srq_recv", err);
	}
}

/* --- libmlx5's fastest paths: ibv_wr_* on an ibv_qp_ex, ibv_start_poll on an ibv_cq_ex --- */

static void make_fast_paths(void)
{
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	/* What a transport reads of a completion: byte_len and the immediate (receives). */
	struct ibv_cq_init_attr_ex ca = {
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM,
	};
	int err;

	if ((err = mlx5_qp_fill_wr_pfns(&post_qp.qp, &qa, NULL)))
		fail_post("mlx5_qp_fill_wr_pfns", err);
	post_qp.qp.verbs_qp.comp_mask |= VERBS_QP_EX;
	for (int k = 0; k < 6; k++) {
		/* As mlx5_create_cq_ex with IBV_CREATE_CQ_ATTR_SINGLE_THREADED when the
		 * application says it is single-threaded (the ST run). */
		if (mlx5_single_threaded)
			cq[k].flags |= MLX5_CQ_FLAGS_SINGLE_THREADED;
		cq[k].flags |= MLX5_CQ_FLAGS_EXTENDED;
		if (cq[k].verbs_cq.cq.context && (err = mlx5_cq_fill_pfns(&cq[k], &ca,
				to_mctx(cq[k].verbs_cq.cq.context))))
			fail_post("mlx5_cq_fill_pfns", err);
	}
}

static void fast_send_32(const struct bench_case *c, unsigned ops)
{
	struct ibv_qp_ex *qx = &post_qp.qp.verbs_qp.qp_ex;

	for (unsigned i = 0; i < ops; i += BATCH) {
		int err;

		ibv_wr_start(qx);
		for (int k = 0; k < BATCH; k++) {
			qx->wr_id = k;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(qx);
			ibv_wr_set_sge(qx, 0x4242, (uintptr_t)payload[k], MSG);
		}
		if (__builtin_expect((err = ibv_wr_complete(qx)), 0))
			fail_post("ibv_wr_complete", err);
	}
}

static void fast_inline_32(const struct bench_case *c, unsigned ops)
{
	struct ibv_qp_ex *qx = &post_qp.qp.verbs_qp.qp_ex;

	for (unsigned i = 0; i < ops; i += BATCH) {
		int err;

		ibv_wr_start(qx);
		for (int k = 0; k < BATCH; k++) {
			qx->wr_id = k;
			qx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
			ibv_wr_send(qx);
			ibv_wr_set_inline_data(qx, payload[k], MSG);
		}
		if (__builtin_expect((err = ibv_wr_complete(qx)), 0))
			fail_post("ibv_wr_complete", err);
	}
}

static void fast_write_32(const struct bench_case *c, unsigned ops)
{
	struct ibv_qp_ex *qx = &post_qp.qp.verbs_qp.qp_ex;

	for (unsigned i = 0; i < ops; i += BATCH) {
		int err;

		ibv_wr_start(qx);
		for (int k = 0; k < BATCH; k++) {
			qx->wr_id = k;
			qx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_rdma_write(qx, 0x5151, 0x7f0000001000ull + (uint64_t)k * MSG);
			ibv_wr_set_sge(qx, 0x4242, (uintptr_t)payload[k], MSG);
		}
		if (__builtin_expect((err = ibv_wr_complete(qx)), 0))
			fail_post("ibv_wr_complete", err);
	}
}

/* ibv_start_poll, 15 ibv_next_poll, ibv_end_poll per 16 CQEs, reading what ibv_poll_cq
 * would have given a transport: wr_id, status, the opcode and, of a receive, byte_len and
 * (with immediate) the immediate. */
static void fast_poll_16(const struct bench_case *c, unsigned ops)
{
	struct ibv_cq_ex *q = &cq[c->which].verbs_cq.cq_ex;
	struct ibv_poll_cq_attr attr = {};
	int recv = c->which >= 4, imm = recv && c->op != MLX5_CQE_RESP_SEND;
	long sum = 0;

	for (unsigned got = 0; got < ops; got += POLL_BATCH) {
		for (int k = 0; k < POLL_BATCH; k++) {
			int err = k ? ibv_next_poll(q) : ibv_start_poll(q, &attr);

			if (__builtin_expect(err || q->status != IBV_WC_SUCCESS, 0)) {
				fprintf(stderr, "harness_bench: CQE %d of 16: %d, status %d\n", k,
					err, err ? 0 : q->status);
				exit(2);
			}
			sum += q->wr_id + ibv_wc_read_opcode(q);
			if (recv) {
				sum += ibv_wc_read_byte_len(q);
				if (imm)
					sum += ibv_wc_read_imm_data(q);
			}
		}
		ibv_end_poll(q);
	}
	sink = sum;
}

static const struct bench_case cases[] = {
	{ "send_sge_1", SQ_MAX_POST, prepare_sq, post_1, 0 },
	{ "send_sge_32", SQ_MAX_POST, prepare_sq, send_32, 0 },
	{ "send_inline64_32", SQ_MAX_POST, prepare_sq, inline_32, 0 },
	{ "write_sge_32", SQ_MAX_POST, prepare_sq, write_32, 0 },
	{ "recv_sge_32", 1u << LOG_RQ, prepare_rq, recv_32, 0 },
	{ "poll_16_v1", 1u << LOG_CQ, prepare_cq, poll_16, 0 },
	{ "poll_empty_v1", 1u << LOG_CQ, prepare_none, poll_empty, 2 },
	{ "poll_16_v0", 1u << LOG_CQ, prepare_cq, poll_16, 1 },
	{ "poll_empty_v0", 1u << LOG_CQ, prepare_none, poll_empty, 3 },
	{ "srq_recv_sge_32", 1u << (LOG_SRQ_POST - 1), prepare_srq_post, srq_recv_32, 0 },
	{ "poll_recv_16_rq_send", 1u << LOG_CQ, prepare_recv_cq, poll_16, 4, MLX5_CQE_RESP_SEND },
	{ "poll_recv_16_rq_send_imm", 1u << LOG_CQ, prepare_recv_cq, poll_16, 4,
	  MLX5_CQE_RESP_SEND_IMM },
	{ "poll_recv_16_rq_write_imm", 1u << LOG_CQ, prepare_recv_cq, poll_16, 4,
	  MLX5_CQE_RESP_WR_IMM },
	{ "poll_recv_16_srq_send", 1u << LOG_CQ, prepare_recv_cq, poll_16, 5, MLX5_CQE_RESP_SEND },
	{ "poll_recv_16_srq_send_imm", 1u << LOG_CQ, prepare_recv_cq, poll_16, 5,
	  MLX5_CQE_RESP_SEND_IMM },
	{ "poll_recv_16_srq_write_imm", 1u << LOG_CQ, prepare_recv_cq, poll_16, 5,
	  MLX5_CQE_RESP_WR_IMM },
	{ "fast_send_sge_32", SQ_MAX_POST, prepare_sq, fast_send_32, 0 },
	{ "fast_send_inline64_32", SQ_MAX_POST, prepare_sq, fast_inline_32, 0 },
	{ "fast_write_sge_32", SQ_MAX_POST, prepare_sq, fast_write_32, 0 },
	{ "fast_poll_16_v1", 1u << LOG_CQ, prepare_cq, fast_poll_16, 0 },
	{ "fast_poll_recv_16_rq_send", 1u << LOG_CQ, prepare_recv_cq, fast_poll_16, 4,
	  MLX5_CQE_RESP_SEND },
	{ "fast_poll_recv_16_rq_send_imm", 1u << LOG_CQ, prepare_recv_cq, fast_poll_16, 4,
	  MLX5_CQE_RESP_SEND_IMM },
	{ "fast_poll_recv_16_rq_write_imm", 1u << LOG_CQ, prepare_recv_cq, fast_poll_16, 4,
	  MLX5_CQE_RESP_WR_IMM },
	{ "fast_poll_recv_16_srq_send", 1u << LOG_CQ, prepare_recv_cq, fast_poll_16, 5,
	  MLX5_CQE_RESP_SEND },
	{ "fast_poll_recv_16_srq_send_imm", 1u << LOG_CQ, prepare_recv_cq, fast_poll_16, 5,
	  MLX5_CQE_RESP_SEND_IMM },
	{ "fast_poll_recv_16_srq_write_imm", 1u << LOG_CQ, prepare_recv_cq, fast_poll_16, 5,
	  MLX5_CQE_RESP_WR_IMM },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* The timed region, and the one function callgrind collects (--toggle-collect=bench_timed):
 * nothing but the case's loop of provider calls runs inside it. */
__attribute__((noinline)) void bench_timed(const struct bench_case *c, unsigned ops)
{
	c->body(c, ops);
	/* No tail call: bench_timed stays on the stack while the case runs. */
	__asm__ volatile("" ::: "memory");
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + t.tv_nsec;
}

/* One run of at least `ops` operations, in whole chunks; ns per operation. `*done` gets
 * the operations run. */
static double run(const struct bench_case *c, unsigned long long ops, unsigned long long *out)
{
	uint64_t total = 0;
	unsigned long long done = 0;

	while (done < ops) {
		uint64_t t0;

		c->prepare(c);
		t0 = now_ns();
		bench_timed(c, c->chunk);
		total += now_ns() - t0;
		done += c->chunk;
	}
	*out = done;
	return (double)total / (double)done;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static unsigned long long parse_ops(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	if (*end || v == 0) {
		fprintf(stderr, "harness_bench: N must be a positive number, not '%s'\n", s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	const char *st = getenv("MLX5_SINGLE_THREADED");
	unsigned long long ops = 10000000;
	const struct bench_case *only = NULL;

	/* As mlx5.c single_threaded_app() reads it when a context is allocated. */
	mlx5_single_threaded = st && !strcmp(st, "1");
	dev.page_size = 4096;
	make_context(&ctx_v1, 1);
	make_context(&ctx_v0, 0);
	make_cq(&cq[0], &ctx_v1, cq_dbrec[0], 0x21);
	make_cq(&cq[1], &ctx_v0, cq_dbrec[1], 0x22);
	make_cq(&cq[2], &ctx_v1, cq_dbrec[2], 0x23);
	make_cq(&cq[3], &ctx_v0, cq_dbrec[3], 0x24);
	/* An empty CQ as a polled CQ is between bursts: every CQE is the previous lap's
	 * (software's owner bit, 0) and the consumer index is on the next lap (expects 1). */
	for (int k = 2; k < 4; k++) {
		for (size_t i = 0; i < (size_t)1 << LOG_CQ; i++)
			((struct mlx5_cqe64 *)((uint8_t *)cq[k].buf_a.buf + i * 64))->op_own =
				MLX5_CQE_REQ << 4;
		cq[k].cons_index = 1u << LOG_CQ;
	}
	make_qp(&post_qp, &ctx_v1, 0x99, 0x99 /* its own user index; never polled */, LOG_SQ,
		SQ_MAX_POST, &cq[0], LOG_RQ);
	make_qp(&cq_qp[0], &ctx_v1, CQ_QPN, CQ_UIDX, LOG_CQ, 1u << LOG_CQ, &cq[0], LOG_RQ);
	make_qp(&cq_qp[1], &ctx_v0, CQ_QPN, CQ_QPN, LOG_CQ, 1u << LOG_CQ, &cq[1], LOG_RQ);
	make_recv_side();
	make_fast_paths();
	make_wrs();

	if (argc == 2 && !strcmp(argv[1], "list")) {
		for (size_t i = 0; i < NCASES; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	if (argc == 3) {
		for (size_t i = 0; i < NCASES; i++)
			if (!strcmp(argv[1], cases[i].name))
				only = &cases[i];
		if (!only) {
			fprintf(stderr, "harness_bench: no case '%s' (harness_bench list)\n",
				argv[1]);
			return 2;
		}
		ops = parse_ops(argv[2]);
	} else if (argc == 2) {
		ops = parse_ops(argv[1]);
	} else if (argc > 3) {
		fprintf(stderr, "usage: harness_bench [N] | harness_bench CASE N | harness_bench list\n");
		return 2;
	}

	printf("# libmlx5 (rdma-core providers/mlx5) on plain memory: 8-byte doorbell (shut_up_bf), "
	       "locks %s, CQE version 1 = mlx5_poll_cq_v1, 0 = mlx5_poll_cq\n",
	       mlx5_single_threaded ? "single-threaded (MLX5_SINGLE_THREADED=1)" :
				      "pthread spinlocks (libmlx5's default)");
	if (only) {
		/* Warm-up outside bench_timed: lazy symbol binding, first touch of the rings. */
		only->prepare(only);
		only->body(only, only->chunk);
		unsigned long long done;
		double t = run(only, ops, &done);

		printf("case %s ns %.2f ops %llu\n", only->name, t, done);
		return 0;
	}
	double ns[NCASES][RUNS];
	unsigned long long done[NCASES];

	for (size_t i = 0; i < NCASES; i++) {
		cases[i].prepare(&cases[i]);
		cases[i].body(&cases[i], cases[i].chunk);
	}
	for (int r = 0; r < RUNS; r++)
		for (size_t i = 0; i < NCASES; i++)
			ns[i][r] = run(&cases[i], ops, &done[i]);
	for (size_t i = 0; i < NCASES; i++) {
		qsort(ns[i], RUNS, sizeof(double), cmp_double);
		printf("case %s ns %.2f ops %llu\n", cases[i].name, ns[i][RUNS / 2], done[i]);
	}
	return 0;
}
