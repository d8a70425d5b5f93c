/*
 * rdma_rw_verbs: the rdma-core (libibverbs) side of uhca's examples/rdma_rw.rs, for the
 * VM rig's Soft-RoCE interoperability test. Same protocol, byte for byte:
 *
 *   exchange (TCP, port 18515 unless -p): the client sends an 87-byte message, NUL
 *     included, "LID:QPN:PSN:GID:RKEY:VADDR:LEN" = "%04x:%06x:%06x:<32 hex digits of the
 *     GID>:%08x:%016llx:%08x"; the server brings its QP up and answers with its own. The
 *     connection then carries lines of text ("...\n").
 *   buffer: 3 * size + 32 bytes, A (the peer writes it), B (this side's pattern, the peer
 *     reads it), C (this side's READ lands there).
 *   each round r: fill B with pattern(me, r), meet ("ready r"); post RDMA WRITE B -> the
 *     peer's A and RDMA READ the peer's B -> C, wait for both; meet ("done r"); check A
 *     and C against pattern(peer, r); exchange verdicts ("ok r" / "bad r").
 *   then the atomics: past C, D holds two 8-byte words stored in the host's byte order,
 *     0x1122334455667788 and 0x00000000ffffffff, and E (16 bytes) is zeroed; meet
 *     ("atomic ready"); post a compare-and-swap of the peer's first word (compare
 *     0x1122334455667788, swap 0x8877665544332211) and a fetch-and-add of 1 to its second,
 *     fetching into E; meet ("atomic done"); check, with host-order loads, D (swapped,
 *     0x0000000100000000) and E (the peer's first values); exchange verdicts
 *     ("ok atomics" / "bad atomics").
 *
 * usage: rdma_rw_verbs [-d dev] [-i port] [-g gid_index] [-p tcp_port] [-s size]
 *                      [-n rounds] [SERVER]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MSG_LEN 87
#define ATOMIC_AREA 32
#define CAS_FIRST 0x1122334455667788ULL
#define CAS_SWAP 0x8877665544332211ULL
#define FAA_FIRST 0x00000000ffffffffULL

static int sock = -1;

static void die(const char *what)
{
	fprintf(stderr, "rdma_rw_verbs: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
	exit(1);
}

static uint8_t pattern(int client, unsigned round, size_t i)
{
	uint32_t seed = client ? 0x5a : 0xa5;
	return (uint8_t)(((uint32_t)i * 7 + ((uint32_t)i >> 8) + seed + round * 13) & 0xff);
}

struct dest {
	unsigned lid, qpn, psn, rkey, len;
	unsigned long long addr;
	uint8_t gid[16];
};

static void to_wire(const struct dest *d, char *msg)
{
	char g[33];
	for (int i = 0; i < 16; i++)
		sprintf(g + 2 * i, "%02x", d->gid[i]);
	memset(msg, 0, MSG_LEN);
	snprintf(msg, MSG_LEN, "%04x:%06x:%06x:%s:%08x:%016llx:%08x", d->lid, d->qpn, d->psn, g,
		 d->rkey, d->addr, d->len);
}

static int from_wire(const char *msg, struct dest *d)
{
	char g[33];
	if (strnlen(msg, MSG_LEN) != MSG_LEN - 1)
		return -1;
	if (sscanf(msg, "%x:%x:%x:%32[0-9a-f]:%x:%llx:%x", &d->lid, &d->qpn, &d->psn, g, &d->rkey,
		   &d->addr, &d->len) != 7 || strlen(g) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(g + 2 * i, "%2x", &v);
		d->gid[i] = v;
	}
	return 0;
}

static void xfer(int wr, void *buf, size_t n)
{
	char *p = buf;
	while (n) {
		ssize_t k = wr ? write(sock, p, n) : read(sock, p, n);
		if (k <= 0)
			die(wr ? "write to peer" : "read from peer (closed?)");
		p += k, n -= k;
	}
}

static void send_line(const char *s)
{
	char b[300];
	int n = snprintf(b, sizeof b, "%s\n", s);
	xfer(1, b, n);
}

static void recv_line(char *b, size_t cap)
{
	size_t n = 0;
	for (;;) {
		char c;
		xfer(0, &c, 1);
		if (c == '\n')
			break;
		if (n + 1 < cap)
			b[n++] = c;
	}
	b[n] = 0;
}

static void meet(const char *line)
{
	char theirs[300];
	send_line(line);
	recv_line(theirs, sizeof theirs);
	if (strcmp(theirs, line)) {
		fprintf(stderr, "rdma_rw_verbs: out of step: sent \"%s\", peer sent \"%s\"\n", line, theirs);
		exit(1);
	}
}

static void connect_qp(struct ibv_qp *qp, int port, int gidx, const struct dest *peer, unsigned psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .dlid = peer->lid, .sl = 0, .port_num = port },
	};
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

/* The round of atomics (the header): D at `d` in this side's buffer, at offset `off` in the
 * peer's; E follows D. */
static int atomics(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, uint8_t *d,
		   const struct dest *peer, size_t off)
{
	uint64_t *w = (uint64_t *)d; /* D: w[0], w[1]; E: w[2], w[3] */
	w[0] = CAS_FIRST;
	w[1] = FAA_FIRST;
	w[2] = w[3] = 0;
	meet("atomic ready");
	struct ibv_sge cs = { .addr = (uintptr_t)&w[2], .length = 8, .lkey = mr->lkey };
	struct ibv_sge fs = { .addr = (uintptr_t)&w[3], .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr faa = { .wr_id = 8, .sg_list = &fs, .num_sge = 1,
				   .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .send_flags = IBV_SEND_SIGNALED,
				   .wr.atomic = { .remote_addr = peer->addr + off + 8, .rkey = peer->rkey,
						  .compare_add = 1 } };
	struct ibv_send_wr cas = { .wr_id = 4, .next = &faa, .sg_list = &cs, .num_sge = 1,
				   .opcode = IBV_WR_ATOMIC_CMP_AND_SWP, .send_flags = IBV_SEND_SIGNALED,
				   .wr.atomic = { .remote_addr = peer->addr + off, .rkey = peer->rkey,
						  .compare_add = CAS_FIRST, .swap = CAS_SWAP } }, *bad;
	if (ibv_post_send(qp, &cas, &bad))
		die("ibv_post_send (atomics)");
	int pending = 12;
	time_t start = time(NULL);
	while (pending) {
		struct ibv_wc wc[4];
		int n = ibv_poll_cq(cq, 4, wc);
		if (n < 0)
			die("ibv_poll_cq");
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "rdma_rw_verbs: atomics: %s for wr_id %d\n",
					ibv_wc_status_str(wc[k].status), (int)wc[k].wr_id);
				return 1;
			}
			pending &= ~(int)wc[k].wr_id;
		}
		if (!n && time(NULL) - start > 30) {
			fprintf(stderr, "rdma_rw_verbs: atomics: no completion\n");
			return 1;
		}
	}
	meet("atomic done");
	int good = w[0] == CAS_SWAP && w[1] == FAA_FIRST + 1 && w[2] == CAS_FIRST && w[3] == FAA_FIRST;
	printf("  atomics: D (swapped, added to by the peer) %016llx %016llx, E (fetched from the peer) %016llx %016llx; bytes",
	       (unsigned long long)w[0], (unsigned long long)w[1], (unsigned long long)w[2],
	       (unsigned long long)w[3]);
	for (int i = 0; i < 16; i++)
		printf(" %02x", d[i]);
	printf("\n");
	send_line(good ? "ok atomics" : "bad atomics");
	char theirs[300];
	recv_line(theirs, sizeof theirs);
	if (!good) {
		fprintf(stderr, "rdma_rw_verbs: atomics: wrong words in host order\n");
		return 1;
	}
	if (strcmp(theirs, "ok atomics")) {
		fprintf(stderr, "rdma_rw_verbs: atomics: the peer says \"%s\"\n", theirs);
		return 1;
	}
	printf("rdma_rw_verbs: compare-and-swap and fetch-and-add each way, on host-order words, verified on both sides\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *devname = NULL, *server = NULL;
	int port = 1, gidx = -1, tcp_port = 18515, c;
	size_t size = 65536;
	unsigned iters = 10;
	while ((c = getopt(argc, argv, "d:i:g:p:s:n:")) != -1) {
		switch (c) {
		case 'd': devname = optarg; break;
		case 'i': port = atoi(optarg); break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': tcp_port = atoi(optarg); break;
		case 's': size = strtoul(optarg, NULL, 0); break;
		case 'n': iters = strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-i port] [-g gid_index] [-p tcp_port] [-s size] [-n rounds] [SERVER]\n", argv[0]);
			return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];
	if (gidx < 0 || size == 0 || size % 8 || iters == 0) {
		fprintf(stderr, "rdma_rw_verbs: -g is required (RoCE), size a positive multiple of 8, rounds positive\n");
		return 2;
	}
	int client = server != NULL;
	srand48(getpid() * time(NULL));

	struct ibv_device **list = ibv_get_device_list(NULL), *dev = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!devname || !strcmp(ibv_get_device_name(list[i]), devname)) {
			dev = list[i];
			break;
		}
	if (!dev)
		die("no such IB device");
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	size_t len = 3 * size + ATOMIC_AREA;
	uint8_t *buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	if (!pd || !buf)
		die("alloc");
	memset(buf, 0, len);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!mr || !cq)
		die("reg_mr/create_cq");
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr ia = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	if (ibv_modify_qp(qp, &ia, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	struct ibv_port_attr pa;
	union ibv_gid gid;
	if (ibv_query_port(ctx, port, &pa) || ibv_query_gid(ctx, port, gidx, &gid))
		die("query port/gid");
	struct dest me = { .lid = pa.lid, .qpn = qp->qp_num, .psn = lrand48() & 0xffffff,
			   .rkey = mr->rkey, .addr = (uintptr_t)buf, .len = len }, peer;
	memcpy(me.gid, gid.raw, 16);
	char msg[MSG_LEN], pmsg[MSG_LEN];
	to_wire(&me, msg);
	printf("  local:  %s\n", msg);

	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai;
	char ps[8];
	snprintf(ps, sizeof ps, "%d", tcp_port);
	if (getaddrinfo(server, ps, &hints, &ai))
		die("getaddrinfo");
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (client) {
		if (connect(s, ai->ai_addr, ai->ai_addrlen))
			die("connect");
		sock = s;
		xfer(1, msg, MSG_LEN);
		xfer(0, pmsg, MSG_LEN);
		if (from_wire(pmsg, &peer))
			die("bad message from the server");
		connect_qp(qp, port, gidx, &peer, me.psn);
	} else {
		int one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, 1))
			die("bind/listen");
		sock = accept(s, NULL, NULL);
		if (sock < 0)
			die("accept");
		close(s);
		xfer(0, pmsg, MSG_LEN);
		if (from_wire(pmsg, &peer))
			die("bad message from the client");
		connect_qp(qp, port, gidx, &peer, me.psn);
		xfer(1, msg, MSG_LEN);
	}
	printf("  remote: %.86s\n", pmsg);
	fflush(stdout);
	if (peer.len < len)
		die("the peer's buffer is too small");

	uint8_t *A = buf, *B = buf + size, *C = buf + 2 * size;
	struct timeval t0, t1;
	gettimeofday(&t0, NULL);
	for (unsigned r = 0; r < iters; r++) {
		char line[64];
		for (size_t i = 0; i < size; i++)
			B[i] = pattern(client, r, i);
		memset(C, 0, size);
		snprintf(line, sizeof line, "ready %u", r);
		meet(line);
		struct ibv_sge ws = { .addr = (uintptr_t)B, .length = size, .lkey = mr->lkey };
		struct ibv_sge rs = { .addr = (uintptr_t)C, .length = size, .lkey = mr->lkey };
		struct ibv_send_wr rd = { .wr_id = 2, .sg_list = &rs, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = peer.addr + size, .rkey = peer.rkey } };
		struct ibv_send_wr wr = { .wr_id = 1, .next = &rd, .sg_list = &ws, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = peer.addr, .rkey = peer.rkey } }, *bad;
		if (ibv_post_send(qp, &wr, &bad))
			die("ibv_post_send");
		int pending = 3;
		time_t start = time(NULL);
		while (pending) {
			struct ibv_wc wc[4];
			int n = ibv_poll_cq(cq, 4, wc);
			if (n < 0)
				die("ibv_poll_cq");
			for (int k = 0; k < n; k++) {
				if (wc[k].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "rdma_rw_verbs: round %u: %s for wr_id %d\n", r,
						ibv_wc_status_str(wc[k].status), (int)wc[k].wr_id);
					return 1;
				}
				pending &= ~(int)wc[k].wr_id;
			}
			if (!n && time(NULL) - start > 30) {
				fprintf(stderr, "rdma_rw_verbs: round %u: no completion\n", r);
				return 1;
			}
		}
		snprintf(line, sizeof line, "done %u", r);
		meet(line);
		long badA = -1, badC = -1;
		for (size_t i = 0; i < size; i++) {
			uint8_t want = pattern(!client, r, i);
			if (badA < 0 && A[i] != want)
				badA = i;
			if (badC < 0 && C[i] != want)
				badC = i;
		}
		snprintf(line, sizeof line, "%s %u", badA < 0 && badC < 0 ? "ok" : "bad", r);
		send_line(line);
		char theirs[300];
		recv_line(theirs, sizeof theirs);
		if (badA >= 0 || badC >= 0) {
			fprintf(stderr, "rdma_rw_verbs: round %u: A (written by the peer) first differs at %ld, "
				"C (read from the peer) at %ld (-1: equal)\n", r, badA, badC);
			return 1;
		}
		snprintf(line, sizeof line, "ok %u", r);
		if (strcmp(theirs, line)) {
			fprintf(stderr, "rdma_rw_verbs: round %u: the peer says \"%s\"\n", r, theirs);
			return 1;
		}
	}
	gettimeofday(&t1, NULL);
	printf("rdma_rw_verbs: %u rounds of RDMA WRITE %zu B + RDMA READ %zu B each way, data verified on both sides, in %.2f s\n",
	       iters, size, size, (t1.tv_sec - t0.tv_sec) + (t1.tv_usec - t0.tv_usec) / 1e6);
	fflush(stdout);
	if (atomics(qp, cq, mr, buf + 3 * size, &peer, 3 * size))
		return 1;
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
