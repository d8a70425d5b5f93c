/* Every ibv_post_send opcode uhca's libibverbs offers, through the C ABI, between two
 * devices of one process (UHCA_DEVICES names two mocks on loopback addresses), and the
 * refusals a program sees. Prints one PASS or FAIL line per check; exits 1 on a FAIL.
 * Written for uhca's tests (ibverbs/tests/c_abi.rs). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	unsigned char *buf;
	union ibv_gid gid;
	uint32_t max_inline;
};

#define LEN 16384
#define ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static void open_side(struct ibv_device *dev, struct side *s, int with_channel) {
	s->ctx = ibv_open_device(dev);
	if (!s->ctx) { perror("open"); exit(2); }
	s->pd = ibv_alloc_pd(s->ctx);
	s->ch = with_channel ? ibv_create_comp_channel(s->ctx) : NULL;
	s->cq = ibv_create_cq(s->ctx, 64, s, s->ch, 0);
	if (posix_memalign((void **)&s->buf, 4096, LEN)) exit(2);
	memset(s->buf, 0, LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, LEN, ALL);
	if (!s->pd || !s->cq || !s->mr) { perror("setup"); exit(2); }
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 64 },
	};
	s->qp = ibv_create_qp(s->pd, &ia);
	s->max_inline = ia.cap.max_inline_data;
	if (!s->qp) { perror("create_qp"); exit(2); }
	if (ibv_query_gid(s->ctx, 1, 0, &s->gid)) exit(2);
}

static void connect_side(struct side *s, struct side *peer) {
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0, .qp_access_flags = ALL };
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) exit(3);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = 0x20;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) exit(3);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x20;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
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

static struct ibv_sge sge(struct side *s, size_t off, uint32_t len) {
	struct ibv_sge g = { .addr = (uintptr_t)(s->buf + off), .length = len, .lkey = s->mr->lkey };
	return g;
}

int main(void) {
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs || n < 2) { fprintf(stderr, "two devices needed\n"); return 2; }
	struct side a, b;
	open_side(devs[0], &a, 1);
	open_side(devs[1], &b, 0);
	connect_side(&a, &b);
	connect_side(&b, &a);

	for (int i = 0; i < 200; i++) a.buf[i] = (unsigned char)(i * 7 + 1);
	for (int i = 0; i < 300; i++) b.buf[4096 + i] = (unsigned char)(i ^ 0x3c);
	uint64_t v = 1000; memcpy(b.buf + 8192, &v, 8);
	v = 40; memcpy(b.buf + 8200, &v, 8);

	struct ibv_sge r1 = sge(&b, 12288, 256), r2 = sge(&b, 12544, 256);
	struct ibv_recv_wr rw2 = { .wr_id = 101, .sg_list = &r2, .num_sge = 1 };
	struct ibv_recv_wr rw1 = { .wr_id = 100, .next = &rw2, .sg_list = &r1, .num_sge = 1 }, *rbad;
	check(ibv_post_recv(b.qp, &rw1, &rbad) == 0, "post_recv two receives");

	struct ibv_sge s1 = sge(&a, 0, 200), s2 = sge(&a, 1024, 300), s3 = sge(&a, 2048, 8),
		       s4 = sge(&a, 2056, 8), s5 = sge(&a, 0, 16), s6 = sge(&a, 0, 8);
	uint64_t rb = (uintptr_t)b.buf;
	uint32_t rk = b.mr->rkey;
	struct ibv_send_wr w[6];
	memset(w, 0, sizeof w);
	w[0].wr_id = 1; w[0].opcode = IBV_WR_RDMA_WRITE; w[0].sg_list = &s1;
	w[0].wr.rdma.remote_addr = rb + 100; w[0].wr.rdma.rkey = rk;
	w[1].wr_id = 2; w[1].opcode = IBV_WR_RDMA_READ; w[1].sg_list = &s2;
	w[1].wr.rdma.remote_addr = rb + 4096; w[1].wr.rdma.rkey = rk;
	w[2].wr_id = 3; w[2].opcode = IBV_WR_ATOMIC_CMP_AND_SWP; w[2].sg_list = &s3;
	w[2].wr.atomic.remote_addr = rb + 8192; w[2].wr.atomic.rkey = rk;
	w[2].wr.atomic.compare_add = 1000; w[2].wr.atomic.swap = 7;
	w[3].wr_id = 4; w[3].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; w[3].sg_list = &s4;
	w[3].wr.atomic.remote_addr = rb + 8200; w[3].wr.atomic.rkey = rk;
	w[3].wr.atomic.compare_add = 2;
	w[4].wr_id = 5; w[4].opcode = IBV_WR_SEND_WITH_IMM; w[4].sg_list = &s5;
	w[4].imm_data = htonl(0x12345678);
	w[5].wr_id = 6; w[5].opcode = IBV_WR_RDMA_WRITE_WITH_IMM; w[5].sg_list = &s6;
	w[5].wr.rdma.remote_addr = rb + 600; w[5].wr.rdma.rkey = rk; w[5].imm_data = htonl(0x9abcdef0);
	for (int i = 0; i < 6; i++) {
		w[i].num_sge = 1;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].next = i < 5 ? &w[i + 1] : NULL;
	}
	struct ibv_send_wr *bad = NULL;
	check(ibv_post_send(a.qp, &w[0], &bad) == 0, "post_send WRITE, READ, CAS, FAA, SEND_WITH_IMM, WRITE_WITH_IMM");
	struct ibv_wc wc[8];
	int k = wait_wc(a.cq, wc, 6);
	int ok = k == 6;
	enum ibv_wc_opcode want[6] = { IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP,
				       IBV_WC_FETCH_ADD, IBV_WC_SEND, IBV_WC_RDMA_WRITE };
	for (int i = 0; ok && i < 6; i++)
		ok = wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)i + 1 && wc[i].opcode == want[i];
	check(ok, "six send completions, in order, with their opcodes");
	check(k == 6 && wc[1].byte_len == 300 && wc[2].byte_len == 8 && wc[3].byte_len == 8,
	      "byte_len of READ (300) and atomics (8)");
	check(memcmp(b.buf + 100, a.buf, 200) == 0, "WRITE landed at the peer's virtual address");
	check(memcmp(a.buf + 1024, b.buf + 4096, 300) == 0, "READ brought the peer's bytes");
	uint64_t x;
	memcpy(&x, a.buf + 2048, 8); check(x == 1000, "CAS returned the old value");
	memcpy(&x, b.buf + 8192, 8); check(x == 7, "CAS swapped");
	memcpy(&x, a.buf + 2056, 8); check(x == 40, "FAA returned the old value");
	memcpy(&x, b.buf + 8200, 8); check(x == 42, "FAA added");
	k = wait_wc(b.cq, wc, 2);
	check(k == 2 && wc[0].wr_id == 100 && wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == 16 &&
	      (wc[0].wc_flags & IBV_WC_WITH_IMM) && wc[0].imm_data == htonl(0x12345678),
	      "SEND_WITH_IMM: IBV_WC_RECV, byte_len 16, imm_data in network order");
	check(k == 2 && wc[1].wr_id == 101 && wc[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      (wc[1].wc_flags & IBV_WC_WITH_IMM) && wc[1].imm_data == htonl(0x9abcdef0),
	      "WRITE_WITH_IMM: IBV_WC_RECV_RDMA_WITH_IMM, imm_data in network order");
	check(memcmp(b.buf + 600, a.buf, 8) == 0 && memcmp(b.buf + 12288, a.buf, 16) == 0,
	      "the data of both");

	/* Unsignalled requests complete silently with the next signalled one. */
	struct ibv_send_wr u[2];
	struct ibv_sge us = sge(&a, 0, 64);
	memset(u, 0, sizeof u);
	for (int i = 0; i < 2; i++) {
		u[i].wr_id = 20 + i; u[i].opcode = IBV_WR_RDMA_WRITE; u[i].sg_list = &us; u[i].num_sge = 1;
		u[i].wr.rdma.remote_addr = rb + 2048; u[i].wr.rdma.rkey = rk;
	}
	u[0].next = &u[1];
	u[1].send_flags = IBV_SEND_SIGNALED;
	check(ibv_post_send(a.qp, &u[0], &bad) == 0, "post_send unsignalled then signalled");
	k = wait_wc(a.cq, wc, 1);
	check(k == 1 && wc[0].wr_id == 21 && ibv_poll_cq(a.cq, 8, wc) == 0, "only the signalled one completes");

	/* Inline: the bytes come from the application's memory at post time, no key. */
	check(a.max_inline >= 64, "max_inline_data: at least the 64 asked for");
	char words[48] = "inline bytes, copied when posted";
	struct ibv_sge ig = { .addr = (uintptr_t)words, .length = sizeof words, .lkey = 0 };
	struct ibv_sge ir = sge(&b, 13000, 256);
	struct ibv_recv_wr irw = { .wr_id = 102, .sg_list = &ir, .num_sge = 1 };
	check(ibv_post_recv(b.qp, &irw, &rbad) == 0, "a receive for the inline SEND");
	struct ibv_send_wr iw = { .wr_id = 22, .opcode = IBV_WR_SEND, .sg_list = &ig, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	check(ibv_post_send(a.qp, &iw, &bad) == 0, "post_send IBV_SEND_INLINE from unregistered memory");
	memset(words, 0, sizeof words);
	k = wait_wc(a.cq, wc, 1);
	check(k == 1 && wc[0].wr_id == 22 && wc[0].status == IBV_WC_SUCCESS, "the inline SEND completes");
	k = wait_wc(b.cq, wc, 1);
	check(k == 1 && wc[0].wr_id == 102 && wc[0].byte_len == 48 && !(wc[0].wc_flags & IBV_WC_WITH_IMM) &&
	      strcmp((char *)b.buf + 13000, "inline bytes, copied when posted") == 0,
	      "and the peer received the bytes as they were at post time");
	static char big[4096];
	struct ibv_sge bg = { .addr = (uintptr_t)big, .length = sizeof big };
	iw.sg_list = &bg;
	bad = NULL;
	check(ibv_post_send(a.qp, &iw, &bad) == ENOMEM && bad == &iw, "inline beyond max_inline_data: ENOMEM, bad_wr");

	/* A list longer than the library's batch of 16, its 18th request outside its MR: the
	 * 17 before it are posted and complete, bad_wr names the 18th. */
	struct ibv_send_wr lw[20];
	struct ibv_sge lg = sge(&a, 0, 64), lbad = sge(&a, LEN - 8, 64);
	memset(lw, 0, sizeof lw);
	for (int i = 0; i < 20; i++) {
		lw[i].wr_id = 200 + i; lw[i].opcode = IBV_WR_RDMA_WRITE; lw[i].num_sge = 1;
		lw[i].sg_list = i == 17 ? &lbad : &lg; lw[i].send_flags = IBV_SEND_SIGNALED;
		lw[i].wr.rdma.remote_addr = rb + 2048; lw[i].wr.rdma.rkey = rk;
		lw[i].next = i < 19 ? &lw[i + 1] : NULL;
	}
	bad = NULL;
	check(ibv_post_send(a.qp, &lw[0], &bad) == EINVAL && bad == &lw[17],
	      "a list of 20 with the 18th outside its MR: EINVAL, bad_wr is the 18th");
	k = wait_wc(a.cq, wc, 8);
	int k2 = wait_wc(a.cq, wc + 8, 8);
	struct ibv_wc last;
	int k3 = wait_wc(a.cq, &last, 1);
	ok = k == 8 && k2 == 8 && k3 == 1 && last.wr_id == 216 && ibv_poll_cq(a.cq, 1, &last) == 0;
	for (int i = 0; ok && i < 16; i++)
		ok = wc[i].wr_id == (uint64_t)(200 + i) && wc[i].status == IBV_WC_SUCCESS;
	check(ok, "and the 17 before it completed, in order");

	/* Refusals: nothing is posted, bad_wr names the request. */
	struct ibv_sge over = sge(&a, LEN - 8, 64);
	struct ibv_send_wr e = { .wr_id = 30, .opcode = IBV_WR_SEND, .sg_list = &over, .num_sge = 1,
				 .send_flags = IBV_SEND_SIGNALED };
	bad = NULL;
	check(ibv_post_send(a.qp, &e, &bad) == EINVAL && bad == &e, "an lkey not covering the buffer: EINVAL, bad_wr");
	e.sg_list = &s5;
	e.opcode = IBV_WR_LOCAL_INV;
	bad = NULL;
	check(ibv_post_send(a.qp, &e, &bad) == EOPNOTSUPP && bad == &e, "IBV_WR_LOCAL_INV: EOPNOTSUPP, bad_wr");
	check(ibv_poll_cq(a.cq, 8, wc) == 0, "and nothing completes");

	/* The completion channel's fd: not readable without an event, readable once an armed
	 * CQ completes, as poll(2) users (UCX) expect. */
	int fl = fcntl(a.ch->fd, F_GETFL);
	check(fl >= 0 && fcntl(a.ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on the channel's fd");
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	errno = 0;
	check(ibv_get_cq_event(a.ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
	      "no event: ibv_get_cq_event on a non-blocking fd is EAGAIN");
	struct pollfd pfd = { .fd = a.ch->fd, .events = POLLIN };
	check(poll(&pfd, 1, 0) == 0, "no event: the fd is not readable");
	check(ibv_req_notify_cq(a.cq, 0) == 0, "req_notify_cq");
	struct ibv_sge g = sge(&a, 0, 32);
	struct ibv_send_wr nw = { .wr_id = 50, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &g, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED };
	nw.wr.rdma.remote_addr = rb + 2048;
	nw.wr.rdma.rkey = rk;
	check(ibv_post_send(a.qp, &nw, &bad) == 0, "a WRITE on the armed CQ posted");
	check(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "poll(2) on the channel's fd wakes for its completion");
	check(ibv_get_cq_event(a.ch, &ev_cq, &ev_ctx) == 0 && ev_cq == a.cq && ev_ctx == &a,
	      "ibv_get_cq_event names the CQ and its context");
	ibv_ack_cq_events(a.cq, 1);
	k = wait_wc(a.cq, wc, 1);
	check(k == 1 && wc[0].wr_id == 50 && wc[0].status == IBV_WC_SUCCESS, "and the completion is on the CQ");
	errno = 0;
	check(ibv_get_cq_event(a.ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "one event only: then EAGAIN");

	/* Registration. */
	errno = 0;
	check(ibv_reg_mr(a.pd, a.buf, 4096, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL,
	      "remote write without local write: EINVAL");
	errno = 0;
	check(ibv_reg_mr_iova2(a.pd, a.buf, 4096, 0x200000000008ull, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "an iova off the buffer's page offset: EINVAL");
	errno = 0;
	check(ibv_reg_mr(NULL, a.buf, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL, "a NULL PD: EINVAL");
	unsigned char *ro_buf;
	if (posix_memalign((void **)&ro_buf, 4096, 4096)) exit(2);
	strcpy((char *)ro_buf + 64, "read me at the iova");
	uint64_t iova = 0x200000000000ull;
	struct ibv_mr *ro = ibv_reg_mr_iova2(b.pd, ro_buf, 4096, iova, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	check(ro != NULL && ro->addr == ro_buf && ro->length == 4096, "ibv_reg_mr_iova2 at a chosen iova");
	if (ro) {
		struct ibv_sge g = sge(&a, 3072, 20);
		struct ibv_send_wr r = { .wr_id = 40, .opcode = IBV_WR_RDMA_READ, .sg_list = &g, .num_sge = 1,
					 .send_flags = IBV_SEND_SIGNALED };
		r.wr.rdma.remote_addr = iova + 64;
		r.wr.rdma.rkey = ro->rkey;
		check(ibv_post_send(a.qp, &r, &bad) == 0, "READ at the iova posted");
		k = wait_wc(a.cq, wc, 1);
		check(k == 1 && wc[0].status == IBV_WC_SUCCESS && memcmp(a.buf + 3072, "read me at the iova", 20) == 0,
		      "READ at the iova brought the bytes");
		r.wr_id = 41;
		r.opcode = IBV_WR_RDMA_WRITE;
		check(ibv_post_send(a.qp, &r, &bad) == 0, "WRITE to a key without remote write posted");
		k = wait_wc(a.cq, wc, 1);
		check(k == 1 && wc[0].wr_id == 41 && wc[0].status == IBV_WC_REM_ACCESS_ERR,
		      "WRITE to a key without remote write: IBV_WC_REM_ACCESS_ERR");
		check(strcmp((char *)ro_buf + 64, "read me at the iova") == 0, "and the memory is unchanged");
		check(ibv_dereg_mr(ro) == 0, "dereg the iova MR");
	}
	/* SRQ: sizes back in the attributes, the limit armed and read back, no resizing, a
	 * receive outside its MR refused, busy while a QP receives from it. */
	struct ibv_srq_init_attr sia = { .srq_context = &b, .attr = { .max_wr = 100, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(b.pd, &sia);
	check(srq != NULL && sia.attr.max_wr >= 100 && sia.attr.max_sge >= 1 && srq->srq_context == &b,
	      "ibv_create_srq gives at least what was asked");
	if (srq) {
		struct ibv_srq_attr sa = { .srq_limit = 10 };
		check(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "ibv_modify_srq arms the limit");
		memset(&sa, 0, sizeof sa);
		check(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 10 && sa.max_wr == sia.attr.max_wr,
		      "ibv_query_srq reads it back");
		sa.max_wr = 200;
		check(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == EINVAL, "resizing an SRQ: EINVAL");
		struct ibv_sge og = sge(&b, LEN - 8, 64);
		struct ibv_recv_wr orw = { .wr_id = 60, .sg_list = &og, .num_sge = 1 }, *obad = NULL;
		check(ibv_post_srq_recv(srq, &orw, &obad) == EINVAL && obad == &orw,
		      "ibv_post_srq_recv outside the MR: EINVAL, bad_wr");
		struct ibv_qp_init_attr qa = {
			.send_cq = b.cq, .recv_cq = b.cq, .srq = srq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		};
		struct ibv_qp *sq = ibv_create_qp(b.pd, &qa);
		check(sq != NULL && sq->srq == srq, "a QP on the SRQ");
		check(ibv_destroy_srq(srq) == EBUSY, "ibv_destroy_srq while a QP uses it: EBUSY");
		if (sq)
			ibv_destroy_qp(sq);
		check(ibv_destroy_srq(srq) == 0, "then it goes");
	}

	ibv_destroy_qp(a.qp); ibv_destroy_qp(b.qp);
	ibv_dereg_mr(a.mr); ibv_dereg_mr(b.mr);
	ibv_destroy_cq(a.cq); ibv_destroy_cq(b.cq);
	check(ibv_destroy_comp_channel(a.ch) == 0, "destroy the channel after its CQ");
	ibv_dealloc_pd(a.pd); ibv_dealloc_pd(b.pd);
	ibv_close_device(a.ctx); ibv_close_device(b.ctx);
	ibv_free_device_list(devs);
	return failed;
}
