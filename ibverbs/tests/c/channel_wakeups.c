/* Completion channels' and async_fd's readiness through uhca's libibverbs, on one device of
 * one process: a channel's fd is readable exactly while a completion event of one of its
 * CQs waits (not for another channel's event, not once the event is taken), and async_fd
 * is not woken by completion events, as the kernel's are. UCX polls these descriptors and
 * calls the verbs on each wake-up, asserting that the event was there.
 * Prints one PASS or FAIL line per check; exits 1 on a FAIL.
 * Written for uhca's tests (ibverbs/tests/ibverbs_utils.rs). */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failed;

static void check(int ok, const char *what) {
	printf("%s %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		failed = 1;
}

static int readable(int fd, int ms) {
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(void) {
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) { fprintf(stderr, "no device\n"); return 2; }
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) { perror("open"); return 2; }
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *cha = ibv_create_comp_channel(ctx);
	struct ibv_comp_channel *chb = ibv_create_comp_channel(ctx);
	if (!pd || !cha || !chb) { perror("setup"); return 2; }
	struct ibv_cq *cqa = ibv_create_cq(ctx, 16, NULL, cha, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, NULL, chb, 0);
	if (!cqa || !cqb) { perror("create_cq"); return 2; }
	fcntl(cha->fd, F_SETFL, fcntl(cha->fd, F_GETFL) | O_NONBLOCK);
	fcntl(chb->fd, F_SETFL, fcntl(chb->fd, F_GETFL) | O_NONBLOCK);

	/* A UD QP sending to itself: its sends complete on cqa, its receives on cqb. */
	struct ibv_qp_init_attr ia = {
		.send_cq = cqa, .recv_cq = cqb, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp) { perror("create_qp"); return 2; }
	struct ibv_qp_attr u = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x22222222 };
	int ok = !ibv_modify_qp(qp, &u, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	u.qp_state = IBV_QPS_RTR;
	ok = ok && !ibv_modify_qp(qp, &u, IBV_QP_STATE);
	u.qp_state = IBV_QPS_RTS;
	ok = ok && !ibv_modify_qp(qp, &u, IBV_QP_STATE | IBV_QP_SQ_PSN);
	check(ok, "UD QP to RTS");
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, 8192)) return 2;
	memset(buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	union ibv_gid gid;
	if (!mr || ibv_query_gid(ctx, 1, 0, &gid)) return 2;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah) { perror("create_ah"); return 2; }

	check(!readable(cha->fd, 0) && !readable(chb->fd, 0) && !readable(ctx->async_fd, 0),
	      "no descriptor readable before any event");
	for (int round = 0; round < 2; round++) {
		struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = 1024, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
		struct ibv_sge ss = { .addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = qp->qp_num;
		sw.wr.ud.remote_qkey = 0x22222222;
		if (ibv_post_recv(qp, &rw, &rbad) || ibv_req_notify_cq(cqb, 0) ||
		    ibv_post_send(qp, &sw, &sbad)) { perror("post"); return 2; }
		/* Only cqb is armed: its receive raises the interrupt. */
		check(readable(chb->fd, 5000), round ? "round 2: the armed CQ's channel readable"
						     : "the armed CQ's channel readable after its completion");
		usleep(100 * 1000);
		check(readable(chb->fd, 0), round ? "round 2: still readable while the event waits"
						  : "still readable 100 ms later: the event is not taken");
		check(!readable(cha->fd, 0), round ? "round 2: the other channel not woken"
						   : "the other channel (no event of its CQ) not woken");
		check(!readable(ctx->async_fd, 0), round ? "round 2: async_fd not woken"
							 : "async_fd not woken by a completion event");
		errno = 0;
		struct ibv_cq *got;
		void *cq_ctx;
		check(ibv_get_cq_event(cha, &got, &cq_ctx) == -1 && errno == EAGAIN,
		      round ? "round 2: the other channel: EAGAIN" : "the other channel: EAGAIN");
		check(ibv_get_cq_event(chb, &got, &cq_ctx) == 0 && got == cqb,
		      round ? "round 2: ibv_get_cq_event names the armed CQ"
			    : "ibv_get_cq_event names the armed CQ");
		ibv_ack_cq_events(cqb, 1);
		check(!readable(chb->fd, 0), round ? "round 2: not readable once the event is taken"
						   : "not readable once the event is taken");
		/* Both completions polled before the next round. */
		int seen = 0;
		for (int i = 0; i < 5000 && seen < 2; i++) {
			struct ibv_wc wc;
			seen += ibv_poll_cq(cqa, 1, &wc) == 1;
			seen += ibv_poll_cq(cqb, 1, &wc) == 1;
			if (seen < 2)
				usleep(1000);
		}
		check(seen == 2, round ? "round 2: send and receive completed" : "send and receive completed");
	}
	ibv_destroy_ah(ah);
	check(ibv_destroy_qp(qp) == 0, "QP destroyed");
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cqa);
	ibv_destroy_cq(cqb);
	ibv_destroy_comp_channel(cha);
	ibv_destroy_comp_channel(chb);
	ibv_dealloc_pd(pd);
	check(ibv_close_device(ctx) == 0, "device closed");
	ibv_free_device_list(list);
	return failed;
}
