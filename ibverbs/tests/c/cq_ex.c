/* ibv_create_cq_ex and the ibv_start_poll/ibv_next_poll/ibv_end_poll way of reading
 * completions (ibv_wc_read_*), between two devices of one process (UHCA_DEVICES names two
 * mocks on loopback addresses), and the refusals a program sees. Prints one PASS or FAIL
 * line per check; exits 1 on a FAIL. Written for uhca's tests (ibverbs/tests/ibverbs_utils.rs). */
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
	struct ibv_cq_ex *cqx;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	unsigned char *buf;
	union ibv_gid gid;
};

#define LEN 16384
#define ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static void open_side(struct ibv_device *dev, struct side *s) {
	s->ctx = ibv_open_device(dev);
	if (!s->ctx) { perror("open"); exit(2); }
	s->pd = ibv_alloc_pd(s->ctx);
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .cq_context = s, .wc_flags = IBV_WC_STANDARD_FLAGS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					  .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED };
	s->cqx = ibv_create_cq_ex(s->ctx, &ca);
	if (!s->cqx) { perror("create_cq_ex"); exit(2); }
	s->cq = ibv_cq_ex_to_cq(s->cqx);
	if (posix_memalign((void **)&s->buf, 4096, LEN)) exit(2);
	memset(s->buf, 0, LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN, ALL);
	if (!s->pd || !s->mr) { perror("setup"); exit(2); }
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	s->qp = ibv_create_qp(s->pd, &ia);
	if (!s->qp) { perror("create_qp"); exit(2); }
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

/* Starts polling `cq`, waiting 10 s at most for a completion: 0 or ENOENT. */
static int start_wait(struct ibv_cq_ex *cq) {
	struct ibv_poll_cq_attr attr = { 0 };
	time_t end = time(NULL) + 10;
	int r;
	while ((r = ibv_start_poll(cq, &attr)) == ENOENT && time(NULL) < end)
		;
	return r;
}

/* Polls the next completion of `cq` (10 s at most): 0 or ENOENT. */
static int next_wait(struct ibv_cq_ex *cq) {
	time_t end = time(NULL) + 10;
	int r;
	while ((r = ibv_next_poll(cq)) == ENOENT && time(NULL) < end)
		;
	return r;
}

int main(void) {
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs || n < 2) { fprintf(stderr, "two devices needed\n"); return 2; }
	struct side a, b;
	open_side(devs[0], &a);
	open_side(devs[1], &b);
	check(a.cq->cq_context == &a && (void *)a.cq == (void *)a.cqx && a.cq->cqe >= 64,
	      "ibv_create_cq_ex: a CQ of at least 64 entries, its context, ibv_cq_ex_to_cq a cast");
	struct ibv_cq_init_attr_ex bad = { .cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	errno = 0;
	check(ibv_create_cq_ex(a.ctx, &bad) == NULL && errno == EOPNOTSUPP,
	      "completion timestamps asked for: EOPNOTSUPP");
	bad.wc_flags = IBV_WC_STANDARD_FLAGS;
	bad.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	bad.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	errno = 0;
	check(ibv_create_cq_ex(a.ctx, &bad) == NULL && errno == EOPNOTSUPP, "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: EOPNOTSUPP");
	struct ibv_poll_cq_attr pa = { 0 };
	check(ibv_start_poll(a.cqx, &pa) == ENOENT, "ibv_start_poll on an empty CQ: ENOENT");

	connect_qp(a.qp, &b, b.qp);
	connect_qp(b.qp, &a, a.qp);
	for (int i = 0; i < 100; i++) a.buf[i] = (unsigned char)(i + 3);
	struct ibv_sge rg = { (uintptr_t)b.buf + 8192, 256, b.mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 70, .sg_list = &rg, .num_sge = 1 }, *rbad;
	check(ibv_post_recv(b.qp, &rw, &rbad) == 0, "a receive posted");
	struct ibv_sge g1 = { (uintptr_t)a.buf, 100, a.mr->lkey }, g2 = { (uintptr_t)a.buf, 24, a.mr->lkey },
		       g3 = { (uintptr_t)a.buf + 2048, 100, a.mr->lkey };
	struct ibv_send_wr w[3], *sbad;
	memset(w, 0, sizeof w);
	w[0].wr_id = 1; w[0].opcode = IBV_WR_RDMA_WRITE; w[0].sg_list = &g1; w[0].num_sge = 1;
	w[0].wr.rdma.remote_addr = (uintptr_t)b.buf; w[0].wr.rdma.rkey = b.mr->rkey;
	w[1].wr_id = 2; w[1].opcode = IBV_WR_SEND_WITH_IMM; w[1].sg_list = &g2; w[1].num_sge = 1;
	w[1].imm_data = htonl(0xcafe0001);
	w[2].wr_id = 3; w[2].opcode = IBV_WR_RDMA_READ; w[2].sg_list = &g3; w[2].num_sge = 1;
	w[2].wr.rdma.remote_addr = (uintptr_t)b.buf + 4096; w[2].wr.rdma.rkey = b.mr->rkey;
	for (int i = 0; i < 3; i++) {
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	check(ibv_post_send(a.qp, &w[0], &sbad) == 0, "WRITE, SEND_WITH_IMM, READ posted");

	int r = start_wait(a.cqx);
	int ok = r == 0 && a.cqx->status == IBV_WC_SUCCESS && a.cqx->wr_id == 1 &&
		 ibv_wc_read_opcode(a.cqx) == IBV_WC_RDMA_WRITE && ibv_wc_read_qp_num(a.cqx) == a.qp->qp_num;
	check(ok, "ibv_start_poll: the WRITE's status, wr_id, opcode and QP number");
	r = next_wait(a.cqx);
	check(r == 0 && a.cqx->wr_id == 2 && ibv_wc_read_opcode(a.cqx) == IBV_WC_SEND,
	      "ibv_next_poll: the SEND");
	r = next_wait(a.cqx);
	check(r == 0 && a.cqx->wr_id == 3 && ibv_wc_read_opcode(a.cqx) == IBV_WC_RDMA_READ &&
	      ibv_wc_read_byte_len(a.cqx) == 100, "ibv_next_poll: the READ and its byte_len");
	check(ibv_next_poll(a.cqx) == ENOENT, "ibv_next_poll past the last: ENOENT");
	ibv_end_poll(a.cqx);

	r = start_wait(b.cqx);
	ok = r == 0 && b.cqx->status == IBV_WC_SUCCESS && b.cqx->wr_id == 70 &&
	     ibv_wc_read_opcode(b.cqx) == IBV_WC_RECV && ibv_wc_read_byte_len(b.cqx) == 24 &&
	     (ibv_wc_read_wc_flags(b.cqx) & IBV_WC_WITH_IMM) && ibv_wc_read_imm_data(b.cqx) == htonl(0xcafe0001) &&
	     ibv_wc_read_qp_num(b.cqx) == b.qp->qp_num;
	check(ok, "the receive: IBV_WC_RECV, byte_len, IBV_WC_WITH_IMM and imm_data in network order");
	ibv_end_poll(b.cqx);
	check(memcmp(b.buf, a.buf, 100) == 0 && memcmp(b.buf + 8192, a.buf, 24) == 0, "the WRITE's and the SEND's data");

	/* ibv_poll_cq works on the same CQ. */
	struct ibv_send_wr one = w[0], *obad;
	one.next = NULL;
	one.wr_id = 9;
	check(ibv_post_send(a.qp, &one, &obad) == 0, "one more WRITE");
	struct ibv_wc wc;
	time_t end = time(NULL) + 10;
	int k = 0;
	while (k == 0 && time(NULL) < end)
		k = ibv_poll_cq(a.cq, 1, &wc);
	check(k == 1 && wc.wr_id == 9 && wc.status == IBV_WC_SUCCESS, "ibv_poll_cq on an ibv_cq_ex's CQ");

	check(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0 &&
	      ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "destroy the QPs and the CQs");
	return failed;
}
