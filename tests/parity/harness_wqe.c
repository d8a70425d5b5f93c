/* The WQE side of uhca's libmlx5 parity test (tests/parity_wqe.rs drives it).
 *
 * libmlx5's objects (mlx5_context, mlx5_qp, mlx5_srq, mlx5_cq, mlx5_bf, address handles)
 * are built in plain memory with the geometry the test gives (the geometry of uhca's own
 * objects), and the provider's real entry points are called on them: mlx5_post_send,
 * mlx5_post_recv, mlx5_post_srq_recv, mlx5_alloc_srq_buf, mlx5_create_ah, mlx5_poll_cq,
 * mlx5_arm_cq, mlx5_cq_event. The doorbell registers (bf->reg, the CQ UAR) and the doorbell
 * records are ordinary memory, so what the provider wrote can be printed: WQE bytes,
 * doorbell-record words, the doorbell register's offset and value.
 *
 * BlueFlame: the context has shut_up_bf set (what MLX5_SHUT_UP_BF=1 does) with a 256-byte
 * BlueFlame buffer size, as on a device with BlueFlame registers: libmlx5 then rings the
 * 8-byte doorbell for every batch and alternates between the register's two buffers, which
 * is what uhca does.
 *
 * Protocol: one request per line on stdin, words separated by spaces, numbers in C syntax
 * (0x... for hex), byte strings as plain hex. Every request is answered by zero or more
 * result lines and then "ok", or by "err <why>". Requests:
 *
 *   link ib|eth                       port 1's link layer (for mlx5_create_ah)
 *   qp SLOT rc|uc|ud QPN LOG_SQ MAX_GS MAX_INLINE SIG_ALL LOG_RQ LOG_RQ_STRIDE
 *                                     a QP (LOG_SQ or LOG_RQ -1: no such queue); counters 0
 *   ah SLOT ib DLID SL PATH_BITS RATE GLOBAL SGID_INDEX FLOW_LABEL TCLASS HOP_LIMIT DGID
 *   ah SLOT eth SL RATE SGID_INDEX FLOW_LABEL TCLASS HOP_LIMIT DGID DMAC RANDOM
 *                                     mlx5_create_ah -> "av HEX48"; RANDOM is what
 *                                     get_random() returns (the RoCE UDP source port of a
 *                                     zero flow label is drawn from it)
 *   wr OPCODE FLAGS IMM RADDR RKEY SWAP COMPARE_ADD AH_SLOT REMOTE_QPN QKEY INLINE NSGE
 *      [ADDR LEN LKEY]...             queues an ibv_send_wr (INLINE: "x" and hex bytes,
 *                                     which become the one gather entry, or "-"; with
 *                                     inline data NSGE is 0 and FLAGS has IBV_SEND_INLINE)
 *   post SLOT                         mlx5_post_send of the queued list -> "ret ERR BAD",
 *                                     "wqe INDEX HEX" per WQE posted (its DS count of
 *                                     16-byte units, across the ring's end), "dbrec HEX8",
 *                                     "db OFFSET HEX8" if the doorbell was rung
 *   rwr NSGE [ADDR LEN LKEY]...       queues an ibv_recv_wr
 *   postrecv SLOT                     mlx5_post_recv -> "ret", "wqe INDEX HEX" per WQE
 *                                     (its stride), "dbrec HEX8"
 *   srq SLOT MAX_WR MAX_GS            mlx5_alloc_srq_buf -> "srq NWQES WQE_SHIFT MAX_GS"
 *   postsrq SLOT                      mlx5_post_srq_recv -> "ret", "buf HEX" (the whole
 *                                     SRQ buffer), "dbrec HEX4"
 *   freesrq SLOT INDEX                mlx5_free_srq_wqe (what a receive completion does)
 *   cq SLOT CQN LOG_CQE               a CQ of 64-byte CQEs, consumer index 0, arm_sn 0
 *   cqe SLOT HEX64                    writes a CQE at the CQ's next producer position
 *   poll SLOT N                       mlx5_poll_cq -> "polled N", "dbrec HEX8"
 *   arm SLOT SOLICITED                mlx5_arm_cq -> "dbrec HEX8", "db OFFSET HEX8"
 *   event SLOT                        mlx5_cq_event (a completion event was read)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlx5.h"
#include "wqe.h"

#define SLOTS 8
#define MAX_WRS 256
#define MAX_SGES 64
#define BF_BUF_SIZE 256
#define LINE 1 << 16

static struct mlx5_device dev;
static struct mlx5_context ctx;
static struct ibv_pd pd;
/* Each QP's send doorbell register (a BlueFlame register's two buffers), dedicated to it
 * as libmlx5 dedicates one to a low-latency QP: libmlx5 alternates the buffers per
 * register, uhca per QP. */
static uint8_t bf_reg[SLOTS][2 * BF_BUF_SIZE] __attribute__((aligned(64)));
static struct mlx5_bf bf[SLOTS];
/* The CQ's UAR page. */
static uint8_t cq_uar[4096] __attribute__((aligned(64)));

static struct mlx5_qp *qps[SLOTS];
static struct mlx5_ah *ahs[SLOTS];
static struct mlx5_srq *srqs[SLOTS];
static struct mlx5_cq *cqs[SLOTS];
static uint32_t cq_pi[SLOTS];
static __be32 *qp_dbrec[SLOTS];

static struct ibv_send_wr swr[MAX_WRS];
static struct ibv_sge ssge[MAX_WRS][MAX_SGES];
static uint8_t sinline[MAX_WRS][1024];
static int nswr;
static struct ibv_recv_wr rwr[MAX_WRS];
static struct ibv_sge rsge[MAX_WRS][MAX_SGES];
static int nrwr;

/* get_random() (util/) feeds the RoCE UDP source port of an AH without a flow label. */
static unsigned int next_random;
unsigned int get_random(void)
{
	return next_random;
}

/* mlx5_create_ah asks for the GID's type on Ethernet ports: a RoCEv2 entry. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type)
{
	*type = IBV_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

/* ... and resolves the next hop's MAC: the one the request gave. */
static uint8_t next_dmac[6];
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[6], uint16_t *vid)
{
	memcpy(eth_mac, next_dmac, 6);
	if (vid)
		*vid = 0xffff;
	return 0;
}

/* mlx5_alloc_srq_buf's buffer: plain, zeroed, page-aligned memory. */
void mlx5_get_alloc_type(struct mlx5_context *context, struct ibv_pd *p, const char *component,
			 enum mlx5_alloc_type *alloc_type, enum mlx5_alloc_type default_alloc_type)
{
	*alloc_type = MLX5_ALLOC_TYPE_ANON;
}

int mlx5_alloc_prefered_buf(struct mlx5_context *mctx, struct mlx5_buf *buf, size_t size,
			    int page_size, enum mlx5_alloc_type alloc_type, const char *component)
{
	if (posix_memalign(&buf->buf, page_size, size))
		return -1;
	memset(buf->buf, 0, size);
	buf->length = size;
	buf->type = MLX5_ALLOC_TYPE_ANON;
	return 0;
}

static char *tok(void)
{
	return strtok(NULL, " \t\r\n");
}

static int want(long long *v)
{
	char *t = tok();
	char *end;

	if (!t)
		return -1;
	/* strtoull: 64-bit addresses and operands above LLONG_MAX come through whole, and
	 * "-1" still reads as -1. */
	errno = 0;
	*v = (long long)strtoull(t, &end, 0);
	return *end || errno ? -1 : 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes hex into out (at most max bytes); the byte count, or -1. */
static int unhex(const char *s, uint8_t *out, int max)
{
	int n = strlen(s);

	if (n % 2 || n / 2 > max)
		return -1;
	for (int i = 0; i < n / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i] = hi << 4 | lo;
	}
	return n / 2;
}

static void put_hex(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int slot(long long s)
{
	return s >= 0 && s < SLOTS ? (int)s : -1;
}

static const char *do_link(void)
{
	char *t = tok();

	if (!t)
		return "link ib|eth";
	if (!strcmp(t, "ib"))
		ctx.cached_link_layer[0] = IBV_LINK_LAYER_INFINIBAND;
	else if (!strcmp(t, "eth"))
		ctx.cached_link_layer[0] = IBV_LINK_LAYER_ETHERNET;
	else
		return "link ib|eth";
	return NULL;
}

/* A dummy CQ for QPs (the send path names the send CQ only when the queue overflows,
 * which the test never lets happen: max_post is the whole ring). */
static struct mlx5_cq dummy_cq;

static const char *do_qp(void)
{
	long long s, qpn, log_sq, max_gs, max_inline, sig_all, log_rq, log_rq_stride;
	char *type = NULL;
	struct mlx5_qp *qp;
	size_t rq_bytes, sq_bytes;
	int i;

	if (want(&s) || !(type = tok()) || want(&qpn) || want(&log_sq) || want(&max_gs) ||
	    want(&max_inline) || want(&sig_all) || want(&log_rq) || want(&log_rq_stride) ||
	    (i = slot(s)) < 0)
		return "qp SLOT rc|uc|ud QPN LOG_SQ MAX_GS MAX_INLINE SIG_ALL LOG_RQ LOG_RQ_STRIDE";
	qp = calloc(1, sizeof(*qp));
	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->ibv_qp->context = &ctx.ibv_ctx.context;
	qp->ibv_qp->qp_num = qpn;
	qp->ibv_qp->state = IBV_QPS_RTS;
	qp->ibv_qp->send_cq = &dummy_cq.verbs_cq.cq;
	qp->ibv_qp->recv_cq = &dummy_cq.verbs_cq.cq;
	if (!strcmp(type, "rc"))
		qp->ibv_qp->qp_type = IBV_QPT_RC;
	else if (!strcmp(type, "uc"))
		qp->ibv_qp->qp_type = IBV_QPT_UC;
	else if (!strcmp(type, "ud"))
		qp->ibv_qp->qp_type = IBV_QPT_UD;
	else
		return "qp type: rc, uc or ud";
	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = qpn;
	rq_bytes = log_rq < 0 ? 0 : (size_t)1 << (log_rq + log_rq_stride);
	sq_bytes = log_sq < 0 ? 0 : (size_t)MLX5_SEND_WQE_BB << log_sq;
	/* The layout libmlx5 and uhca share: RQ first, SQ after it. */
	if (posix_memalign(&qp->buf.buf, 4096, rq_bytes + sq_bytes + 64))
		return "out of memory";
	memset(qp->buf.buf, 0, rq_bytes + sq_bytes + 64);
	qp->buf.length = rq_bytes + sq_bytes;
	memset(&bf[i], 0, sizeof(bf[i]));
	bf[i].reg = bf_reg[i];
	bf[i].buf_size = BF_BUF_SIZE;
	bf[i].uuarn = 1;
	qp->bf = &bf[i];
	qp->db = calloc(2, sizeof(__be32));
	qp_dbrec[i] = qp->db;
	qp->max_inline_data = max_inline;
	qp->atomics_enabled = 1;
	qp->sq_signal_bits = sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	if (log_rq >= 0) {
		qp->rq.offset = 0;
		qp->rq.wqe_cnt = 1u << log_rq;
		/* As for the SQ: the test keeps uhca's RQ from overflowing. */
		qp->rq.max_post = 1u << 30;
		qp->rq.wqe_shift = log_rq_stride;
		qp->rq.max_gs = (1 << log_rq_stride) / sizeof(struct mlx5_wqe_data_seg);
		qp->rq.qp_state_max_gs = qp->rq.max_gs;
		qp->rq.wrid = calloc(qp->rq.wqe_cnt, sizeof(uint64_t));
	}
	if (log_sq >= 0) {
		qp->sq.offset = rq_bytes;
		qp->sq.wqe_cnt = 1u << log_sq;
		/* Posts never overflow here: the test keeps uhca's ring from filling. */
		qp->sq.max_post = 1u << 30;
		qp->sq.wqe_shift = MLX5_SEND_WQE_SHIFT;
		qp->sq.max_gs = max_gs;
		qp->sq.qp_state_max_gs = max_gs;
		qp->sq_start = qp->buf.buf + qp->sq.offset;
		qp->sq.qend = qp->sq_start + sq_bytes;
		qp->sq.wrid = calloc(qp->sq.wqe_cnt, sizeof(uint64_t));
		qp->sq.wqe_head = calloc(qp->sq.wqe_cnt, sizeof(unsigned));
		qp->sq.wr_data = calloc(qp->sq.wqe_cnt, sizeof(uint32_t));
	}
	if (mlx5_store_qp(&ctx, qpn, qp))
		return "mlx5_store_qp failed";
	qps[i] = qp;
	return NULL;
}

static const char *do_ah(void)
{
	long long s, dlid = 0, sl, bits = 0, rate, global = 1, sgid, fl, tclass, hop, rnd = 0;
	char *kind = NULL, *dgid = NULL, *dmac = NULL;
	struct ibv_ah_attr attr = {};
	struct ibv_ah *ah;
	int i;

	if (want(&s) || (i = slot(s)) < 0 || !(kind = tok()))
		return "ah SLOT ib|eth ...";
	if (!strcmp(kind, "ib")) {
		if (want(&dlid) || want(&sl) || want(&bits) || want(&rate) || want(&global) ||
		    want(&sgid) || want(&fl) || want(&tclass) || want(&hop) || !(dgid = tok()))
			return "ah SLOT ib DLID SL PATH_BITS RATE GLOBAL SGID FL TCLASS HOP DGID";
	} else {
		if (want(&sl) || want(&rate) || want(&sgid) || want(&fl) || want(&tclass) ||
		    want(&hop) || !(dgid = tok()) || !(dmac = tok()) || want(&rnd))
			return "ah SLOT eth SL RATE SGID FL TCLASS HOP DGID DMAC RANDOM";
		if (unhex(dmac, next_dmac, 6) != 6)
			return "DMAC: 12 hex digits";
	}
	attr.dlid = dlid;
	attr.sl = sl;
	attr.src_path_bits = bits;
	attr.static_rate = rate;
	attr.is_global = global;
	attr.port_num = 1;
	attr.grh.sgid_index = sgid;
	attr.grh.flow_label = fl;
	attr.grh.traffic_class = tclass;
	attr.grh.hop_limit = hop;
	if (unhex(dgid, attr.grh.dgid.raw, 16) != 16)
		return "DGID: 32 hex digits";
	next_random = rnd;
	ah = mlx5_create_ah(&pd, &attr);
	if (!ah)
		return "mlx5_create_ah refused the attributes";
	ahs[i] = to_mah(ah);
	printf("av ");
	put_hex(&ahs[i]->av, sizeof(ahs[i]->av));
	printf("\n");
	return NULL;
}

static const char *do_wr(void)
{
	long long op, flags, imm, raddr, rkey, swap, cmp, ah, rqpn, qkey, nsge;
	char *inl;
	struct ibv_send_wr *w;
	int n = nswr;

	if (n == MAX_WRS)
		return "too many queued work requests";
	w = &swr[n];
	memset(w, 0, sizeof(*w));
	if (want(&op) || want(&flags) || want(&imm) || want(&raddr) || want(&rkey) ||
	    want(&swap) || want(&cmp) || want(&ah) || want(&rqpn) || want(&qkey) ||
	    !(inl = tok()) || want(&nsge) || nsge < 0 || nsge > MAX_SGES)
		return "wr OPCODE FLAGS IMM RADDR RKEY SWAP COMPARE_ADD AH REMOTE_QPN QKEY INLINE "
		       "NSGE [ADDR LEN LKEY]...";
	w->wr_id = n;
	w->opcode = op;
	w->send_flags = flags;
	w->imm_data = htobe32((uint32_t)imm);
	w->sg_list = ssge[n];
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w->wr.atomic.remote_addr = raddr;
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.swap = swap;
		w->wr.atomic.compare_add = cmp;
	} else {
		w->wr.rdma.remote_addr = raddr;
		w->wr.rdma.rkey = rkey;
	}
	if (ah >= 0) {
		if (slot(ah) < 0 || !ahs[ah])
			return "no such AH";
		/* The UD fields share a union with rdma/atomic: set them last. */
		w->wr.ud.ah = &ahs[ah]->ibv_ah;
		w->wr.ud.remote_qpn = rqpn;
		w->wr.ud.remote_qkey = qkey;
	}
	if (inl[0] == 'x') {
		int len = unhex(inl + 1, sinline[n], sizeof(sinline[n]));

		if (len < 0)
			return "INLINE: hex bytes (at most 1024)";
		ssge[n][0].addr = (uintptr_t)sinline[n];
		ssge[n][0].length = len;
		w->num_sge = 1;
	} else {
		for (int i = 0; i < nsge; i++) {
			long long a, l, k;

			if (want(&a) || want(&l) || want(&k))
				return "SGE: ADDR LEN LKEY";
			ssge[n][i].addr = a;
			ssge[n][i].length = l;
			ssge[n][i].lkey = k;
		}
		w->num_sge = nsge;
	}
	if (n > 0)
		swr[n - 1].next = w;
	nswr++;
	return NULL;
}

/* Prints the WQE that starts at WQEBB `idx`: its DS count of 16-byte units, wrapping. */
static unsigned print_send_wqe(struct mlx5_qp *qp, unsigned cur)
{
	unsigned cnt = qp->sq.wqe_cnt;
	uint8_t *start = qp->sq_start;
	size_t ring = (size_t)cnt * MLX5_SEND_WQE_BB;
	size_t at = (size_t)(cur & (cnt - 1)) * MLX5_SEND_WQE_BB;
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)(start + at);
	unsigned ds = be32toh(ctrl->qpn_ds) & 0x3f;

	printf("wqe %u ", cur & 0xffff);
	for (unsigned i = 0; i < ds * 16; i++)
		printf("%02x", start[(at + i) % ring]);
	printf("\n");
	return (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
}

static const char *do_post(void)
{
	long long s;
	struct mlx5_qp *qp;
	struct ibv_send_wr *bad = NULL;
	unsigned before, cur, offset;
	int err, i;

	if (want(&s) || (i = slot(s)) < 0 || !(qp = qps[i]))
		return "post SLOT (a QP)";
	before = qp->sq.cur_post;
	offset = bf[i].offset;
	memset(bf_reg[i], 0, sizeof(bf_reg[i]));
	err = mlx5_post_send(qp->ibv_qp, nswr ? swr : NULL, &bad);
	printf("ret %d %d\n", err, bad ? (int)(bad - swr) : -1);
	for (cur = before; cur != qp->sq.cur_post;)
		cur += print_send_wqe(qp, cur);
	printf("dbrec ");
	put_hex(qp_dbrec[i], 8);
	printf("\n");
	if (qp->sq.cur_post != before) {
		printf("db %u ", offset);
		put_hex(bf_reg[i] + offset, 8);
		printf("\n");
	}
	nswr = 0;
	return NULL;
}

static const char *do_rwr(void)
{
	long long nsge;
	struct ibv_recv_wr *w;
	int n = nrwr;

	if (n == MAX_WRS)
		return "too many queued receive requests";
	if (want(&nsge) || nsge < 0 || nsge > MAX_SGES)
		return "rwr NSGE [ADDR LEN LKEY]...";
	w = &rwr[n];
	memset(w, 0, sizeof(*w));
	w->wr_id = n;
	w->sg_list = rsge[n];
	w->num_sge = nsge;
	for (int i = 0; i < nsge; i++) {
		long long a, l, k;

		if (want(&a) || want(&l) || want(&k))
			return "SGE: ADDR LEN LKEY";
		rsge[n][i].addr = a;
		rsge[n][i].length = l;
		rsge[n][i].lkey = k;
	}
	if (n > 0)
		rwr[n - 1].next = w;
	nrwr++;
	return NULL;
}

static const char *do_postrecv(void)
{
	long long s;
	struct mlx5_qp *qp;
	struct ibv_recv_wr *bad = NULL;
	unsigned before;
	int err, i;

	if (want(&s) || (i = slot(s)) < 0 || !(qp = qps[i]) || !qp->rq.wqe_cnt)
		return "postrecv SLOT (a QP with an RQ)";
	before = qp->rq.head;
	err = mlx5_post_recv(qp->ibv_qp, nrwr ? rwr : NULL, &bad);
	printf("ret %d %d\n", err, bad ? (int)(bad - rwr) : -1);
	for (unsigned h = before; h != qp->rq.head; h++) {
		unsigned idx = h & (qp->rq.wqe_cnt - 1);

		printf("wqe %u ", h & 0xffff);
		put_hex((uint8_t *)qp->buf.buf + qp->rq.offset + ((size_t)idx << qp->rq.wqe_shift),
			(size_t)1 << qp->rq.wqe_shift);
		printf("\n");
	}
	printf("dbrec ");
	put_hex(qp_dbrec[i], 8);
	printf("\n");
	nrwr = 0;
	return NULL;
}

static const char *do_srq(void)
{
	long long s, max_wr, max_gs;
	struct mlx5_srq *srq;
	int i;

	if (want(&s) || (i = slot(s)) < 0 || want(&max_wr) || want(&max_gs))
		return "srq SLOT MAX_WR MAX_GS";
	srq = calloc(1, sizeof(*srq));
	srq->max_gs = max_gs;
	srq->vsrq.srq.context = &ctx.ibv_ctx.context;
	/* A device limit that leaves out libmlx5's wait queue (for ODP page faults), so the
	 * ring has the requested size as uhca's has. */
	ctx.max_srq_recv_wr = max_wr * 2;
	if (mlx5_alloc_srq_buf(&ctx.ibv_ctx.context, srq, max_wr, &pd))
		return "mlx5_alloc_srq_buf failed";
	srq->db = calloc(1, sizeof(__be32));
	srqs[i] = srq;
	printf("srq %d %d %d\n", srq->max, srq->wqe_shift, srq->max_gs);
	return NULL;
}

static const char *do_postsrq(void)
{
	long long s;
	struct mlx5_srq *srq;
	struct ibv_recv_wr *bad = NULL;
	int err, i;

	if (want(&s) || (i = slot(s)) < 0 || !(srq = srqs[i]))
		return "postsrq SLOT (an SRQ)";
	err = mlx5_post_srq_recv(&srq->vsrq.srq, nrwr ? rwr : NULL, &bad);
	printf("ret %d %d\n", err, bad ? (int)(bad - rwr) : -1);
	printf("buf ");
	put_hex(srq->buf.buf, (size_t)srq->max << srq->wqe_shift);
	printf("\ndbrec ");
	put_hex(srq->db, 4);
	printf("\n");
	nrwr = 0;
	return NULL;
}

static const char *do_freesrq(void)
{
	long long s, idx;
	int i;

	if (want(&s) || (i = slot(s)) < 0 || !srqs[i] || want(&idx) || idx < 0 ||
	    idx >= srqs[i]->max)
		return "freesrq SLOT INDEX";
	mlx5_free_srq_wqe(srqs[i], idx);
	return NULL;
}

static const char *do_cq(void)
{
	long long s, cqn, log_cqe;
	struct mlx5_cq *cq;
	size_t bytes;
	int i;

	if (want(&s) || (i = slot(s)) < 0 || want(&cqn) || want(&log_cqe) || log_cqe > 16)
		return "cq SLOT CQN LOG_CQE";
	cq = calloc(1, sizeof(*cq));
	bytes = (size_t)64 << log_cqe;
	if (posix_memalign(&cq->buf_a.buf, 4096, bytes))
		return "out of memory";
	/* CQEs start invalid and in hardware ownership, as the provider initialises them. */
	for (size_t o = 0; o < bytes; o += 64) {
		memset((uint8_t *)cq->buf_a.buf + o, 0, 64);
		((struct mlx5_cqe64 *)((uint8_t *)cq->buf_a.buf + o))->op_own =
			MLX5_CQE_INVALID << 4 | MLX5_CQE_OWNER_MASK;
	}
	cq->buf_a.length = bytes;
	cq->active_buf = &cq->buf_a;
	cq->cqe_sz = 64;
	cq->cqn = cqn;
	cq->verbs_cq.cq.context = &ctx.ibv_ctx.context;
	cq->verbs_cq.cq.cqe = (1 << log_cqe) - 1;
	cq->dbrec = calloc(2, sizeof(__be32));
	cqs[i] = cq;
	cq_pi[i] = 0;
	return NULL;
}

static const char *do_cqe(void)
{
	long long s;
	char *hex;
	struct mlx5_cq *cq;
	uint8_t cqe[64];
	int i, n;

	if (want(&s) || (i = slot(s)) < 0 || !(cq = cqs[i]) || !(hex = tok()) ||
	    unhex(hex, cqe, 64) != 64)
		return "cqe SLOT HEX64";
	n = cq->verbs_cq.cq.cqe + 1;
	/* Body first, op_own (with the owner bit) last, as the device writes it. */
	memcpy((uint8_t *)cq->buf_a.buf + (size_t)(cq_pi[i] & (n - 1)) * 64, cqe, 63);
	udma_to_device_barrier();
	((uint8_t *)cq->buf_a.buf)[(size_t)(cq_pi[i] & (n - 1)) * 64 + 63] = cqe[63];
	cq_pi[i]++;
	return NULL;
}

static const char *do_poll(void)
{
	long long s, n;
	struct mlx5_cq *cq;
	struct ibv_wc wc[64];
	int i, got;

	if (want(&s) || (i = slot(s)) < 0 || !(cq = cqs[i]) || want(&n) || n < 0 || n > 64)
		return "poll SLOT N (at most 64)";
	got = mlx5_poll_cq(&cq->verbs_cq.cq, n, wc);
	printf("polled %d\ndbrec ", got);
	put_hex(cq->dbrec, 8);
	printf("\n");
	return NULL;
}

static const char *do_arm(void)
{
	long long s, sol;
	struct mlx5_cq *cq;
	int i;

	if (want(&s) || (i = slot(s)) < 0 || !(cq = cqs[i]) || want(&sol))
		return "arm SLOT SOLICITED";
	memset(cq_uar, 0, sizeof(cq_uar));
	mlx5_arm_cq(&cq->verbs_cq.cq, sol);
	printf("dbrec ");
	put_hex(cq->dbrec, 8);
	printf("\ndb %d ", MLX5_CQ_DOORBELL);
	put_hex(cq_uar + MLX5_CQ_DOORBELL, 8);
	printf("\n");
	return NULL;
}

static const char *do_event(void)
{
	long long s;
	int i;

	if (want(&s) || (i = slot(s)) < 0 || !cqs[i])
		return "event SLOT";
	mlx5_cq_event(&cqs[i]->verbs_cq.cq);
	return NULL;
}

int main(void)
{
	static char line[LINE];

	dev.page_size = 4096;
	ctx.ibv_ctx.context.device = &dev.verbs_dev.device;
	ctx.num_ports = 1;
	ctx.cached_link_layer[0] = IBV_LINK_LAYER_INFINIBAND;
	/* MLX5_SHUT_UP_BF=1: never copy WQEs to the BlueFlame buffer. */
	ctx.shut_up_bf = 1;
	ctx.cq_uar_reg = cq_uar;
	ctx.max_recv_wr = 1 << 15;
	ctx.max_srq_recv_wr = 1 << 15;
	ctx.dbg_fp = stderr;
	pd.context = &ctx.ibv_ctx.context;
	setvbuf(stdout, NULL, _IOFBF, 1 << 20);

	while (fgets(line, sizeof(line), stdin)) {
		char *cmd = strtok(line, " \t\r\n");
		const char *why;

		if (!cmd)
			continue;
		if (!strcmp(cmd, "link"))
			why = do_link();
		else if (!strcmp(cmd, "qp"))
			why = do_qp();
		else if (!strcmp(cmd, "ah"))
			why = do_ah();
		else if (!strcmp(cmd, "wr"))
			why = do_wr();
		else if (!strcmp(cmd, "post"))
			why = do_post();
		else if (!strcmp(cmd, "rwr"))
			why = do_rwr();
		else if (!strcmp(cmd, "postrecv"))
			why = do_postrecv();
		else if (!strcmp(cmd, "srq"))
			why = do_srq();
		else if (!strcmp(cmd, "postsrq"))
			why = do_postsrq();
		else if (!strcmp(cmd, "freesrq"))
			why = do_freesrq();
		else if (!strcmp(cmd, "cq"))
			why = do_cq();
		else if (!strcmp(cmd, "cqe"))
			why = do_cqe();
		else if (!strcmp(cmd, "poll"))
			why = do_poll();
		else if (!strcmp(cmd, "arm"))
			why = do_arm();
		else if (!strcmp(cmd, "event"))
			why = do_event();
		else
			why = "unknown request";
		if (why)
			printf("err %s\n", why);
		else
			printf("ok\n");
		fflush(stdout);
	}
	return 0;
}
