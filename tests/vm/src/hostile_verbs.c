/*
 * hostile_verbs: the Linux Soft-RoCE side of the hostile-network comparison
 * (tests/hostile_net/). The same line protocol on standard input and output as uhca's
 * examples/hostile_target.rs, through libibverbs:
 *
 *   rc PEER_IP PEER_QPN RQ_PSN MAX_DEST_RD_ATOMIC
 *        -> QP qpn=N rkey=K va=V len=L rkey_other=K2 va_other=V2
 *   uc PEER_IP PEER_QPN RQ_PSN -> the same, for a UC QP (remote write only)
 *   ud QKEY   -> QP qpn=N qkey=Q
 *   reset     -> QP qpn=N rkey=K va=V len=L      (an RC QP left in RESET)
 *   state     -> STATE state=RTS hash=H recv=ok:SRC_QP:LEN|flush|err(...),...|none
 *   quit
 *
 * An rc QP is in RTS, connected to PEER_QPN at ::ffff:PEER_IP through GID index -g, path MTU
 * 1024, remote write/read/atomic access, one receive posted. Memory: one 8192-byte region
 * (the packets aim at its start; its second half is the receive buffer) in the QP's PD and
 * a 4096-byte region in another PD, both refilled with a fixed pattern for every case.
 *
 * usage: hostile_verbs [-d dev] [-i port] [-g gid_index]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WINDOW 4096
#define RECV 4096

static struct ibv_context *ctx;
static struct ibv_pd *pd, *pd_other;
static struct ibv_cq *cq;
static struct ibv_mr *mr, *mr_other;
static uint8_t *buf, *buf_other;
static struct ibv_qp *qp;
static int port = 1, gid_index = 1;
static char recvs[4096];

static void die(const char *what)
{
	fprintf(stderr, "hostile_verbs: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
	exit(1);
}

static void refill(uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i * 31 + 7) & 0xff);
}

static uint64_t fnv1a(uint64_t h, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x00000100000001b3ULL;
	}
	return h;
}

static void add_recv(const struct ibv_wc *wc)
{
	char one[64];
	if (wc->status == IBV_WC_SUCCESS)
		snprintf(one, sizeof one, "ok:%u:%u", wc->src_qp, wc->byte_len);
	else if (wc->status == IBV_WC_WR_FLUSH_ERR)
		snprintf(one, sizeof one, "flush");
	else
		snprintf(one, sizeof one, "err(%s)", ibv_wc_status_str(wc->status));
	if (recvs[0] && strlen(recvs) + 1 < sizeof recvs)
		strcat(recvs, ",");
	if (strlen(recvs) + strlen(one) < sizeof recvs)
		strcat(recvs, one);
}

static void drain(int keep)
{
	struct ibv_wc wc[8];
	int n;
	while ((n = ibv_poll_cq(cq, 8, wc)) > 0)
		for (int i = 0; keep && i < n; i++)
			add_recv(&wc[i]);
}

/* Destroys the current QP; clean memory and an empty CQ for the next case. */
static void clear(void)
{
	if (qp && ibv_destroy_qp(qp))
		die("ibv_destroy_qp");
	qp = NULL;
	drain(0);
	recvs[0] = 0;
	refill(buf, WINDOW + RECV);
	refill(buf_other, WINDOW);
}

static struct ibv_qp *create(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	if (!q)
		die("ibv_create_qp");
	return q;
}

static void post_recv(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + WINDOW, .length = RECV, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

/* An RC or UC QP in RTS, connected to PEER_QPN at ::ffff:ip. */
static void cmd_connected(enum ibv_qp_type type, const char *ip, unsigned peer_qpn,
			  unsigned rq_psn, unsigned rd)
{
	int rc = type == IBV_QPT_RC;
	clear();
	qp = create(type);
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   (rc ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0),
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	post_recv();
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer_qpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = rd;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = port;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = gid_index;
	uint8_t *g = a.ah_attr.grh.dgid.raw;
	g[10] = 0xff;
	g[11] = 0xff;
	if (inet_pton(AF_INET, ip, g + 12) != 1) {
		errno = 0;
		die("bad PEER_IP");
	}
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (rc)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTS");
	printf("QP qpn=%u rkey=%u va=%llu len=%u rkey_other=%u va_other=%llu\n", qp->qp_num,
	       mr->rkey, (unsigned long long)(uintptr_t)buf, WINDOW + RECV, mr_other->rkey,
	       (unsigned long long)(uintptr_t)buf_other);
}

static void cmd_ud(unsigned qkey)
{
	clear();
	qp = create(IBV_QPT_UD);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port,
				 .qkey = qkey };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("modify to INIT");
	post_recv();
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("modify to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify to RTS");
	printf("QP qpn=%u qkey=%u\n", qp->qp_num, qkey);
}

static void cmd_reset(void)
{
	clear();
	qp = create(IBV_QPT_RC);
	printf("QP qpn=%u rkey=%u va=%llu len=%u\n", qp->qp_num, mr->rkey,
	       (unsigned long long)(uintptr_t)buf, WINDOW + RECV);
}

static const char *state_name(enum ibv_qp_state s)
{
	switch (s) {
	case IBV_QPS_RESET: return "RESET";
	case IBV_QPS_INIT: return "INIT";
	case IBV_QPS_RTR: return "RTR";
	case IBV_QPS_RTS: return "RTS";
	case IBV_QPS_SQD: return "SQD";
	case IBV_QPS_SQE: return "SQE";
	case IBV_QPS_ERR: return "ERROR";
	default: return "UNKNOWN";
	}
}

static void cmd_state(void)
{
	/* Completions the packets produced: rxe writes them from its tasklets; poll a while. */
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		drain(1);
		usleep(5000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 50);
	const char *st = "NONE";
	if (qp) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
			die("ibv_query_qp");
		st = state_name(a.qp_state);
	}
	uint64_t h = fnv1a(0xcbf29ce484222325ULL, buf, WINDOW + RECV);
	h = fnv1a(h, buf_other, WINDOW);
	printf("STATE state=%s hash=%016llx recv=%s\n", st, (unsigned long long)h,
	       recvs[0] ? recvs : "none");
}

static unsigned num(const char *s)
{
	return (unsigned)strtoul(s, NULL, 0);
}

int main(int argc, char **argv)
{
	const char *dev = "rxe0";
	int c;
	while ((c = getopt(argc, argv, "d:i:g:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'i': port = atoi(optarg); break;
		case 'g': gid_index = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: hostile_verbs [-d dev] [-i port] [-g gid_index]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("no such device");
	pd = ibv_alloc_pd(ctx);
	pd_other = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !pd_other || !cq)
		die("ibv_alloc_pd/ibv_create_cq");
	if (posix_memalign((void **)&buf, 4096, WINDOW + RECV) ||
	    posix_memalign((void **)&buf_other, 4096, WINDOW))
		die("posix_memalign");
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	mr = ibv_reg_mr(pd, buf, WINDOW + RECV, access);
	mr_other = ibv_reg_mr(pd_other, buf_other, WINDOW, access);
	if (!mr || !mr_other)
		die("ibv_reg_mr");
	refill(buf, WINDOW + RECV);
	refill(buf_other, WINDOW);
	printf("READY\n");
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		char *w[6] = { 0 };
		int k = 0;
		for (char *s = strtok(line, " \t\r\n"); s && k < 6; s = strtok(NULL, " \t\r\n"))
			w[k++] = s;
		if (!k)
			continue;
		if (!strcmp(w[0], "rc") && k == 5)
			cmd_connected(IBV_QPT_RC, w[1], num(w[2]), num(w[3]), num(w[4]));
		else if (!strcmp(w[0], "uc") && k == 4)
			cmd_connected(IBV_QPT_UC, w[1], num(w[2]), num(w[3]), 0);
		else if (!strcmp(w[0], "ud") && k == 2)
			cmd_ud(num(w[1]));
		else if (!strcmp(w[0], "reset"))
			cmd_reset();
		else if (!strcmp(w[0], "state"))
			cmd_state();
		else if (!strcmp(w[0], "quit"))
			break;
		else
			printf("ERROR unknown command: %s\n", w[0]);
	}
	clear();
	ibv_dereg_mr(mr);
	ibv_dereg_mr(mr_other);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_dealloc_pd(pd_other);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
