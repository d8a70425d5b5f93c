/* Asynchronous events through uhca's libibverbs, on one device of one process: the
 * context's async_fd (poll(2), O_NONBLOCK), ibv_get_async_event / ibv_ack_async_event with
 * the object each event names, and a destroy that waits for its events' acknowledgement.
 * Prints one PASS or FAIL line per check; exits 1 on a FAIL.
 * Written for uhca's tests (ibverbs/tests/ibverbs_utils.rs). */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failed;

static void check(int ok, const char *what) {
	printf("%s %s\n", ok ? "PASS" : "FAIL", what);
	if (!ok)
		failed = 1;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_async_event pending;

static void *ack_later(void *arg) {
	(void)arg;
	usleep(300 * 1000);
	ibv_ack_async_event(&pending);
	return NULL;
}

/* Waits up to 5 s for async_fd to become readable, then takes one event (the fd is
 * non-blocking, so a wake-up without an event is EAGAIN: waited again). */
static int next_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
	double end = now() + 5;
	while (now() < end) {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		if (poll(&p, 1, 100) < 0)
			return -1;
		if (ibv_get_async_event(ctx, ev) == 0)
			return 0;
		if (errno != EAGAIN)
			return -1;
	}
	errno = ETIMEDOUT;
	return -1;
}

int main(void) {
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) { fprintf(stderr, "no device\n"); return 2; }
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) { perror("open"); return 2; }
	struct ibv_async_event ev;

	check(ctx->async_fd >= 0, "async_fd is a file descriptor");
	int fl = fcntl(ctx->async_fd, F_GETFL);
	check(fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK set on async_fd");
	errno = 0;
	check(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN,
	      "no event yet: -1 and EAGAIN with O_NONBLOCK");
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	check(poll(&p, 1, 0) == 0, "async_fd not readable without an event");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!pd || !cq || !srq) { perror("setup"); return 2; }
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp) { perror("create_qp"); return 2; }
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	check(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS) == 0, "QP on the SRQ to INIT");

	/* An SRQ's QP moved to ERR: the device reports its last WQE. */
	a.qp_state = IBV_QPS_ERR;
	check(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "QP on the SRQ to ERR");
	p.revents = 0;
	check(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "async_fd readable after the event");
	int got = next_event(ctx, &ev);
	check(got == 0, "ibv_get_async_event returns the event");
	check(got == 0 && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED,
	      "event_type IBV_EVENT_QP_LAST_WQE_REACHED");
	check(got == 0 && ev.element.qp == qp, "element.qp is the QP");
	errno = 0;
	check(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "one event only: then EAGAIN");

	/* ibv_destroy_qp waits for the acknowledgement of the QP's event (acked 300 ms later
	 * from another thread). */
	pending.element.qp = qp;
	pending.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
	pthread_t t;
	pthread_create(&t, NULL, ack_later, NULL);
	double t0 = now();
	int rc = ibv_destroy_qp(qp);
	double waited = now() - t0;
	pthread_join(t, NULL);
	check(rc == 0, "ibv_destroy_qp after the acknowledgement: 0");
	check(waited >= 0.25, "ibv_destroy_qp waited for ibv_ack_async_event");

	/* The SRQ's limit: armed at 4 with 4 receives posted, it fires once a UD send to a QP
	 * of its own (through the loopback of the device's UDP port) consumes one (3 left,
	 * fewer than the limit). */
	struct ibv_srq_attr la = { .srq_limit = 4 };
	unsigned char *buf;
	if (posix_memalign((void **)&buf, 4096, 8192)) return 2;
	memset(buf, 0, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) { perror("reg_mr"); return 2; }
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf + 1024 * i, .length = 1024, .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		if (ibv_post_srq_recv(srq, &w, &bad)) { perror("post_srq_recv"); return 2; }
	}
	check(ibv_modify_srq(srq, &la, IBV_SRQ_LIMIT) == 0, "SRQ limit armed at 4");
	errno = 0;
	check(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "no event while 4 are posted");
	struct ibv_qp_init_attr ua = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
	};
	struct ibv_qp *ud = ibv_create_qp(pd, &ua);
	if (!ud) { perror("create UD qp"); return 2; }
	struct ibv_qp_attr u = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	int ok = !ibv_modify_qp(ud, &u, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	u.qp_state = IBV_QPS_RTR;
	ok = ok && !ibv_modify_qp(ud, &u, IBV_QP_STATE);
	u.qp_state = IBV_QPS_RTS;
	ok = ok && !ibv_modify_qp(ud, &u, IBV_QP_STATE | IBV_QP_SQ_PSN);
	check(ok, "UD QP on the SRQ to RTS");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid)) return 2;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = gid, .sgid_index = 0, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	check(ah != NULL, "AH to the device's own GID");
	struct ibv_sge s = { .addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = ud->qp_num;
	w.wr.ud.remote_qkey = 0x11111111;
	check(ibv_post_send(ud, &w, &bad) == 0, "UD send to itself posted");
	int recvs = 0, sends = 0;
	for (double end = now() + 5; now() < end && !(recvs && sends);) {
		struct ibv_wc wc;
		if (ibv_poll_cq(cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS) {
			recvs += wc.opcode == IBV_WC_RECV;
			sends += wc.opcode == IBV_WC_SEND;
		} else
			usleep(1000);
	}
	check(recvs == 1 && sends == 1, "the datagram came back to the SRQ");
	got = next_event(ctx, &ev);
	check(got == 0 && ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED,
	      "event_type IBV_EVENT_SRQ_LIMIT_REACHED");
	check(got == 0 && ev.element.srq == srq, "element.srq is the SRQ");
	if (got == 0)
		ibv_ack_async_event(&ev);
	struct ibv_srq_attr q;
	check(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0, "the limit is disarmed once fired");

	/* Without O_NONBLOCK, ibv_get_async_event waits on async_fd for the event (a second
	 * QP of the SRQ moved to ERR; alarm(): a hang fails the test). */
	check(fcntl(ctx->async_fd, F_SETFL, fl) == 0, "O_NONBLOCK cleared");
	struct ibv_qp *qp2 = ibv_create_qp(pd, &ia);
	if (!qp2) { perror("create_qp"); return 2; }
	a.qp_state = IBV_QPS_INIT;
	ok = !ibv_modify_qp(qp2, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS);
	a.qp_state = IBV_QPS_ERR;
	ok = ok && !ibv_modify_qp(qp2, &a, IBV_QP_STATE);
	alarm(20);
	got = ibv_get_async_event(ctx, &ev);
	alarm(0);
	check(ok && got == 0 && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
	      ev.element.qp == qp2, "a blocking ibv_get_async_event returns the next event");
	if (got == 0)
		ibv_ack_async_event(&ev);
	check(ibv_destroy_qp(qp2) == 0, "its QP destroyed at once (acknowledged)");
	ibv_destroy_ah(ah);
	check(ibv_destroy_qp(ud) == 0, "UD QP destroyed");
	check(ibv_destroy_srq(srq) == 0, "SRQ destroyed (its event acknowledged)");
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	check(ibv_close_device(ctx) == 0, "device closed");
	ibv_free_device_list(list);
	return failed;
}
