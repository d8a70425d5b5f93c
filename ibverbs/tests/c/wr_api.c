/* ibv_create_qp_ex and the ibv_wr_* way of posting (ibv_qp_to_qp_ex, ibv_wr_start,
 * ibv_wr_<operation>, ibv_wr_set_*, ibv_wr_complete/ibv_wr_abort) between two devices of one
 * process (UHCA_DEVICES names two mocks on loopback addresses), checked in memory and in the
 * completions, and the refusals a program sees. Prints one PASS or FAIL line per check;
 * exits 1 on a FAIL. Written for uhca's tests (ibverbs/tests/ibverbs_utils.rs). */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failed;

static void check(int ok, const char *what) {
	printf("%s %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		failed = 1;
}

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	unsigned char *buf;
	union ibv_gid gid;
};

#define LEN 16384
#define ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	     IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
	     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static struct ibv_qp *create_ex(struct side *s, uint64_t ops, uint32_t max_send_wr) {
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = max_send_wr, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = s->pd, .send_ops_flags = ops,
	};
	return ibv_create_qp_ex(s->ctx, &ia);
}

static void open_side(struct ibv_device *dev, struct side *s) {
	s->ctx = ibv_open_device(dev);
	if (!s->ctx) { perror("open"); exit(2); }
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, s, NULL, 0);
	if (posix_memalign((void **)&s->buf, 4096, LEN)) exit(2);
	memset(s->buf, 0, LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN, ALL);
	if (!s->pd || !s->cq || !s->mr) { perror("setup"); exit(2); }
	s->qp = create_ex(s, OPS, 32);
	if (!s->qp) { perror("create_qp_ex"); exit(2); }
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	if (ibv_query_gid(s->ctx, 1, 0, &s->gid)) exit(2);
}

static void connect_qp(struct ibv_qp *qp, struct side *peer, struct ibv_qp *peer_qp) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0, .qp_access_flags = ALL };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) exit(3);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer_qp->qp_num;
	a.rq_psn = 0x20;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) exit(3);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x20;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) exit(3);
}

/* Polls `n` completions of `cq` into `wc` (10 s at most); the count. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int n) {
	int got = 0;
	time_t end = time(NULL) + 10;
	while (got < n && time(NULL) < end) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return k;
		got += k;
	}
	return got;
}

/* Nothing arrives on `cq` within 300 ms. */
static int stays_empty(struct ibv_cq *cq) {
	struct ibv_wc wc;
	struct timespec t = { 0, 300 * 1000 * 1000 };
	nanosleep(&t, NULL);
	return ibv_poll_cq(cq, 1, &wc) == 0;
}

static void post_recv(struct side *s, uint64_t id, size_t off, uint32_t len) {
	struct ibv_sge g = { .addr = (uintptr_t)(s->buf + off), .length = len, .lkey = s->mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &g, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s->qp, &w, &bad)) exit(4);
}

int main(void) {
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs || n < 2) { fprintf(stderr, "two devices needed\n"); return 2; }
	struct side a, b;
	open_side(devs[0], &a);
	open_side(devs[1], &b);
	check(a.qpx != NULL && b.qpx != NULL && &a.qpx->qp_base == a.qp,
	      "ibv_qp_to_qp_ex of a QP of ibv_create_qp_ex with send_ops_flags: the QP's ibv_qp_ex");

	struct ibv_qp_init_attr plain = { .send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
					  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *p = ibv_create_qp(a.pd, &plain);
	check(p != NULL && ibv_qp_to_qp_ex(p) == NULL, "ibv_qp_to_qp_ex of a QP of ibv_create_qp: NULL");
	if (p) ibv_destroy_qp(p);
	errno = 0;
	check(create_ex(&a, OPS | IBV_QP_EX_WITH_BIND_MW, 8) == NULL && errno == EOPNOTSUPP,
	      "send_ops_flags with an operation not offered (BIND_MW): EOPNOTSUPP");
	struct ibv_qp_init_attr_ex nopd = { .send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
					    .cap = { .max_send_wr = 4, .max_send_sge = 1 },
					    .comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .send_ops_flags = OPS };
	errno = 0;
	check(ibv_create_qp_ex(a.ctx, &nopd) == NULL && errno == EINVAL, "ibv_create_qp_ex without a PD: EINVAL");

	connect_qp(a.qp, &b, b.qp);
	connect_qp(b.qp, &a, a.qp);

	for (int i = 0; i < 200; i++) a.buf[i] = (unsigned char)(i * 7 + 1);
	for (int i = 0; i < 300; i++) b.buf[4096 + i] = (unsigned char)(i ^ 0x3c);
	uint64_t v = 1000; memcpy(b.buf + 8192, &v, 8);
	v = 40; memcpy(b.buf + 8200, &v, 8);
	post_recv(&b, 100, 12288, 256);
	post_recv(&b, 101, 12544, 256);

	/* One batch of six operations, one doorbell. */
	uint64_t rb = (uintptr_t)b.buf;
	uint32_t rk = b.mr->rkey, lk = a.mr->lkey;
	char words[40] = "inline, copied by wr_set_inline_data";
	struct ibv_qp_ex *x = a.qpx;
	ibv_wr_start(x);
	x->wr_id = 1; x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, rk, rb + 100);
	ibv_wr_set_sge(x, lk, (uintptr_t)a.buf, 200);
	x->wr_id = 2;
	ibv_wr_rdma_read(x, rk, rb + 4096);
	ibv_wr_set_sge(x, lk, (uintptr_t)a.buf + 1024, 300);
	x->wr_id = 3;
	ibv_wr_atomic_cmp_swp(x, rk, rb + 8192, 1000, 7);
	ibv_wr_set_sge(x, lk, (uintptr_t)a.buf + 2048, 8);
	x->wr_id = 4;
	ibv_wr_atomic_fetch_add(x, rk, rb + 8200, 2);
	ibv_wr_set_sge(x, lk, (uintptr_t)a.buf + 2056, 8);
	x->wr_id = 5;
	ibv_wr_send_imm(x, htonl(0x12345678));
	ibv_wr_set_inline_data(x, words, sizeof words);
	memset(words, 0, sizeof words); /* the library copied them */
	x->wr_id = 6;
	ibv_wr_rdma_write_imm(x, rk, rb + 600, htonl(0x9abcdef0));
	struct ibv_sge two[2] = { { (uintptr_t)a.buf, 8, lk }, { (uintptr_t)a.buf + 16, 8, lk } };
	ibv_wr_set_sge_list(x, 2, two);
	check(ibv_wr_complete(x) == 0, "ibv_wr_complete of WRITE, READ, CAS, FAA, SEND_WITH_IMM (inline), WRITE_WITH_IMM (two SGEs)");
	struct ibv_wc wc[8];
	int k = wait_wc(a.cq, wc, 6);
	int ok = k == 6;
	enum ibv_wc_opcode want[6] = { IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP,
				       IBV_WC_FETCH_ADD, IBV_WC_SEND, IBV_WC_RDMA_WRITE };
	for (int i = 0; ok && i < 6; i++)
		ok = wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i + 1 && wc[i].opcode == want[i];
	check(ok, "six completions, in order, with each request's wr_id and opcode");
	check(memcmp(b.buf + 100, a.buf, 200) == 0, "WRITE landed");
	check(memcmp(a.buf + 1024, b.buf + 4096, 300) == 0, "READ brought the peer's bytes");
	uint64_t y;
	memcpy(&y, a.buf + 2048, 8); check(y == 1000, "CAS returned the old value");
	memcpy(&y, b.buf + 8192, 8); check(y == 7, "CAS swapped");
	memcpy(&y, a.buf + 2056, 8); check(y == 40, "FAA returned the old value");
	memcpy(&y, b.buf + 8200, 8); check(y == 42, "FAA added");
	k = wait_wc(b.cq, wc, 2);
	check(k == 2 && wc[0].wr_id == 100 && wc[0].byte_len == 40 && (wc[0].wc_flags & IBV_WC_WITH_IMM) &&
	      wc[0].imm_data == htonl(0x12345678) &&
	      strcmp((char *)b.buf + 12288, "inline, copied by wr_set_inline_data") == 0,
	      "SEND_WITH_IMM: the inline bytes as they were when set, imm_data in network order");
	check(k == 2 && wc[1].wr_id == 101 && wc[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      wc[1].imm_data == htonl(0x9abcdef0) && memcmp(b.buf + 600, a.buf, 8) == 0 &&
	      memcmp(b.buf + 608, a.buf + 16, 8) == 0,
	      "WRITE_WITH_IMM of two SGEs: both pieces, back to back, and the immediate");

	/* Unsignalled requests complete with the next signalled one. */
	ibv_wr_start(x);
	x->wr_id = 20; x->wr_flags = 0;
	ibv_wr_rdma_write(x, rk, rb + 2048);
	ibv_wr_set_sge(x, lk, (uintptr_t)a.buf, 64);
	x->wr_id = 21; x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, rk, rb + 2048);
	ibv_wr_set_sge(x, lk, (uintptr_t)a.buf, 64);
	check(ibv_wr_complete(x) == 0, "a batch of an unsignalled and a signalled WRITE");
	k = wait_wc(a.cq, wc, 1);
	check(k == 1 && wc[0].wr_id == 21 && stays_empty(a.cq), "only the signalled one completes");

	/* ibv_wr_abort: nothing of the batch is posted. */
	post_recv(&b, 102, 13000, 256);
	ibv_wr_start(x);
	x->wr_id = 30; x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "aborted", 8);
	ibv_wr_abort(x);
	check(stays_empty(a.cq) && stays_empty(b.cq), "an aborted batch sends nothing");
	ibv_wr_start(x);
	x->wr_id = 31;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, "kept", 5);
	check(ibv_wr_complete(x) == 0, "the next batch is posted");
	k = wait_wc(b.cq, wc, 1);
	check(k == 1 && wc[0].wr_id == 102 && wc[0].byte_len == 5 && strcmp((char *)b.buf + 13000, "kept") == 0 &&
	      wait_wc(a.cq, wc, 1) == 1 && wc[0].wr_id == 31, "and only it arrives");

	/* Refusals: the whole batch is dropped, wr_complete says why. */
	struct ibv_qp *sq = create_ex(&a, IBV_QP_EX_WITH_SEND, 4);
	struct ibv_qp_ex *sx = sq ? ibv_qp_to_qp_ex(sq) : NULL;
	check(sx != NULL, "a QP created for SEND only");
	if (sx) {
		connect_qp(sq, &b, b.qp);
		ibv_wr_start(sx);
		sx->wr_id = 40; sx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(sx);
		ibv_wr_set_sge(sx, lk, (uintptr_t)a.buf, 8);
		ibv_wr_rdma_write(sx, rk, rb);
		ibv_wr_set_sge(sx, lk, (uintptr_t)a.buf, 8);
		check(ibv_wr_complete(sx) == EOPNOTSUPP && stays_empty(a.cq),
		      "an operation the QP was not created for: EOPNOTSUPP, nothing of the batch posted");
		ibv_wr_start(sx);
		for (int i = 0; i < 64; i++) {
			sx->wr_id = 50 + i;
			ibv_wr_send(sx);
			ibv_wr_set_sge(sx, lk, (uintptr_t)a.buf, 8);
		}
		check(ibv_wr_complete(sx) == ENOMEM && stays_empty(a.cq),
		      "more requests than the send queue holds: ENOMEM, nothing posted");
		ibv_wr_start(sx);
		sx->wr_id = 60;
		ibv_wr_send(sx);
		ibv_wr_set_sge(sx, lk, (uintptr_t)a.buf + LEN - 4, 8);
		check(ibv_wr_complete(sx) == EINVAL && stays_empty(a.cq),
		      "an SGE outside its MR: EINVAL, as ibv_post_send");
		check(ibv_destroy_qp(sq) == 0, "destroy the SEND-only QP");
	}
	check(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy the QPs of ibv_create_qp_ex");
	return failed;
}
